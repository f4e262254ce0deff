"""Helpers for tests that look at what ember.inductor compiled behind a frontend.

A frontend (ember.dynamo, torch.compile) calls ``ember.inductor.backends.compile_graph``
for every graph; these record each result (a ``CompiledGraph``, or the eager runner a
fallback returns) so a test can check kernel counts, wrapper source or fallback reasons.

    with recorded_graphs() as graphs:
        compiled(x)
    assert all(isinstance(g, CompiledGraph) for g in graphs)

    # under pytest's monkeypatch:
    monkeypatch.setattr(backends, "compile_graph", recording(backends.compile_graph, graphs))

``peak_cpu_bytes(run)``: the peak tensor memory ``run()`` allocates on CPU above what was
alive before it (the benchmark's and the memory tests' one measure).
``conv_inputs_channels_last(run)``: for each ATen convolution ``run()`` calls, whether its
input is channels-last (the layout ember.inductor chose, ADR 0056).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def recording(compile_graph: Callable[..., Any], into: list[Any]) -> Callable[..., Any]:
    """``compile_graph`` that also appends each compiled graph to ``into``."""

    def compile_and_record(gm: Any, inputs: Any, options: Any = None, **kw: Any) -> Any:
        compiled = compile_graph(gm, inputs, options, **kw)
        into.append(compiled)
        return compiled

    return compile_and_record


@contextmanager
def recorded_graphs() -> Iterator[list[Any]]:
    """Every graph ``ember.inductor.backends`` compiles inside the block, in order."""
    from . import backends

    graphs: list[Any] = []
    name = "compile_graph"  # what backends calls (imported there, so not re-exported)
    real = getattr(backends, name)
    setattr(backends, name, recording(real, graphs))
    try:
        yield graphs
    finally:
        setattr(backends, name, real)


__all__ = ["conv_inputs_channels_last", "peak_cpu_bytes", "recorded_graphs", "recording"]


def peak_cpu_bytes(run: Callable[[], Any]) -> int:
    """The highest running sum of the CPU tensor allocations ``run()`` makes (frees count
    negative), in time order, from torch's profiler memory events (``profile_memory``):
    what ATen, a compiled wrapper and autograd allocate, not the process's other memory.
    Tensors alive before the call are the baseline, not counted."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    # every allocation event of the run, nested in the ops that made it
    sizes: list[tuple[int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.tag == _EventType.Allocation and event.extra_fields.device.type == "cpu":
            sizes.append((event.start_time_ns, int(event.extra_fields.alloc_size)))
    level = peak = 0
    for _, size in sorted(sizes, key=lambda p: p[0]):
        level += size
        peak = max(peak, level)
    return peak


def conv_inputs_channels_last(run: Callable[[], Any]) -> list[bool]:
    """For each ATen convolution ``run()`` calls, in order, whether its input is stored
    channels-last."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[bool] = []

    class Record(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if func is torch.ops.aten.convolution.default:
                seen.append(args[0].is_contiguous(memory_format=torch.channels_last))
            return func(*args, **(kwargs or {}))

    with Record():  # type: ignore[no-untyped-call]
        run()
    return seen
