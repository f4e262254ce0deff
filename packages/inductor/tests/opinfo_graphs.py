"""OpInfo samples as one graph: what the forward and gradient sweeps compile."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten


def graph_fn(op: Any, samples: list[Any]) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    """One function over the flat tensors of all samples, returning every sample's output."""
    leaves_specs = []
    tensors: list[torch.Tensor] = []
    for s in samples:
        leaves, spec = tree_flatten((s.input, s.args, s.kwargs))
        positions = []
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, torch.Tensor):
                positions.append(i)
                tensors.append(leaf)
        leaves_specs.append((leaves, spec, positions))

    def fn(*flat: torch.Tensor) -> Any:
        it = iter(flat)
        outs = []
        for leaves, spec, positions in leaves_specs:
            filled = list(leaves)
            for i in positions:
                filled[i] = next(it)
            inp, args, kwargs = tree_unflatten(filled, spec)
            outs.append(op.op(inp, *args, **kwargs))
        return outs

    return fn, tensors
