"""Backends for tests: count what capture hands the backend.

``CompileCounter`` is a backend that counts graphs (``frame_count``) and
their ``call_function``/``call_method``/``call_module`` nodes (``op_count``)
and runs each graph eagerly; ``CompileCounterWithBackend`` counts, then
compiles with another backend; ``EagerAndRecordGraphs`` keeps every graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .backends import lookup_backend
from .frame import CompilerFn

OP_NODES = ("call_function", "call_method", "call_module")


def count_ops(gm: torch.fx.GraphModule) -> int:
    """Nodes of ``gm`` that do work (calls), not placeholders/get_attr/output."""
    return sum(1 for node in gm.graph.nodes if node.op in OP_NODES)


class CompileCounter:
    """A backend counting graphs and ops; runs each graph with PyTorch eager."""

    def __init__(self) -> None:
        self.frame_count = 0
        self.op_count = 0
        self.graphs: list[torch.fx.GraphModule] = []
        self.example_inputs: list[list[torch.Tensor]] = []

    def __call__(
        self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]
    ) -> Callable[..., Any]:
        self.frame_count += 1
        self.op_count += count_ops(gm)
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        return self._compile(gm, example_inputs)

    def _compile(
        self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]
    ) -> Callable[..., Any]:
        return gm.forward

    def clear(self) -> None:
        self.frame_count = 0
        self.op_count = 0
        self.graphs.clear()
        self.example_inputs.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(frame_count={self.frame_count}, op_count={self.op_count})"


class CompileCounterWithBackend(CompileCounter):
    """Counts like ``CompileCounter``, then compiles with ``backend`` (a name or callable)."""

    def __init__(self, backend: str | CompilerFn) -> None:
        super().__init__()
        self.backend = lookup_backend(backend)

    def _compile(
        self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]
    ) -> Callable[..., Any]:
        return self.backend(gm, example_inputs)


class EagerAndRecordGraphs(CompileCounter):
    """Keeps every graph (``.graphs``) and runs it eagerly."""
