"""``EMBER_COMPILE_DEBUG=1``: one folder per compiled frame (layout: ``ember.ir.debug``).

    ember_debug/run_<YYYYmmdd_HHMMSS>_<pid>/
        frame_000_toy_example/
            original_bytecode.txt     dis of the user's code
            transformed_bytecode.txt  dis of the code ember runs instead
            guards.json               the guard IR (ember.ir GuardSet JSON)
            guards.txt                the guards in words and the generated check function
            graph_0/                  the graph IR (ember.ir.save: graph.json + weights)
            graph_0.txt               the FX graph's Python code
            graph_0_backend/          what the backend wrote for graph 0 (aotgrad, inductor)
            stages.jsonl              seconds per compile stage (``ember.ir.stages``)
        events.jsonl                  every capture, recompile, skip and cache-limit event
                                      (:func:`record_event`), read by ``python -m ember.dynamo
                                      report`` (``report.py``)

The base directory is ``EMBER_COMPILE_DEBUG_DIR`` (default ``./ember_debug``).
Both variables are read once, when a callable is compiled
(:func:`debug_dir_from_env`); the path then travels in
``DynamoOptions.debug_dir``. A frame's folder is named before capture
(:func:`frame_folder`), so each graph handed to the backend carries its
``graph_<i>_backend`` folder in ``gm.meta`` (:func:`name_backend_folder`).
Writing never breaks a compile: a failure to write one file is noted in
``errors.txt`` in that frame's folder.
"""

from __future__ import annotations

import dis
import io
import itertools
import json
import time
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ember import ir
from ember.ir.debug import debug_base_from_env, run_folder, set_debug_dir

#: Numbers frame folders within a run (process-wide, like the run folder).
_FRAME_COUNTER = itertools.count()


def debug_dir_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The base debug directory when ``EMBER_COMPILE_DEBUG=1``, else ``None``."""
    return debug_base_from_env(environ)


def frame_folder(base: str, code: types.CodeType) -> Path:
    """The folder for one capture of ``code`` (made when the first file is written)."""
    return run_folder(base) / f"frame_{next(_FRAME_COUNTER):03d}_{code.co_name}"


def name_backend_folder(folder: Path, index: int, gm: Any) -> None:
    """Tell the backend where graph ``index`` of this frame writes its debug output."""
    set_debug_dir(gm, folder / f"graph_{index}_backend")


def _dis_text(code: types.CodeType) -> str:
    out = io.StringIO()
    dis.dis(code, file=out, depth=0)
    return out.getvalue()


def write_frame(folder: Path, code: types.CodeType, guarded: Any) -> Path:
    """Write one captured frame's artifacts into ``folder``; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []

    def attempt(name: str, write: Any) -> None:
        try:
            write()
        except Exception as exc:  # a debug aid must never break the compile
            errors.append(f"{name}: {type(exc).__name__}: {exc}")

    attempt("original_bytecode.txt", lambda: (folder / "original_bytecode.txt").write_text(_dis_text(code)))
    attempt(
        "transformed_bytecode.txt",
        lambda: (folder / "transformed_bytecode.txt").write_text(_dis_text(guarded.code)),
    )
    attempt("guards.json", lambda: (folder / "guards.json").write_text(guarded.guard_set.dumps()))

    def guards_text() -> None:
        body = str(guarded.guard_set)
        check_code = getattr(guarded.check_fn, "code", None)
        if check_code:
            body += "\n\n# generated check function\n" + check_code
        (folder / "guards.txt").write_text(body + "\n")

    attempt("guards.txt", guards_text)
    for i, captured in enumerate(guarded.graphs):
        attempt(f"graph_{i}.txt", lambda c=captured, i=i: (folder / f"graph_{i}.txt").write_text(c.gm.code))
        attempt(f"graph_{i}/", lambda c=captured, i=i: _save_graph_ir(c, folder / f"graph_{i}"))
    if errors:
        (folder / "errors.txt").write_text("\n".join(errors) + "\n")
    return folder


def _save_graph_ir(captured: Any, path: Path) -> None:
    graph_ir = ir.from_fx(captured.gm, captured.example_inputs)
    ir.save(graph_ir, path)


# -- the run's event log (``events.jsonl``), read by ``python -m ember.dynamo report`` ------

def _stack(frames: Any) -> list[dict[str, Any]]:
    out = []
    for fs in frames or ():
        out.append({"file": getattr(fs, "filename", ""), "line": getattr(fs, "lineno", 0),
                    "name": getattr(fs, "name", ""), "text": (getattr(fs, "line", "") or "").strip()})
    return out


def _ops(gm: Any) -> int:
    return sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))


def record_event(
    base: str,
    kind: str,
    code: types.CodeType,
    guarded: Any = None,
    reason: str | None = None,
    user_stack: Any = None,
    folder: Path | None = None,
) -> None:
    """Append one capture event (capture, recompile, skip, cache_limit) to the run
    folder's ``events.jsonl``: where (the code's name, file and first line), why, the
    user's stack, and for a capture its graphs, breaks (with stacks), guards, dynamic
    dimensions and debug folder. Never raises."""
    try:
        event: dict[str, Any] = {
            "kind": kind, "time": time.time(), "code": code.co_name,
            "file": code.co_filename, "line": code.co_firstlineno,
            "reason": reason, "stack": _stack(user_stack),
        }
        if folder is not None:
            event["folder"] = folder.name
        if guarded is not None:
            event["graphs"] = [{"ops": _ops(g.gm), "inputs": len(g.example_inputs)}
                               for g in guarded.graphs]
            event["breaks"] = [{"reason": b.reason, "stack": _stack(b.user_stack)}
                               for b in guarded.graph_breaks]
            event["guards"] = len(getattr(guarded.guard_set, "guards", ()) or ())
            event["dynamic"] = list(guarded.dynamic)
        with open(run_folder(base) / "events.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(event, default=str) + "\n")
    except Exception:  # a debug aid must never break the compile
        pass
