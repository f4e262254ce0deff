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

Per call (ADR 0058) a step does not run one guard per tensor: :class:`StepGuards`
checks the groups' own guards (:func:`group_guards`: their keys, hyperparameters and
the lengths of their parameter lists, a few per group) and then one native loop per
group over its parameters, gradients and state (``ember.guards.native.layout_check``),
which gathers the step's inputs as it goes. Where that loop cannot decide (no compiler,
the helper still being built, a tensor subclass, a ``__torch_function__`` mode) the
per-tensor guards (:func:`step_guards`) decide, and they always explain.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

import ember.guards
from ember.guards import native
from ember.ir import (
    Attr,
    Guard,
    GuardKind,
    GuardSet,
    Item,
    Local,
    Source,
    decode_value,
    encode_value,
    qualname,
    tensor_payload,
)

from .logs import get_logger

log = get_logger("dynamo")


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


def step_guards(optimizer: torch.optim.Optimizer, tensors: bool = True) -> GuardSet:
    """The guards of a step compiled for ``optimizer`` as it is now (``tensors=False``:
    :func:`group_guards`).

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
                if not tensors:
                    continue
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


def group_guards(optimizer: torch.optim.Optimizer) -> GuardSet:
    """:func:`step_guards` without the guards per parameter, gradient and state: the number
    of groups, each group's keys, hyperparameters and number of parameters (read from the
    local ``groups`` only)."""
    return step_guards(optimizer, tensors=False)


def compile_guards(optimizer: torch.optim.Optimizer) -> Any:
    """``ember.guards``' check function for ``optimizer``'s current layout (call it with
    ``step_locals(optimizer), {}``)."""
    return ember.guards.compile(step_guards(optimizer), step_locals(optimizer), {})


def _native_mode() -> str | None:
    """``EMBER_NATIVE_GUARDS`` as ``ember.guards`` reads it: None (off), "eager" or "1"."""
    mode = os.environ.get("EMBER_NATIVE_GUARDS", "1").strip().lower()
    if mode in ("0", "false", "off", "no"):
        return None
    return "eager" if mode == "eager" else "1"


def _entry(key: Any, value: Any, codes: Any) -> tuple[Any, ...]:
    """One state entry of the native layout, testing what :meth:`_Collector.value`'s guard
    tests (``native_tensor.cpp``: 0 a tensor, 1 identity, 2 nan, 3 type and ``==``)."""
    if isinstance(value, torch.Tensor):
        return (key, 0, _spec(value, codes), type(value))
    if value is None or isinstance(value, bool):
        return (key, 1, value, None)
    decoded = decode_value(encode_value(value), field="value")
    if decoded is Ellipsis:
        return (key, 1, decoded, None)
    if isinstance(decoded, float) and decoded != decoded:
        return (key, 2, None, None)
    return (key, 3, type(decoded), decoded)


class _NoSpec(Exception):
    """A tensor the native layout cannot check (its guard stays the per-tensor one)."""


def _spec(t: torch.Tensor, codes: Any) -> tuple[int, ...]:
    spec = native.tensor_match_spec(tensor_payload(t), codes)
    if spec is None:
        raise _NoSpec(f"no direct read of a {type(t).__name__}")
    return spec


def layout_spec(optimizer: torch.optim.Optimizer, inputs: list[list[str]], codes: Any) -> tuple[Any, ...]:
    """The native layout of ``optimizer`` now (``native_tensor.cpp``'s ``make_layout``):
    per group, per parameter, the object, its class and spec, its gradient's, its state's
    entries, and which of them are the step's inputs (``inputs``: the state keys of each
    parameter with a gradient, in the order the compiled step takes them; ``codes``: the
    tensor helper module, ``native.tensor_helper()[0]``)."""
    todo = iter(inputs)
    groups = []
    for group in optimizer.param_groups:
        rows = []
        for p in group["params"]:
            grad = p.grad
            state = optimizer.state.get(p)
            entries = None if state is None else tuple(_entry(k, v, codes) for k, v in state.items())
            gather: tuple[int, ...] = ()
            if grad is not None:
                keys = list(state) if state is not None else []
                gather = tuple(keys.index(k) for k in next(todo))
            rows.append((
                p, type(p), _spec(p, codes), None if grad is None else type(grad),
                None if grad is None else _spec(grad, codes), entries, gather,
            ))  # fmt: skip
        groups.append(tuple(rows))
    if next(todo, None) is not None:
        raise ValueError("the plan has more parameters with a gradient than the optimizer")
    return tuple(groups)


class StepGuards:
    """The guards of one compiled layout (ADR 0058): ``match(optimizer)`` is ``(False, None)``
    where the layout does not apply, ``(True, inputs)`` where it does and the native loop
    gathered the step's tensor inputs (lr apart), ``(True, None)`` where the per-tensor
    check said so (the caller gathers them)."""

    def __init__(self, optimizer: torch.optim.Optimizer, inputs: list[list[str]]) -> None:
        #: the per-tensor guards: the reference, the fallback, and what explains
        self.full = compile_guards(optimizer)
        self._native_spec: tuple[Any, ...] | None = None
        #: the helper was still being built: the loop is made on a later call the
        #: per-tensor check passes (the optimizer then holds what the guards describe)
        self._pending = False
        #: the loop's first decided verdict was compared with the per-tensor check's
        self._agreed = False
        #: ``check(groups, state)``: the native loop over the groups, once it is built
        self.layout: Callable[[Any, Any], Any] | None = None
        #: the groups' own guards (not per tensor), checked before the loop
        self.groups: Any = None
        #: why the per-tensor check runs instead (None: the loop is used, or not tried yet)
        self.native_error: str | None = None
        mode = _native_mode()
        if mode is None:
            self.native_error = "EMBER_NATIVE_GUARDS=0"
            return
        self._inputs = inputs
        self._state_type = type(optimizer.state)
        self.groups = ember.guards.compile(group_guards(optimizer), {"groups": optimizer.param_groups}, {})
        self._try_layout(optimizer, wait=mode == "eager")

    def _try_layout(self, optimizer: torch.optim.Optimizer, wait: bool) -> None:
        try:
            self._native_spec = self._make_spec(optimizer, self._inputs, wait=wait)
        except (_NoSpec, ValueError) as e:
            self.native_error = f"{type(e).__name__}: {e}"
            return
        self._pending = self._native_spec is None
        self._build_layout(wait=wait)

    @staticmethod
    def _make_spec(optimizer: torch.optim.Optimizer, inputs: list[list[str]], wait: bool) -> tuple[Any, ...] | None:
        helper = native.tensor_helper(wait=wait)
        if helper is None:
            if native.tensor_helper_error() is not None:
                raise _NoSpec(f"no tensor helper: {native.tensor_helper_error()}")
            return None  # still building: the spec is made from the values then (they are guarded)
        return layout_spec(optimizer, inputs, helper[0])

    def _build_layout(self, wait: bool) -> None:
        if self._native_spec is None:
            return
        try:
            self.layout = native.layout_check(self._native_spec, self._state_type, wait=wait)
        except Exception as e:
            self.native_error = f"{type(e).__name__}: {e}"

    def match(self, optimizer: torch.optim.Optimizer) -> tuple[bool, list[torch.Tensor] | None]:
        """Whether the layout applies to ``optimizer`` now, and the inputs where the loop
        gathered them (see the class docstring)."""
        layout = self.layout
        if layout is not None:
            groups = optimizer.param_groups
            if not self.groups.fn({"groups": groups}, {}):
                return False, None
            found = layout(groups, optimizer.state)
            if not self._agreed and found is not None:
                # the first verdict is compared with the per-tensor check's (as ember.guards
                # adopts a native check only when it agrees); a difference drops the loop
                self._agreed = True
                expected = bool(self.full.fn(step_locals(optimizer), {}))
                if expected is not (found is not False):
                    self.layout = None
                    self.native_error = f"the layout loop said {found is not False}, the per-tensor check {expected}"
                    if os.environ.get("EMBER_STRICT") == "1":
                        raise AssertionError(self.native_error)
                    log.warning("optimizer guards: %s; the per-tensor check is used", self.native_error)
                    return expected, None
            if found is False:
                return False, None
            if found is not None:
                return True, found
        ok = bool(self.full.fn(step_locals(optimizer), {}))
        if ok and self._pending and native.tensor_helper() is not None:
            self._try_layout(optimizer, wait=False)
        return ok, None

    @property
    def parts(self) -> int:
        """Guard parts run per call where the native loop is used (one per group for the
        loop), else the per-tensor check's."""
        if self.layout is None:
            return len(self.full.parts)
        return len(self.groups.parts) + len(self._native_spec or ())

    def explain(self, optimizer: torch.optim.Optimizer) -> str | None:
        """Why the layout does not apply, in the per-tensor guards' words (None: it does)."""
        return self.full.explain(step_locals(optimizer), {})  # type: ignore[no-any-return]


__all__ = ["StepGuards", "compile_guards", "group_guards", "layout_spec", "step_guards", "step_locals"]
