"""The minifier's edges: ember.ir `GraphIR` in and out, torch.fx inside.

Strategies edit ``torch.fx`` graphs (cheap copies, an interpreter for eager
values); graphs enter and leave as ``ember.ir`` values or files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeAlias

import torch.fx as fx

import ember.ir as ir

GraphLike: TypeAlias = Any
"""An ``ember.ir.GraphIR`` or a ``torch.fx.GraphModule``."""


def graph_to_fx(graph: Any, inputs: Sequence[Any]) -> fx.GraphModule:
    """A ``GraphModule`` for ``graph`` (a ``GraphIR`` or already a ``GraphModule``)."""
    if isinstance(graph, fx.GraphModule):
        return graph
    gm: fx.GraphModule = ir.to_fx(graph)
    return gm


def result_graph(original: Any, gm: fx.GraphModule, inputs: Sequence[Any]) -> Any:
    """The minimal graph in the kind the caller passed in."""
    if isinstance(original, fx.GraphModule):
        return gm
    return ir.from_fx(gm, list(inputs))


def save_graph(gm: fx.GraphModule, inputs: Sequence[Any], path: Path) -> None:
    """Write ``gm`` as an ember.ir graph directory at ``path``."""
    ir.save(ir.from_fx(gm, list(inputs)), path)


def load_graph(path: Path) -> fx.GraphModule:
    """Read an ember.ir graph (directory or file) back as a ``GraphModule``."""
    gm: fx.GraphModule = ir.to_fx(ir.load(path))
    return gm
