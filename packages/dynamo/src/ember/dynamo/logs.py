"""Logging for ember.dynamo: the shared log areas, and what capture logs.

The areas, ``EMBER_LOGS`` and :func:`set_logs` are ember.ir's
(``ember.ir.logs``): one ``ember.<area>`` logger per area for every package,
so ``set_logs(output_code=True)`` reaches ember.inductor's logger too::

    EMBER_LOGS="graph_breaks,recompiles,+guards"   # +area: DEBUG level
    ember.dynamo.set_logs(graph_breaks=True, guards="debug")

This module adds what the runtime logs after each capture.
"""

from __future__ import annotations

import dis
import io

from ember.ir.logs import (
    AREAS,
    LogSettingsError,
    configure_from_env,
    enabled,
    get_logger,
    parse_log_spec,
    set_logs,
)

__all__ = [
    "AREAS",
    "LogSettingsError",
    "configure_from_env",
    "enabled",
    "get_logger",
    "log_capture",
    "parse_log_spec",
    "set_logs",
]


# -- what the runtime logs after each capture -------------------------------------


def _dis_lines(code: object) -> list[str]:
    out = io.StringIO()
    dis.dis(code, file=out, depth=0)  # type: ignore[arg-type]
    return out.getvalue().rstrip("\n").splitlines()


def side_by_side(left: list[str], right: list[str], titles: tuple[str, str]) -> str:
    """Two text columns (original and transformed bytecode)."""
    width = max([len(titles[0]), *map(len, left)]) + 2
    rows = [f"{titles[0]:<{width}}{titles[1]}", f"{'-' * (width - 2):<{width}}{'-' * len(titles[1])}"]
    for i in range(max(len(left), len(right))):
        a = left[i] if i < len(left) else ""
        b = right[i] if i < len(right) else ""
        rows.append(f"{a:<{width}}{b}".rstrip())
    return "\n".join(rows)


def graph_table(gm: object) -> str:
    """The FX graph as a table (opcode, name, target, args, kwargs), like ``print_tabular``."""
    rows = [("opcode", "name", "target", "args", "kwargs")]
    for node in gm.graph.nodes:  # type: ignore[attr-defined]
        target = getattr(node.target, "__name__", None) or str(node.target)
        rows.append((node.op, node.name, target, str(node.args), str(node.kwargs)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def log_capture(where: str, code: object, guarded: object) -> None:
    """Log one capture to the enabled areas: breaks, bytecode, graph code/table, guards."""
    breaks = get_logger("graph_breaks")
    for brk in getattr(guarded, "graph_breaks", []):
        stack = list(getattr(brk, "user_stack", None) or [])
        if stack:
            fs = stack[-1]
            text = (fs.line or "").strip()
            breaks.info(
                "graph break in `%s` at %s:%s%s: %s",
                fs.name, fs.filename, fs.lineno, f" `{text}`" if text else "", brk.reason,
            )
        else:
            breaks.info("graph break in %s: %s", where, brk.reason)
    if enabled("bytecode"):
        text = side_by_side(
            _dis_lines(code), _dis_lines(guarded.code), ("ORIGINAL BYTECODE", "MODIFIED BYTECODE")  # type: ignore[attr-defined]
        )
        get_logger("bytecode").info("bytecode of %s\n%s", where, text)
    for captured in getattr(guarded, "graphs", []):
        if enabled("graph_code"):
            get_logger("graph_code").info("%s from %s\n%s", captured.name, where, captured.gm.code)
        if enabled("graph"):
            get_logger("graph").info("%s from %s\n%s", captured.name, where, graph_table(captured.gm))
    if enabled("guards"):
        get_logger("guards").info("guards of %s\n%s", where, guarded.guard_set)  # type: ignore[attr-defined]
