"""Python sets of hashable constants (``{f.name for f in fields(self)}``,
``set(d) - {"x"}``): items are kept in a box by key, in the order the real
set would iterate them (a set rebuilt from the same keys in the same order)."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ember.ir import Source

from ..errors import Unsupported
from ..mutable import Box
from .base import VariableTracker
from .constant import ConstantVariable
from .dicts import dict_key
from .lists import ListIteratorVariable

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx

SET_OPERATORS: dict[Any, str] = {
    operator.or_: "union", operator.and_: "intersection", operator.sub: "difference",
    operator.xor: "symmetric_difference", operator.ior: "update",
    operator.iand: "intersection_update", operator.isub: "difference_update",
    operator.ixor: "symmetric_difference_update",
}


class SetVariable(VariableTracker):
    def __init__(
        self, items: dict[Any, VariableTracker], frozen: bool = False, source: Source | None = None
    ) -> None:
        #: ``source``: a set read from the frame (its items guarded by value); such a set
        #: is read only here (a change would have to be replayed on the real object)
        super().__init__(source)
        self.box: Box[dict[Any, VariableTracker]] = Box(ordered(items))
        self.frozen = frozen

    @classmethod
    def of(cls, tx: Tx, values: Iterable[VariableTracker], frozen: bool = False) -> SetVariable:
        items: dict[Any, VariableTracker] = {}
        for v in values:
            items.setdefault(dict_key(v), v)
        return cls(items, frozen)

    @property
    def items(self) -> dict[Any, VariableTracker]:
        return self.box.value

    def python_type(self) -> type:
        return frozenset if self.frozen else set

    def describe(self) -> str:
        return f"{self.python_type().__name__} of {len(self.items)}"

    def as_python_constant(self) -> Any:
        return self.python_type()(v.as_python_constant() for v in self.items.values())

    def truth(self, tx: Tx) -> bool:
        return bool(self.items)

    def unpack(self, tx: Tx) -> list[VariableTracker]:
        return list(self.items.values())

    def write(self, tx: Tx, items: dict[Any, VariableTracker]) -> None:
        if self.frozen:
            raise Unsupported("a frozenset cannot be changed (AttributeError)")
        if self.source is not None:
            raise Unsupported(f"changing the set {self.source.expr()} inside a compiled region")
        tx.output.trail.set(self.box, ordered(items))

    def contains(self, item: VariableTracker) -> bool:
        return dict_key(item) in self.items

    def other_items(self, tx: Tx, other: VariableTracker) -> dict[Any, VariableTracker]:
        if isinstance(other, SetVariable):
            return dict(other.items)
        return SetVariable.of(tx, other.unpack(tx)).items

    def call_method(
        self, tx: Tx, name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        none = ConstantVariable(None)
        if kwargs:
            raise Unsupported(f"`set.{name}` with keyword arguments")
        items = dict(self.items)
        if name == "__contains__" and len(args) == 1:
            return ConstantVariable(self.contains(args[0]))
        if name == "__len__" and not args:
            return ConstantVariable(len(items))
        if name == "__iter__" and not args:
            return ListIteratorVariable(list(items.values()))
        if name == "copy" and not args:
            return SetVariable(items, self.frozen)
        if name == "add" and len(args) == 1:
            items.setdefault(dict_key(args[0]), args[0])
            self.write(tx, items)
            return none
        if name in ("discard", "remove") and len(args) == 1:
            key = dict_key(args[0])
            if key not in items and name == "remove":
                raise Unsupported(f"set.remove of a missing item {key!r} (KeyError)")
            items.pop(key, None)
            self.write(tx, items)
            return none
        if name == "clear" and not args:
            self.write(tx, {})
            return none
        others = [self.other_items(tx, a) for a in args]
        if name in ("union", "update"):
            for o in others:
                for k, v in o.items():
                    items.setdefault(k, v)
        elif name in ("intersection", "intersection_update"):
            for o in others:
                items = {k: v for k, v in items.items() if k in o}
        elif name in ("difference", "difference_update"):
            for o in others:
                items = {k: v for k, v in items.items() if k not in o}
        elif name in ("symmetric_difference", "symmetric_difference_update") and len(others) == 1:
            o = others[0]
            items = {**{k: v for k, v in items.items() if k not in o},
                     **{k: v for k, v in o.items() if k not in items}}
        elif name in ("issubset", "issuperset", "isdisjoint") and len(others) == 1:
            mine, theirs = set(items), set(others[0])
            result = {"issubset": mine <= theirs, "issuperset": mine >= theirs,
                      "isdisjoint": not (mine & theirs)}[name]
            return ConstantVariable(result)
        else:
            raise Unsupported(f"method `set.{name}` cannot be traced")
        if name.endswith("update"):
            self.write(tx, items)
            return none
        return SetVariable(items, self.frozen)

    def binary(self, tx: Tx, fn: Any, other: VariableTracker) -> VariableTracker | None:
        """``self | other`` and friends (None: not a set operator)."""
        method = SET_OPERATORS.get(fn)
        if method is None or not isinstance(other, SetVariable):
            return None
        result = self.call_method(tx, method, [other], {})
        return self if method.endswith("update") else result

    def reconstruct(self, cg: PyCodegen) -> None:
        if self.source is not None:
            cg.load_source(self.source)  # the object itself
            return
        cg.reconstruct_once(self, lambda: self._build(cg))

    def _build(self, cg: PyCodegen) -> None:
        if self.frozen:
            cg.load_callable_const(frozenset)
        for v in self.items.values():
            v.reconstruct(cg)
        cg.emit("BUILD_SET", len(self.items))
        if self.frozen:
            cg.call(1)


def ordered(items: dict[Any, VariableTracker]) -> dict[Any, VariableTracker]:
    """``items`` in the order a real set of the same keys iterates."""
    try:
        order = list(set(items))
    except TypeError as e:
        raise Unsupported(f"set of unhashable items: {e}") from e
    return {k: items[k] for k in order}
