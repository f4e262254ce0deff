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


def dynamo_graph_fn(op: Any, samples: list[Any]) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    """``graph_fn`` written so that ember.dynamo captures it whole: the op's function is
    read once, and each sample's arguments are constants or positions in the flat tensors
    (no pytree inside the frame). Samples with tensors nested in containers are left out."""
    f = op.op
    calls: list[tuple[tuple[Any, ...], tuple[tuple[str, Any], ...]]] = []
    tensors: list[torch.Tensor] = []

    def slot(v: Any) -> tuple[bool, Any]:
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            return True, len(tensors) - 1
        return False, v

    for s in samples:
        values = [s.input, *s.args, *s.kwargs.values()]
        nested = [x for v in values if not isinstance(v, torch.Tensor) for x in tree_flatten(v)[0]]
        if any(isinstance(x, torch.Tensor) for x in nested):
            continue
        args = tuple(slot(v) for v in [s.input, *s.args])
        kwargs = tuple((k, slot(v)) for k, v in s.kwargs.items())
        calls.append((args, kwargs))

    def fn(*flat: torch.Tensor) -> Any:
        outs = []
        for args, kwargs in calls:
            a = [flat[v] if is_t else v for is_t, v in args]
            kw = {k: (flat[v] if is_t else v) for k, (is_t, v) in kwargs}
            outs.append(f(*a, **kw))
        return outs

    return fn, tensors
