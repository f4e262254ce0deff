"""Small facts about an FX graph and its inputs, shared by lowering and the compiled-graph
path (which must not import the lowering stack: a graph loaded from the cache needs
only these)."""

from __future__ import annotations

from typing import Any

import torch


def attr_value(gm: torch.nn.Module, target: str) -> Any:
    """What a ``get_attr`` node with this dotted ``target`` reads from ``gm``."""
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def graph_device(example_inputs: list[Any]) -> torch.device:
    """The device a graph's kernels run on: its first tensor input's (CPU without one)."""
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            return x.device
    return torch.device("cpu")


def op_name(target: Any) -> str:
    name = getattr(target, "name", None)
    return name() if callable(name) else getattr(target, "__name__", str(target))
