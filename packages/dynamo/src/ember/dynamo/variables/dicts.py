"""Dicts with constant keys (the ``**kwargs``/config dicts of model code)."""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ember.ir import Source

from ..errors import MissingKey, Unsupported
from ..mutable import Box
from .base import NotConstant, VariableTracker
from .constant import ConstantVariable
from .lazy import LazyVariable
from .lists import TupleVariable
from .misc import BoundCallVariable

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx


def identity_key(v: VariableTracker) -> Any:
    """The real object behind a tracker, when it can key a dict by identity."""
    value = getattr(v, "value", None)
    if value is None:
        return None
    try:
        hash(value)
    except TypeError:
        return None
    return value


def dict_key(v: VariableTracker) -> Any:
    if v.is_python_constant():
        return v.as_python_constant()
    key = identity_key(v)
    if key is not None:
        return key
    raise Unsupported(f"dict key {v.describe()} is not a constant")


class DictVariable(VariableTracker):
    """A dict with constant keys; its items live in a box every alias shares
    (a change writes a new dict through the trail, never edits the old one)."""

    def __init__(
        self,
        items: Mapping[Any, VariableTracker],
        source: Source | None = None,
        dict_type: type = dict,
        box: Box[dict[Any, VariableTracker]] | None = None,
    ) -> None:
        super().__init__(source)
        #: the items; ``box`` shares another tracker's (an object's ``__dict__``)
        self.box: Box[dict[Any, VariableTracker]] = Box(dict(items)) if box is None else box
        self.dict_type = dict_type

    @property
    def items(self) -> Mapping[Any, VariableTracker]:
        """The items now (read-only: change them with :meth:`write`)."""
        return self.box.value

    def python_type(self) -> type:
        return self.dict_type

    def write(self, tx: Tx, items: Mapping[Any, VariableTracker]) -> None:
        """Replace the items (every alias sees it; undone if the instruction fails)."""
        tx.output.trail.set(self.box, dict(items))
        if self.source is not None:
            tx.output.side_effects.track_dict(self)

    def set_item(self, tx: Tx, key: Any, value: VariableTracker) -> None:
        self.write(tx, {**self.items, key: value})

    def realize(self, tx: Tx, key: Any) -> VariableTracker:
        """The item for ``key``; items read from the frame are wrapped (and
        guarded) only when used."""
        v: VariableTracker = self.items[key]
        if isinstance(v, LazyVariable):
            v = v.realize(tx)
            # the same Python dict, only more of it read: nothing to write back
            tx.output.trail.set(self.box, {**self.items, key: v}, observable=False)
        return v

    def realize_all(self, tx: Tx) -> None:
        for k in list(self.items):
            self.realize(tx, k)

    def describe(self) -> str:
        return f"dict with keys {list(self.items)!r}"

    def is_python_constant(self) -> bool:
        return not any(isinstance(v, LazyVariable) for v in self.items.values()) and all(
            v.is_python_constant() for v in self.items.values()
        )

    def as_python_constant(self) -> Any:
        if any(isinstance(v, LazyVariable) for v in self.items.values()):
            raise NotConstant("dict with unread items")
        return {k: v.as_python_constant() for k, v in self.items.items()}

    def truth(self, tx: Tx) -> bool:
        return bool(self.items)

    def unpack(self, tx: Tx) -> list[VariableTracker]:
        return [ConstantVariable(k) for k in self.items]

    def getitem(self, tx: Tx, key: VariableTracker) -> VariableTracker:
        k = dict_key(key)
        if k not in self.items:
            raise MissingKey(f"dict lookup of missing key {k!r} (KeyError)", k)
        return self.realize(tx, k)

    def reconstruct(self, cg: PyCodegen) -> None:
        if self.source is not None:
            cg.load_source(self.source)
            return
        cg.reconstruct_once(self, lambda: self.reconstruct_items(cg))

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        return BoundCallVariable(self, name)

    def reorder(
        self, tx: Tx, name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        """``OrderedDict.move_to_end(key, last=True)`` and ``popitem()`` (``last=`` on an
        OrderedDict; a dict pops its newest item)."""
        ordered = self.dict_type is collections.OrderedDict
        rest = [*args[1:], *kwargs.values()] if name == "move_to_end" else [*args, *kwargs.values()]
        if len(rest) > 1 or set(kwargs) - {"last"} or (rest and not ordered) or (
            name == "move_to_end" and not ordered
        ) or not all(v.is_python_constant() for v in rest):
            raise Unsupported(f"method `{self.dict_type.__name__}.{name}` with these arguments")
        last = bool(rest[0].as_python_constant()) if rest else True
        items = dict(self.items)
        if name == "popitem":
            if not items:
                raise MissingKey(f"popitem(): {self.dict_type.__name__} is empty (KeyError)")
            k = next(reversed(items)) if last else next(iter(items))
            v = self.realize(tx, k)
            del items[k]
            self.write(tx, items)
            return TupleVariable([ConstantVariable(k), v])
        k = dict_key(args[0])
        if k not in items:
            raise MissingKey(f"move_to_end of missing key {k!r} (KeyError)", k)
        v = items.pop(k)
        self.write(tx, {**items, k: v} if last else {k: v, **items})
        return ConstantVariable(None)

    def reconstruct_items(self, cg: PyCodegen) -> None:
        ordered = self.dict_type is collections.OrderedDict
        if self.dict_type is not dict and not ordered:
            raise Unsupported(f"rebuilding a `{self.dict_type.__name__}` after the graph")
        if ordered:  # OrderedDict(<the items as a dict>): a dict keeps their order
            cg.load_callable_const(collections.OrderedDict)
        for k, v in self.items.items():
            cg.load_const(k)
            v.reconstruct(cg)
        cg.build(dict, len(self.items))
        if ordered:
            cg.call(1)

    def call_method(
        self,
        tx: Tx,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        none = ConstantVariable(None)
        if name == "__getitem__" and len(args) == 1:
            return self.getitem(tx, args[0])
        if name == "get" and 1 <= len(args) <= 2:
            k = dict_key(args[0])
            if k in self.items:
                return self.realize(tx, k)
            return args[1] if len(args) == 2 else none
        if name == "keys" and not args:
            return TupleVariable([ConstantVariable(k) for k in self.items])
        if name in ("values", "items", "copy", "pop", "setdefault", "update"):
            self.realize_all(tx)
        if name == "values" and not args:
            return TupleVariable(list(self.items.values()))
        if name == "items" and not args:
            return TupleVariable(
                [TupleVariable([ConstantVariable(k), v]) for k, v in self.items.items()]
            )
        if name == "__contains__" and len(args) == 1:
            return ConstantVariable(dict_key(args[0]) in self.items)
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name == "copy" and not args:
            return DictVariable(self.items, dict_type=self.dict_type if self.dict_type is collections.OrderedDict
                                else dict)
        if name in ("move_to_end", "popitem") and (name == "popitem" or args):
            return self.reorder(tx, name, args, kwargs)
        if name in ("__setitem__",) and len(args) == 2:
            self.set_item(tx, dict_key(args[0]), args[1])
            return none
        if name == "update" and len(args) <= 1:
            items = dict(self.items)
            if args:
                other = args[0]
                if isinstance(other, DictVariable):
                    items.update(other.items)
                else:
                    for pair in other.unpack(tx):
                        k, v = pair.unpack(tx)
                        items[dict_key(k)] = v
            items.update(kwargs)
            self.write(tx, items)
            return none
        if name == "setdefault" and 1 <= len(args) <= 2:
            k = dict_key(args[0])
            if k not in self.items:
                self.set_item(tx, k, args[1] if len(args) == 2 else none)
            found: VariableTracker = self.items[k]
            return found
        if name == "pop" and 1 <= len(args) <= 2:
            k = dict_key(args[0])
            if k in self.items:
                items = dict(self.items)
                popped: VariableTracker = items.pop(k)
                self.write(tx, items)
                return popped
            if len(args) == 2:
                return args[1]
            raise Unsupported(f"dict.pop of missing key {k!r} (KeyError)")
        if name == "__delitem__" and len(args) == 1:
            k = dict_key(args[0])
            if k not in self.items:
                raise Unsupported(f"del of missing dict key {k!r} (KeyError)")
            items = dict(self.items)
            del items[k]
            self.write(tx, items)
            return none
        if name == "clear" and not args:
            self.write(tx, {})
            return none
        raise Unsupported(f"method `dict.{name}` cannot be traced")

