"""The explicit list of assumptions a capture made.

Trackers never guard by themselves: :func:`ember.dynamo.builder.wrap` and
the translator call the ``add_*`` methods with a source and the value that
was seen. Each becomes one ``ember.ir.Guard``; :meth:`to_guard_set` returns
the ``GuardSet`` that ``ember.guards.compile`` turns into a check function.
"""

from __future__ import annotations

import enum
import types
from dataclasses import dataclass, field
from typing import Any

import torch

from ember import ir
from ember.ir import Attr, Item, Source

_CONSTANT_TYPES = (type(None), bool, int, float, str, bytes)


@dataclass
class GuardCollector:
    guards: dict[tuple[str, str], ir.Guard] = field(default_factory=dict)

    def _add(self, source: Source | None, kind: ir.GuardKind, payload: dict[str, Any]) -> None:
        key = (source.expr() if source is not None else "", kind.value)
        if key in self.guards:
            return
        self.guards[key] = ir.Guard(source, kind, payload)

    def add_tensor(
        self, source: Source, t: torch.Tensor,
        dynamic: tuple[tuple[int, ...], tuple[int, ...]] = ((), ()),
    ) -> None:
        """``t``'s class, dtype, device, sizes and strides; ``dynamic`` = (dims with a
        symbolic size, dims with a symbolic stride), left to SHAPE_EXPR guards."""
        sizes, strides = dynamic
        self._add(source, ir.GuardKind.TENSOR_MATCH, ir.tensor_payload(t, sizes, strides))

    def add_dtensor(self, source: Source, t: Any) -> None:
        """A DTensor (ADR 0069): its class and global layout (``TENSOR_MATCH``), its device
        mesh (by identity), each placement's class and dimension or reduce op, and its
        local tensor's layout; any change recompiles, the failed guard naming it."""
        self.add_tensor(source, t)
        self.add_id(Attr(source, "device_mesh"), t.device_mesh)
        placements = Attr(source, "placements")
        self.add_length(placements, t.placements)
        for i, p in enumerate(t.placements):
            self.add_placement(Item(placements, i), p)
        self.add_tensor(Attr(source, "_local_tensor"), t._local_tensor)

    def add_placement(self, source: Source, p: Any) -> None:
        """A DTensor placement by value: its class and its ``dim`` (``Shard``) or
        ``reduce_op`` (``Partial``)."""
        self.add_type(source, p)
        for name in ("dim", "reduce_op"):
            value = getattr(p, name, None)
            if isinstance(value, (int, str)):
                self.add_constant(Attr(source, name), value)

    def add_shape(self, guard: ir.Guard) -> None:
        """A SHAPE_EXPR guard (keyed by its relation: a set holds many)."""
        key = (str(guard.payload["expr"]), ir.GuardKind.SHAPE_EXPR.value)
        self.guards.setdefault(key, guard)

    def add_type(self, source: Source, value: Any) -> None:
        t = type(value)
        self._add(source, ir.GuardKind.TYPE_MATCH, {"type": ir.qualname(t), "type_id": id(t)})

    def add_id(self, source: Source, value: Any) -> None:
        if isinstance(value, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)):
            text = repr(value)
        else:
            text = f"<{type(value).__name__} object>"
        self._add(source, ir.GuardKind.ID_MATCH, {"id": id(value), "repr": text[:200]})

    def add_function(self, source: Source, fn: Any) -> None:
        self._add(source, ir.GuardKind.FUNCTION_MATCH, {"id": id(fn), "qualname": ir.qualname(fn)})

    def add_module(self, source: Source, module: torch.nn.Module) -> None:
        self._add(source, ir.GuardKind.NN_MODULE, {"id": id(module), "type": ir.qualname(type(module))})

    def add_constant(self, source: Source, value: Any, reason: str = "") -> None:
        """Pin a Python value read from the frame: by value where it can be
        encoded, by identity otherwise. ``reason``: why, said when the guard fails."""
        if isinstance(value, enum.Enum):
            # A member of a str/int enum is a str/int, but its encoding is the plain
            # value: stored and loaded, ``type(v) is Action`` would become ``type(v) is
            # str`` and never hold again. Members are singletons: pin the member itself.
            self.add_id(source, value)
            return
        kind = (
            ir.GuardKind.CONSTANT_MATCH
            if isinstance(value, _CONSTANT_TYPES)
            else ir.GuardKind.EQUALS_MATCH
        )
        try:
            encoded = ir.encode_guard_value(value)
        except ir.FormatError:
            self.add_id(source, value)
            return
        if kind is ir.GuardKind.EQUALS_MATCH or isinstance(value, bool):
            self.add_type(source, value)
        self._add(source, kind, {"value": encoded, **({"reason": reason} if reason else {})})

    def add_length(self, source: Source, value: Any) -> None:
        self.add_type(source, value)
        self._add(source, ir.GuardKind.LENGTH_MATCH, {"length": len(value)})

    def add_empty(self, source: Source) -> None:
        """``len(source) == 0``, without a type check: for the containers torch itself
        keeps on an object (a module's hook dicts), one cheap part each."""
        self._add(source, ir.GuardKind.LENGTH_MATCH, {"length": 0})

    def add_dict_keys(self, source: Source, value: dict[Any, Any]) -> None:
        self.add_type(source, value)
        self._add(source, ir.GuardKind.DICT_KEYS, {"keys": [ir.encode_value(k) for k in value]})

    def add_guard(self, guard: ir.Guard) -> None:
        """A guard made elsewhere (``eager_fallback.no_aliasing_guard``)."""
        key = (guard.source.expr() if guard.source is not None else "", guard.kind.value)
        if guard.source is None and guard.kind is ir.GuardKind.NO_ALIASING:
            key = ("|".join(map(str, guard.payload["sources"])), guard.kind.value)  # type: ignore[arg-type]
        self.guards.setdefault(key, guard)

    def add_global_state(self) -> None:
        self._add(None, ir.GuardKind.GLOBAL_STATE, ir.global_state_payload())

    def __len__(self) -> int:
        return len(self.guards)

    def describe(self) -> list[str]:
        return [g.describe() for g in self.guards.values()]

    def to_guard_set(self) -> ir.GuardSet:
        order = {k: i for i, k in enumerate(ir.GuardKind)}
        guards = sorted(self.guards.values(), key=lambda g: order[g.kind])
        return ir.GuardSet(tuple(guards))
