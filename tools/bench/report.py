"""Turning results into what people read: the terminal tables, the JSON file, machine info."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

JSON_FORMAT = {"format": "ember.bench", "version": [1, 0]}


def machine_info(device: str = "cpu") -> dict[str, Any]:
    """Where the numbers came from: CPU, cores, versions, load, date, commit."""
    info: dict[str, Any] = {
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "platform": platform.platform(),
        "device": device,
        "git_commit": _git_commit(),
    }
    if hasattr(os, "getloadavg"):
        info["loadavg_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    versions = {}
    for dist in (
        "ember-ir", "ember-guards", "ember-dynamo", "ember-aotgrad", "ember-inductor",
        "triton", "transformers",
    ):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    info["packages"] = versions
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=5, cwd=Path(__file__).parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def add_speedups(results: list[dict[str, Any]], baseline: str = "eager") -> None:
    """Speedup over eager; never for a cell that is not ``ok`` (a WRONG cell has none).

    ``speedup`` compares with the eager column's own process (fresh, like every
    cell). ``speedup_beside`` compares with eager timed in the cell's process,
    blocks interleaved: immune to slow load drift, but it sees whatever the
    compiler did to the process (allocator state, threads), which can slow
    the eager code beside it; the two are shown side by side.
    """
    base = {
        r["workload"]: r for r in results if r["compiler"] == baseline and r.get("status") == "ok"
    }
    for r in results:
        b = base.get(r["workload"])
        if r.get("status") != "ok":
            r["speedup"] = None
            continue
        here = r.get("eager_here")
        if r["compiler"] == baseline:
            r["speedup"] = r["speedup_beside"] = 1.0
            continue
        r["speedup"] = _ratio(b.get("median_s"), r.get("median_s")) if b else None
        if isinstance(here, dict):
            r["speedup_beside"] = _ratio(here.get("median_s"), r.get("median_s"))
        if b is not None and "amortized_step_s" in r:
            r["amortized_speedup"] = _ratio(b.get("amortized_step_s"), r.get("amortized_step_s"))


def _ratio(a: Any, b: Any) -> float | None:
    if isinstance(a, float) and isinstance(b, float) and b > 0:
        return a / b
    return None


def to_json(results: list[dict[str, Any]], info: dict[str, Any], command: str) -> str:
    """Every raw figure, the machine, and the command that produced them."""
    return json.dumps(
        {**JSON_FORMAT, "command": command, "machine": info, "results": results},
        indent=1,
        sort_keys=True,
    )


# --- tables -------------------------------------------------------------------------------

# "speedup": against the eager column's own process; "beside": against eager timed
# in the cell's own process, blocks interleaved (see add_speedups).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("workload", "<"), ("compiler", "<"), ("status", "<"), ("cold s", ">"), ("warm s", ">"),
    ("ms/call", ">"), ("IQR ms", ">"), ("speedup", ">"), ("beside", ">"), ("amort ms", ">"),
    ("max err", ">"),
    ("graphs", ">"), ("breaks", ">"), ("recomp", ">"), ("saved KB", ">"), ("peak MB", ">"),
)


def _fmt(x: Any, spec: str, scale: float = 1.0) -> str:
    if x is None or not isinstance(x, int | float):
        return "-"
    return format(x * scale if scale != 1.0 else x, spec)


def cell_row(r: dict[str, Any]) -> list[str]:
    """One line of the long table."""
    status = {"ok": "ok", "wrong": "WRONG"}.get(r.get("status", "?"), r.get("status", "?"))
    iqr = "-"
    if isinstance(r.get("q1_s"), float) and isinstance(r.get("q3_s"), float):
        iqr = f"{r['q1_s'] * 1e3:.3g}-{r['q3_s'] * 1e3:.3g}"
    speedup = "-" if r.get("speedup") is None else f"{r['speedup']:.2f}x"
    beside = r.get("speedup_beside")
    saved = r.get("saved_bytes")
    return [
        r["workload"],
        r["compiler"],
        status,
        _fmt(r.get("compile_s", r.get("first_call_s")), ".2f"),
        _fmt(r.get("warm_compile_s", r.get("warm_first_call_s")), ".2f"),
        _fmt(r.get("median_s"), ".4g", 1e3),
        iqr,
        speedup,
        "-" if beside is None or r.get("status") != "ok" else f"{beside:.2f}x",
        _fmt(r.get("amortized_step_s"), ".4g", 1e3),
        _fmt(r.get("max_abs_err"), ".1e"),
        _fmt(r.get("graphs"), "d"),
        _fmt(r.get("breaks"), "d"),
        _fmt(r.get("recompiles"), "d"),
        "-" if saved is None else f"{saved / 1024:.0f}",
        _fmt(r.get("peak_bytes"), ".3g", 1 / 2**20),
    ]


def align(header: Sequence[str], rows: Sequence[Sequence[str]], aligns: Sequence[str]) -> str:
    """Columns padded to their widest entry, with a rule under the header."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = []
    for row in (header, ["-" * w for w in widths], *rows):
        cells = [format(str(x), f"{a}{w}") for x, a, w in zip(row, aligns, widths)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def long_table(results: list[dict[str, Any]]) -> str:
    """Every figure of every cell; failures listed under the table with their error."""
    header = [c for c, _ in COLUMNS]
    text = align(header, [cell_row(r) for r in results], [a for _, a in COLUMNS])
    notes = [
        f"  {r['workload']} x {r['compiler']}: {r.get('status')}: {r.get('error', '')}"
        for r in results
        if r.get("status") not in ("ok",)
    ]
    if notes:
        text += "\n\nnot measured or wrong:\n" + "\n".join(notes)
    return text


def speedup_matrix(results: list[dict[str, Any]]) -> str:
    """Workloads x compilers, each cell the steady-state speedup over eager (or why not)."""
    workloads = list(dict.fromkeys(r["workload"] for r in results))
    compilers = list(dict.fromkeys(r["compiler"] for r in results))
    by = {(r["workload"], r["compiler"]): r for r in results}
    rows = []
    for w in workloads:
        row = [w]
        for c in compilers:
            r = by.get((w, c))
            row.append(_matrix_cell(r))
        rows.append(row)
    text = align(["speedup vs eager", *compilers], rows, ["<", *([">"] * len(compilers))])
    if any(_ran_eagerly(r) for r in results if r.get("status") == "ok"):
        text += "\n* compiled no graph: the compiler ran the workload eagerly (see its log)"
    return text


def peak_matrix(results: list[dict[str, Any]]) -> str:
    """Workloads x compilers, each cell the peak MB one call allocates above its inputs
    (``measure.peak_bytes``), or "" where the cell has none."""
    workloads = list(dict.fromkeys(r["workload"] for r in results))
    compilers = list(dict.fromkeys(r["compiler"] for r in results))
    by = {(r["workload"], r["compiler"]): r for r in results}
    rows = []
    for w in workloads:
        row = [w]
        for c in compilers:
            r = by.get((w, c)) or {}
            row.append(_fmt(r.get("peak_bytes"), ".3g", 1 / 2**20) if r.get("status") == "ok" else "")
        rows.append(row)
    return align(["peak MB", *compilers], rows, ["<", *([">"] * len(compilers))])


def _ran_eagerly(r: dict[str, Any]) -> bool:
    return r.get("compiler") != "eager" and r.get("graphs") == 0


def _matrix_cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return ""
    status = r.get("status")
    if status == "ok":
        mark = "*" if _ran_eagerly(r) else ""
        return "-" if r.get("speedup") is None else f"{r['speedup']:.2f}x{mark}"
    return {"wrong": "WRONG", "unavailable": "n/a"}.get(str(status), str(status))


def machine_line(info: dict[str, Any]) -> str:
    load = info.get("loadavg_1_5_15")
    parts = [
        info.get("date_utc", ""),
        f"{info.get('cpu')} ({info.get('cores')} cores, {info.get('torch_threads')} torch threads)",
        f"python {info.get('python')}",
        f"torch {info.get('torch')}",
        f"device {info.get('device')}" + (f" ({info['gpu']})" if info.get("gpu") else ""),
    ]
    if load:
        end = info.get("loadavg_end")
        parts.append(f"load avg {load[0]}" + (f" at start, {end[0]} at end" if end else ""))
    return ", ".join(str(p) for p in parts)
