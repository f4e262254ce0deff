"""Guards of a compiled optimizer step, checked by ember.guards (ADR 0033).

A compiled step assumes the optimizer's layout: the same parameter objects in
each group, which of them have a gradient, every tensor's class, dtype, device,
sizes and strides, the state's keys and non-tensor values, and each group's
hyperparameters other than ``lr`` (an input, ADR 0024; its type is guarded).
These assumptions are an ember.ir ``GuardSet`` over two locals the step builds
per call (:func:`step_locals`): ``groups`` (``optimizer.param_groups``) and
``states`` (each parameter's state dict, or ``None``, in group order; the
optimizer's state is keyed by tensors, which a guard source cannot name).
``ember.guards.compile`` makes it one generated check function, the same
machinery as frame guards, and ``explain`` says which assumption failed.
"""

from __future__ import annotations

from typing import Any

import torch

import ember.guards
from ember.ir import Attr, Guard, GuardKind, GuardSet, Item, Local, Source, encode_value, qualname
from ember.ir.guards import tensor_payload


def step_locals(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The values the guards read: ``groups`` and ``states`` (see the module docstring)."""
    state = optimizer.state
    return {
        "groups": optimizer.param_groups,
        "states": [state.get(p) for group in optimizer.param_groups for p in group["params"]],
    }


class _Collector:
    def __init__(self) -> None:
        self.guards: list[Guard] = []

    def add(self, source: Source, kind: GuardKind, payload: dict[str, Any]) -> None:
        self.guards.append(Guard(source, kind, payload))

    def value(self, source: Source, value: Any) -> None:
        """A tensor's metadata, or a constant's value (a hyperparameter, a state entry)."""
        if isinstance(value, torch.Tensor):
            self.add(source, GuardKind.TENSOR_MATCH, tensor_payload(value))
        elif value is None or isinstance(value, bool):
            self.add(source, GuardKind.CONSTANT_MATCH, {"value": value})
        else:
            self.add(source, GuardKind.EQUALS_MATCH, {"value": encode_value(value)})

    def keys(self, source: Source, d: dict[Any, Any]) -> None:
        self.add(source, GuardKind.DICT_KEYS, {"keys": [encode_value(k) for k in d]})


def step_guards(optimizer: torch.optim.Optimizer) -> GuardSet:
    """The guards of a step compiled for ``optimizer`` as it is now.

    Raises ``FormatError`` (ember.ir) for a hyperparameter or state value a guard cannot
    hold (an object without a constant encoding): such a layout is not compiled.
    """
    c = _Collector()
    groups: Source = Local("groups")
    states: Source = Local("states")
    c.add(groups, GuardKind.LENGTH_MATCH, {"length": len(optimizer.param_groups)})
    j = 0
    for g, group in enumerate(optimizer.param_groups):
        gsrc = Item(groups, g)
        c.keys(gsrc, group)
        for key, value in group.items():
            src = Item(gsrc, key)
            if key == "params":
                c.add(src, GuardKind.LENGTH_MATCH, {"length": len(value)})
                for i, p in enumerate(value):
                    psrc = Item(src, i)
                    c.add(psrc, GuardKind.ID_MATCH, {"id": id(p), "repr": "<parameter>"})
                    c.value(psrc, p)
                    c.value(Attr(psrc, "grad"), p.grad)
                    state = optimizer.state.get(p)
                    ssrc = Item(states, j)
                    j += 1
                    if state is None:
                        c.add(ssrc, GuardKind.CONSTANT_MATCH, {"value": None})
                        continue
                    c.keys(ssrc, state)
                    for name, entry in state.items():
                        c.value(Item(ssrc, name), entry)
            elif key == "lr" and not isinstance(value, torch.Tensor):
                t = type(value)
                c.add(src, GuardKind.TYPE_MATCH, {"type": qualname(t), "type_id": id(t)})
            else:
                c.value(src, value)
    return GuardSet(tuple(c.guards))


def compile_guards(optimizer: torch.optim.Optimizer) -> Any:
    """``ember.guards``' check function for ``optimizer``'s current layout (call it with
    ``step_locals(optimizer), {}``)."""
    return ember.guards.compile(step_guards(optimizer), step_locals(optimizer), {})


__all__ = ["compile_guards", "step_guards", "step_locals"]
