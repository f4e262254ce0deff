"""Helpers for tests that look at what ember.inductor compiled behind a frontend.

A frontend (ember.dynamo, torch.compile) calls ``ember.inductor.backends.compile_graph``
for every graph; these record each result (a ``CompiledGraph``, or the eager runner a
fallback returns) so a test can check kernel counts, wrapper source or fallback reasons.

    with recorded_graphs() as graphs:
        compiled(x)
    assert all(isinstance(g, CompiledGraph) for g in graphs)

    # under pytest's monkeypatch:
    monkeypatch.setattr(backends, "compile_graph", recording(backends.compile_graph, graphs))
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


__all__ = ["recorded_graphs", "recording"]
