"""Logging areas over the standard ``logging`` module.

One logger per area, named ``ember.<area>`` (``ember.graph_breaks``,
``ember.recompiles``, ...). Areas are off (``WARNING``) until enabled by the
``EMBER_LOGS`` environment variable or :func:`set_logs`::

    EMBER_LOGS="graph_breaks,recompiles,+guards"   # +area: DEBUG level
    ember.dynamo.set_logs(graph_breaks=True, guards="debug")

Enabled areas print to stderr through one handler on the ``ember`` logger;
users may add their own handlers to any ``ember.<area>`` logger as usual.
``EMBER_LOGS`` is parsed once, when ``ember.dynamo`` is imported.
"""

from __future__ import annotations

import dis
import io
import logging
import os
import sys

AREAS: tuple[str, ...] = (
    "graph_breaks",
    "recompiles",
    "guards",
    "bytecode",
    "graph_code",
    "graph",
    "aot_graphs",
    "output_code",
    "perf_hints",
    "dynamo",
)

ROOT = "ember"
_HANDLER_NAME = "ember.logs.stderr"


class LogSettingsError(ValueError):
    """An ``EMBER_LOGS`` entry or ``set_logs`` argument naming no area.

    Example::

        EMBER_LOGS names unknown log area 'recompile'; known areas: aot_graphs,
        bytecode, dynamo, graph, graph_breaks, graph_code, guards, output_code,
        perf_hints, recompiles
    """


def get_logger(area: str) -> logging.Logger:
    """The logger for ``area`` (``ember.<area>``)."""
    if area not in AREAS:
        raise LogSettingsError(_unknown(area, "get_logger"))
    return logging.getLogger(f"{ROOT}.{area}")


def _unknown(area: str, where: str) -> str:
    return f"{where} names unknown log area {area!r}; known areas: {', '.join(sorted(AREAS))}"


def parse_log_spec(spec: str) -> dict[str, int]:
    """``"graph_breaks,+guards"`` -> ``{"graph_breaks": INFO, "guards": DEBUG}``.

    ``all`` / ``+all`` enable every area.
    """
    levels: dict[str, int] = {}
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        level = logging.INFO
        if item.startswith("+"):
            level = logging.DEBUG
            item = item[1:]
        elif item.startswith("-"):
            level = logging.WARNING
            item = item[1:]
        names = AREAS if item == "all" else (item,)
        for name in names:
            if name not in AREAS:
                raise LogSettingsError(_unknown(name, "EMBER_LOGS"))
            levels[name] = level
    return levels


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of the record (test capture, redirects)."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def _ensure_handler() -> None:
    root = logging.getLogger(ROOT)
    if any(h.get_name() == _HANDLER_NAME for h in root.handlers):
        return
    handler = _StderrHandler()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    root.addHandler(handler)


def _apply(levels: dict[str, int]) -> None:
    if any(level < logging.WARNING for level in levels.values()):
        _ensure_handler()
    for area, level in levels.items():
        logging.getLogger(f"{ROOT}.{area}").setLevel(level)


def set_logs(**areas: bool | str) -> None:
    """Enable (``True`` / ``"info"``), debug (``"debug"``) or disable (``False``) areas.

    ``set_logs(graph_breaks=True, recompiles=True, guards="debug")``; areas not
    named keep their level. ``set_logs(all=True)`` enables every area.
    """
    levels: dict[str, int] = {}
    for name, value in areas.items():
        if value is True or value == "info":
            level = logging.INFO
        elif value == "debug":
            level = logging.DEBUG
        elif value is False:
            level = logging.WARNING
        else:
            raise LogSettingsError(
                f"set_logs({name}={value!r}): use True, False, 'info' or 'debug'"
            )
        targets = AREAS if name == "all" else (name,)
        for area in targets:
            if area not in AREAS:
                raise LogSettingsError(_unknown(area, "set_logs"))
            levels[area] = level
    _apply(levels)


def configure_from_env(environ: dict[str, str] | None = None) -> None:
    """Apply ``EMBER_LOGS`` (called once, when ember.dynamo is imported)."""
    env = os.environ if environ is None else environ
    spec = env.get("EMBER_LOGS", "")
    if spec:
        _apply(parse_log_spec(spec))


def enabled(area: str, level: int = logging.INFO) -> bool:
    """Whether ``area`` logs at ``level`` (cheap; check before building a costly message)."""
    return logging.getLogger(f"{ROOT}.{area}").isEnabledFor(level)


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
