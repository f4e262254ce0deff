"""``python -m ember.dynamo report DIR [-o report.html]``: one self-contained HTML page for a
run compiled with ``EMBER_COMPILE_DEBUG=1``.

DIR is a run folder (``run_<stamp>_<pid>``) or the base folder holding them (the newest run
is taken). The page is built from what the packages wrote there (layout: ``debug_dir.py``):
``events.jsonl`` (every capture, recompile, skip and cache-limit event, with the user's
source lines), each frame folder's guards, graphs and backend output (aotgrad's graphs,
inductor's wrapper and kernels), and the ``stages.jsonl`` files (seconds per compile stage,
cache hits). No scripts, no external files: kernels and graphs are embedded, folded, and
linked from the summary by anchors.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: text files embedded per frame, by name pattern, in this order
_FRAME_TEXTS = ("guards.txt", "graph_*.txt")
_BACKEND_TEXTS = ("joint.txt", "forward.txt", "backward.txt", "inference.txt")
_KERNEL_SUFFIXES = (".py", ".cpp", ".cu", ".ptx")
#: the most characters of one embedded file
MAX_FILE_CHARS = 120_000


class ReportError(ValueError):
    """DIR is not a debug folder ember wrote."""


@dataclass
class Frame:
    folder: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    stages: dict[str, float] = field(default_factory=dict)
    notes: list[dict[str, Any]] = field(default_factory=list)


def find_run(path: Path) -> Path:
    """The run folder ``path`` names, or the newest one under it."""
    if not path.is_dir():
        raise ReportError(f"{path} is not a folder")
    if (path / "events.jsonl").exists() or any(path.glob("frame_*")):
        return path
    runs = sorted((p for p in path.glob("run_*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise ReportError(
            f"{path} holds no ember debug run (run_*/ folders with events.jsonl); run your "
            "program with EMBER_COMPILE_DEBUG=1 (folder: EMBER_COMPILE_DEBUG_DIR, default "
            "./ember_debug)")
    return runs[-1]


def read_events(run: Path) -> list[dict[str, Any]]:
    path = run / "events.jsonl"
    if not path.exists():
        return []
    events = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ReportError(f"{path}:{n}: not a JSON line ({e.msg})") from e
    return events


def _stage_records(folder: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(folder.rglob("stages.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def collect(run: Path) -> tuple[list[dict[str, Any]], list[Frame]]:
    events = read_events(run)
    frames = {p.name: Frame(p) for p in sorted(run.glob("frame_*")) if p.is_dir()}
    for e in events:
        name = e.get("folder")
        if name in frames:
            frames[name].events.append(e)
    for frame in frames.values():
        for rec in _stage_records(frame.folder):
            if "seconds" in rec:
                frame.stages[rec["stage"]] = frame.stages.get(rec["stage"], 0.0) + float(rec["seconds"])
            else:
                frame.notes.append(rec)
    return events, list(frames.values())


# -- HTML ---------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;
max-width:1100px;color:#1d2330;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #dde}
h3{font-size:15px;margin:18px 0 6px}.muted{color:#667}
table{border-collapse:collapse;margin:6px 0 12px}td,th{padding:3px 10px;border-bottom:1px solid #eef;
text-align:left;vertical-align:top}th{background:#f4f5fa}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.card{border:1px solid #dde;border-radius:8px;padding:8px 14px;min-width:110px}
.card b{display:block;font-size:22px}
.kind{display:inline-block;border-radius:4px;padding:0 6px;font-size:12px;font-weight:600}
.k-capture{background:#e3f4e8;color:#17652f}.k-recompile{background:#fff1d6;color:#8a5300}
.k-skip{background:#fde4e4;color:#9b1c1c}.k-cache_limit{background:#fde4e4;color:#9b1c1c}
.k-break{background:#e8e6fb;color:#3b2f9a}
pre{background:#f7f8fb;border:1px solid #e3e5ee;border-radius:6px;padding:8px;overflow:auto;
max-height:480px;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
details{margin:4px 0}summary{cursor:pointer}
.stack{font:12px ui-monospace,monospace;color:#333;margin:2px 0 0 12px}
.bar{display:inline-block;height:10px;background:#7a8cf0;border-radius:2px;vertical-align:middle}
section.frame{border:1px solid #dde;border-radius:8px;padding:4px 14px 10px;margin:14px 0}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _where(e: dict[str, Any]) -> str:
    return f"<code>{_e(e.get('code', '?'))}</code> <span class=muted>{_e(e.get('file', ''))}:{_e(e.get('line', ''))}</span>"


def _stack_html(stack: Iterable[dict[str, Any]]) -> str:
    lines = [f"<div class=stack>{_e(s.get('file', ''))}:{_e(s.get('line', ''))} in {_e(s.get('name', ''))}"
             + (f"<br>&nbsp;&nbsp;<b>{_e(s.get('text', ''))}</b>" if s.get("text") else "") + "</div>"
             for s in stack]
    return "".join(lines)


def _file_block(path: Path, label: str | None = None) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        return f"<p class=muted>{_e(path.name)}: unreadable ({_e(e)})</p>"
    cut = ""
    if len(text) > MAX_FILE_CHARS:
        cut = f" (first {MAX_FILE_CHARS} of {len(text)} characters)"
        text = text[:MAX_FILE_CHARS]
    return (f"<details><summary>{_e(label or path.name)}{_e(cut)}</summary>"
            f"<pre>{_e(text)}</pre></details>")


def _stages_table(stages: dict[str, float]) -> str:
    if not stages:
        return "<p class=muted>no stage timings recorded</p>"
    total = sum(stages.values()) or 1.0
    rows = "".join(
        f"<tr><td>{_e(k)}</td><td>{v:.3f} s</td><td><span class=bar style='width:{int(240 * v / total)}px'>"
        f"</span> {100 * v / total:.0f}%</td></tr>"
        for k, v in sorted(stages.items(), key=lambda kv: -kv[1]))
    return f"<table><tr><th>stage</th><th>seconds</th><th>share</th></tr>{rows}</table>"


def _frame_html(frame: Frame) -> str:
    f = frame.folder
    head = frame.events[0] if frame.events else {}
    title = _where(head) if head else _e(f.name)
    parts = [f"<section class=frame id='{_e(f.name)}'><h3>{_e(f.name)}: {title}</h3>"]
    for e in frame.events:
        graphs = e.get("graphs", [])
        parts.append(f"<p>{len(graphs)} graph(s), {sum(g.get('ops', 0) for g in graphs)} op(s), "
                     f"{e.get('guards', 0)} guard(s)</p>")
        for b in e.get("breaks", []):
            parts.append(f"<div><span class='kind k-break'>graph break</span> {_e(b.get('reason', ''))}"
                         f"{_stack_html(b.get('stack', []))}</div>")
        for d in e.get("dynamic", []):
            parts.append(f"<div class=muted>dynamic: {_e(d)}</div>")
    parts.append("<h3>Compile time by stage</h3>" + _stages_table(frame.stages))
    caches = [n for n in frame.notes if "cache" in n]
    if caches:
        items = ", ".join(f"{_e(n.get('stage'))}: {_e(n.get('cache'))}" for n in caches)
        parts.append(f"<p>caches: {items}</p>")
    kernels = [n for n in frame.notes if n.get("stage") == "inductor.kernels"]
    if kernels:
        parts.append("<p>kernels: " + "; ".join(
            f"{n.get('kernels')} generated in {int(n.get('compiled', 0)) + int(n.get('cached', 0))} "
            f"build unit(s) ({n.get('compiled')} compiled now, {n.get('cached')} from the kernel "
            f"cache), {n.get('externs')} extern call(s)" for n in kernels) + "</p>")
    for pattern in _FRAME_TEXTS:
        for path in sorted(f.glob(pattern)):
            parts.append(_file_block(path))
    for backend in sorted(f.glob("graph_*_backend")):
        parts.append(f"<h3>{_e(backend.name)}</h3>")
        for name in _BACKEND_TEXTS:
            if (backend / name).exists():
                parts.append(_file_block(backend / name, f"aotgrad: {name}"))
        for path in sorted(backend.rglob("*")):
            if path.is_file() and path.suffix in _KERNEL_SUFFIXES:
                parts.append(_file_block(path, f"inductor: {path.relative_to(backend)}"))
    parts.append("</section>")
    return "".join(parts)


def render(run: Path) -> str:
    """The report of one run folder as an HTML page."""
    events, frames = collect(run)
    count = {k: sum(1 for e in events if e.get("kind") == k)
             for k in ("capture", "recompile", "skip", "cache_limit")}
    breaks = sum(len(e.get("breaks", [])) for e in events)
    graphs = sum(len(e.get("graphs", [])) for e in events)
    loaded = sum(1 for e in events if e.get("kind") == "capture" and e.get("reason") == "frame cache")
    stages: dict[str, float] = {}
    for fr in frames:
        for k, v in fr.stages.items():
            stages[k] = stages.get(k, 0.0) + v
    hits = sum(1 for fr in frames for n in fr.notes if n.get("cache") == "hit")
    cards = [("frames captured", count["capture"]), ("graphs", graphs), ("graph breaks", breaks),
             ("recompiles", count["recompile"]), ("frames run eagerly", count["skip"]),
             ("cache-limit hits", count["cache_limit"]), ("frames from the frame cache", loaded),
             ("graph/plan cache hits", hits), ("compile seconds", f"{sum(stages.values()):.2f}")]
    out = ["<!doctype html><html lang=en><head><meta charset=utf-8>",
           f"<title>ember compile report: {_e(run.name)}</title><style>{_CSS}</style></head><body>",
           f"<h1>ember compile report</h1><div class=muted>{_e(run)}</div>",
           "<div class=cards>" + "".join(f"<div class=card><b>{_e(v)}</b>{_e(k)}</div>" for k, v in cards)
           + "</div>",
           "<h2>Compile time by stage</h2>", _stages_table(stages),
           "<h2>Events</h2><table><tr><th>#</th><th>what</th><th>where</th><th>why</th></tr>"]
    for i, e in enumerate(events):
        kind = e.get("kind", "?")
        link = e.get("folder")
        where = _where(e) + (f" <a href='#{_e(link)}'>{_e(link)}</a>" if link else "")
        why = _e(e.get("reason") or "")
        if kind == "capture":
            n = len(e.get("graphs", []))
            why = f"{n} graph(s), {len(e.get('breaks', []))} break(s)" + (
                f"; from the {_e(e.get('reason'))}" if e.get("reason") else "")
        why += _stack_html(e.get("stack", []))
        out.append(f"<tr><td>{i}</td><td><span class='kind k-{_e(kind)}'>{_e(kind)}</span></td>"
                   f"<td>{where}</td><td>{why}</td></tr>")
    out.append("</table>")
    all_breaks = [(e, b) for e in events for b in e.get("breaks", [])]
    if all_breaks:
        out.append("<h2>Graph breaks</h2>")
        for e, b in all_breaks:
            out.append(f"<div><span class='kind k-break'>break</span> in {_where(e)}: "
                       f"{_e(b.get('reason', ''))}{_stack_html(b.get('stack', []))}</div>")
    out.append("<h2>Frames</h2>")
    out += [_frame_html(fr) for fr in frames]
    out.append("</body></html>")
    return "\n".join(out)


def write_report(path: Path, output: Path | None = None) -> Path:
    """Render the run ``path`` names (see :func:`find_run`) to ``output`` (default
    ``<run>/report.html``); returns where it went."""
    run = find_run(path)
    target = output if output is not None else run / "report.html"
    target.write_text(render(run), encoding="utf-8")
    return target
