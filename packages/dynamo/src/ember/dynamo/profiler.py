"""``CompileProfiler``: a backend that reports where compiles came from.

    prof = CompileProfiler()
    model = ember.dynamo.compile(model, backend=prof)
    model(x); model(y)
    print(prof.report())

It runs every graph eagerly (or with ``backend`` when given), and while it
exists it listens to the runtimes that use it: graphs and ops per captured
frame, graph breaks with their reasons, frames capture gave up on, and every
recompile with the guard that failed.

As a context manager (the FAQ's ``with CompileProfiler() as prof:``) it also
sets ``config.cache_size_limit`` to 1 inside the block, so every guard failure
of code compiled there is recorded as the reason it could not reuse its graph::

    with CompileProfiler() as prof:
        model = ember.dynamo.compile(model, backend=prof)
        for batch in batches:
            model(batch)
    print(prof.report())
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .api import STATE
from .backends import lookup_backend
from .config import config
from .frame import CompilerFn
from .function_entry import CaptureEvent
from .testing import count_ops


@dataclass(frozen=True)
class ProfileRecord:
    kind: str  # "capture" | "recompile" | "skip" | "cache_limit" | "break"
    where: str
    detail: str


class CompileProfiler:
    """A counting backend plus a log of captures, breaks and recompiles (with reasons)."""

    def __init__(self, backend: str | CompilerFn = "eager") -> None:
        self.backend = lookup_backend(backend)
        self.frame_count = 0
        self.op_count = 0
        self.records: list[ProfileRecord] = []
        ref = weakref.ref(self)

        def listen(event: CaptureEvent) -> None:
            me = ref()
            if me is not None and event.runtime.backend.compiler is me:
                me._hear(event)

        self._listener: Callable[[CaptureEvent], None] = listen
        self._saved_limits: list[int] = []
        STATE.listeners.append(listen)
        weakref.finalize(self, _unlisten, listen)

    def __enter__(self) -> CompileProfiler:
        """Set ``config.cache_size_limit`` to 1 until the block ends (the FAQ's profiler)."""
        self._saved_limits.append(config.cache_size_limit)
        config.cache_size_limit = 1
        return self

    def __exit__(self, *exc: object) -> None:
        config.cache_size_limit = self._saved_limits.pop()

    def __call__(
        self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]
    ) -> Callable[..., Any]:
        self.frame_count += 1
        self.op_count += count_ops(gm)
        return self.backend(gm, example_inputs)

    def _hear(self, event: CaptureEvent) -> None:
        code = event.code
        where = f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
        if event.kind == "capture":
            graphs = event.guarded.graphs
            ops = sum(count_ops(g.gm) for g in graphs)
            self.records.append(ProfileRecord("capture", where, f"{len(graphs)} graph(s), {ops} op(s)"))
            for brk in event.guarded.graph_breaks:
                self.records.append(ProfileRecord("break", where, brk.reason))
        else:
            self.records.append(ProfileRecord(event.kind, where, event.reason or ""))

    def report(self) -> str:
        """A readable summary: counts, then each break and recompile reason."""
        count = {k: sum(1 for r in self.records if r.kind == k) for k in ("capture", "recompile", "break", "skip", "cache_limit")}
        lines = [
            "ember.dynamo CompileProfiler report",
            f"Graphs compiled: {self.frame_count} (ops: {self.op_count})",
            f"Frames captured: {count['capture']}",
            f"Graph breaks: {count['break']}",
            f"Frames run eagerly (capture gave up): {count['skip']}",
            f"Recompiles: {count['recompile']}",
            f"Cache limit hits: {count['cache_limit']}",
        ]
        for title, kind in (
            ("Graph break reasons", "break"),
            ("Frames run eagerly", "skip"),
            ("Recompile reasons", "recompile"),
            ("Cache limit hits", "cache_limit"),
        ):
            items = [r for r in self.records if r.kind == kind]
            if items:
                lines.append(f"{title}:")
                lines += [f"  {r.where}: {r.detail}" for r in items]
        return "\n".join(lines)


def _unlisten(listener: Callable[[CaptureEvent], None]) -> None:
    if listener in STATE.listeners:
        STATE.listeners.remove(listener)
