"""Compile stages, timed: for the compile report and for the progress line.

Every package wraps its expensive steps in :func:`stage`::

    with stage("inductor.build", folder=debug_dir_of(gm)):
        ...

which does three things, all cheap when unused:

- adds the step's *own* seconds (its nested stages' seconds taken out) to this process's
  totals (:func:`totals`, :func:`since`);
- when ``folder`` is given (a graph's debug folder, ``EMBER_COMPILE_DEBUG=1``), appends
  ``{"stage": name, "seconds": s, ...}`` to ``<folder>/stages.jsonl``, so the report
  (``python -m ember.dynamo report``) can break each frame's compile time down by stage
  even for graphs compiled after their capture (aotgrad compiles on the first call);
- feeds the progress line: a compile that runs longer than ``EMBER_PROGRESS_AFTER``
  seconds (default 3) shows ``[ember] <what> : <stage> 4.1s (7.9s)`` on stderr, updated
  in place, and one closing line with the breakdown. It is on when stderr is a terminal;
  ``EMBER_PROGRESS=1`` forces it on, ``EMBER_PROGRESS=0`` off.

The outermost stage of a compile names *what* is compiled (``label``: ember.dynamo passes
the frame's ``name (file:line)``); a stage entered with no label inherits it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

#: this process's exclusive seconds per stage name
_TOTALS: dict[str, float] = {}
_LOCK = threading.Lock()


class _Frame:
    __slots__ = ("name", "start", "children")

    def __init__(self, name: str, start: float) -> None:
        self.name = name
        self.start = start
        self.children = 0.0


class _Compile:
    """The outermost stage in progress on one thread (what the progress line shows)."""

    def __init__(self, label: str, start: float) -> None:
        self.label = label
        self.start = start
        self.stack: list[_Frame] = []
        self.own: dict[str, float] = {}
        self.shown = False


_local = threading.local()
#: compiles in progress, by thread id (read by the progress thread)
_ACTIVE: dict[int, _Compile] = {}


def totals() -> dict[str, float]:
    """This process's exclusive seconds per stage so far (a copy)."""
    with _LOCK:
        return dict(_TOTALS)


def since(before: Mapping[str, float]) -> dict[str, float]:
    """The seconds per stage spent since ``before`` (a :func:`totals` snapshot)."""
    now = totals()
    out = {k: v - before.get(k, 0.0) for k, v in now.items()}
    return {k: v for k, v in out.items() if v > 0.0}


@contextlib.contextmanager
def stage(name: str, *, label: str | None = None, folder: str | os.PathLike[str] | None = None,
          **note: Any) -> Iterator[None]:
    """Time one compile step (see the module's docstring). ``note`` values (JSON-able) go
    into the ``stages.jsonl`` record, e.g. ``cache="hit"``."""
    now = time.perf_counter()
    current: _Compile | None = getattr(_local, "compile", None)
    outermost = current is None
    if current is None:
        current = _Compile(label or name, now)
        _local.compile = current
        with _LOCK:
            _ACTIVE[threading.get_ident()] = current
        _Progress.ensure()
    frame = _Frame(name, now)
    current.stack.append(frame)
    try:
        yield
    finally:
        end = time.perf_counter()
        current.stack.pop()
        elapsed = end - frame.start
        own = max(0.0, elapsed - frame.children)
        if current.stack:
            current.stack[-1].children += elapsed
        current.own[name] = current.own.get(name, 0.0) + own
        with _LOCK:
            _TOTALS[name] = _TOTALS.get(name, 0.0) + own
        if folder is not None:
            record(folder, **{"stage": name, "seconds": round(own, 6),
                             "inclusive": round(elapsed, 6), **note})
        if outermost:
            _local.compile = None
            with _LOCK:
                _ACTIVE.pop(threading.get_ident(), None)
            if current.shown:
                _Progress.finish(current, end)


def record(folder: str | os.PathLike[str] | None, **fields: Any) -> None:
    """Append ``fields`` (JSON-able; ``stage=`` names the step) to ``<folder>/stages.jsonl``
    when ``folder`` is given (a note without a time: a cache hit, kernels built). Never raises."""
    if folder is None:
        return
    try:
        path = Path(folder)
        path.mkdir(parents=True, exist_ok=True)
        with open(path / "stages.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(fields) + "\n")
    except (OSError, TypeError, ValueError):
        pass  # a debug aid never breaks a compile


def progress_enabled(environ: Mapping[str, str] | None = None, stream: TextIO | None = None) -> bool:
    """``EMBER_PROGRESS`` (1/0) if set, else whether stderr is a terminal."""
    env = os.environ if environ is None else environ
    value = env.get("EMBER_PROGRESS", "").strip()
    if value in ("1", "true", "True", "on"):
        return True
    if value in ("0", "false", "False", "off"):
        return False
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _threshold() -> float:
    try:
        return float(os.environ.get("EMBER_PROGRESS_AFTER", "3"))
    except ValueError:
        return 3.0


def _fmt(own: Mapping[str, float], limit: int = 4) -> str:
    top = sorted(own.items(), key=lambda kv: -kv[1])[:limit]
    return ", ".join(f"{k} {v:.1f}s" for k, v in top)


class _Progress:
    """One daemon thread that redraws the progress line of the longest-running compile."""

    _thread: threading.Thread | None = None
    _width = 0

    @classmethod
    def ensure(cls) -> None:
        if cls._thread is not None or not progress_enabled():
            return
        cls._thread = threading.Thread(target=cls._run, name="ember-progress", daemon=True)
        cls._thread.start()

    @classmethod
    def _run(cls) -> None:
        while True:
            time.sleep(0.25)
            with contextlib.suppress(Exception):  # never let the progress line disturb a compile
                cls._draw()

    @classmethod
    def _draw(cls) -> None:
        now = time.perf_counter()
        with _LOCK:
            active = list(_ACTIVE.values())
        if not active:
            return
        c = min(active, key=lambda a: a.start)
        total = now - c.start
        if total < _threshold():
            return
        stack = list(c.stack)
        where = stack[-1].name if stack else ""
        in_stage = now - stack[-1].start if stack else 0.0
        cls._write(f"[ember] compiling {c.label}: {where} {in_stage:.1f}s ({total:.1f}s)")
        c.shown = True

    @classmethod
    def _write(cls, text: str, end: str = "") -> None:
        pad = max(0, cls._width - len(text))
        sys.stderr.write("\r" + text + " " * pad + end)
        sys.stderr.flush()
        cls._width = 0 if end else len(text)

    @classmethod
    def finish(cls, c: _Compile, end: float) -> None:
        with contextlib.suppress(Exception):
            cls._write(f"[ember] compiled {c.label} in {end - c.start:.1f}s ({_fmt(c.own)})", "\n")
