"""Tuples, lists and their iterators.

Trackers are immutable; a list's items live in a :class:`~ember.dynamo.mutable.Box`
that every alias of the list shares, so an ``append`` (a new items tuple
written through the capture's trail) is seen through every name that refers
to the same list, exactly as in Python, and is undone if the instruction
fails. A list that came from outside the frame (it has a source) and was
mutated is written back after the graph runs (see ``side_effects``). An
iterator's position is a box too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ember.ir import Source

from ..errors import Unsupported
from ..mutable import Box
from .base import NotConstant, VariableTracker
from .constant import ConstantVariable
from .misc import BoundCallVariable

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx


def const_index(v: VariableTracker, what: str) -> Any:
    """The index as a Python value (a symbolic size is specialized to its value)."""
    try:
        return v.as_python_constant()
    except NotConstant as e:
        raise Unsupported(f"{what} index is not a constant ({v.describe()})") from e


class BaseListVariable(VariableTracker):
    kind: type = list

    def __init__(self, items: Sequence[VariableTracker], source: Source | None = None) -> None:
        super().__init__(source)
        self.box: Box[tuple[VariableTracker, ...]] = Box(tuple(items))

    @property
    def items(self) -> tuple[VariableTracker, ...]:
        """The items now (a list's change as the trail last wrote it)."""
        return self.box.value

    def python_type(self) -> type:
        return self.kind

    def describe(self) -> str:
        return f"{self.kind.__name__} of {len(self.items)}"

    def is_python_constant(self) -> bool:
        # item by item: a symbolic size would specialize if asked for its value
        return all(v.is_python_constant() for v in self.items)

    def as_python_constant(self) -> Any:
        return self.kind(v.as_python_constant() for v in self.items)

    def unpack(self, tx: Tx) -> list[VariableTracker]:
        return list(self.items)

    def truth(self, tx: Tx) -> bool:
        return bool(self.items)

    def getitem(self, tx: Tx, key: VariableTracker) -> VariableTracker:
        k = const_index(key, self.kind.__name__)
        try:
            picked = self.items[k]
        except (IndexError, TypeError) as e:
            raise Unsupported(f"{self.describe()}[{k!r}] raised {type(e).__name__}: {e}") from e
        if isinstance(k, slice):
            return self.new(picked)
        result: VariableTracker = picked
        return result

    def new(self, items: Sequence[VariableTracker]) -> VariableTracker:
        return type(self)(items)

    def reconstruct(self, cg: PyCodegen) -> None:
        if self.source is not None:
            cg.load_source(self.source)
            return
        cg.reconstruct_once(self, lambda: self.reconstruct_items(cg))

    def reconstruct_items(self, cg: PyCodegen) -> None:
        for item in self.items:
            item.reconstruct(cg)
        cg.build(self.kind, len(self.items))

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        return BoundCallVariable(self, name)

    def call_method(
        self,
        tx: Tx,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if name == "__getitem__" and len(args) == 1:
            return self.getitem(tx, args[0])
        if name in ("index", "count") and not kwargs:
            try:
                value = getattr(self.as_python_constant(), name)(
                    *[a.as_python_constant() for a in args]
                )
            except NotConstant as e:
                raise Unsupported(f"{self.kind.__name__}.{name} on non-constant items") from e
            except ValueError as e:
                raise Unsupported(f"{self.kind.__name__}.{name} raised ValueError: {e}") from e
            return ConstantVariable(value)
        if name == "__len__":
            return ConstantVariable(len(self.items))
        raise Unsupported(f"method `{self.kind.__name__}.{name}` cannot be traced")


class TupleVariable(BaseListVariable):
    kind = tuple

    def __repr__(self) -> str:
        return f"Tuple{self.items!r}"


class NamedTupleVariable(TupleVariable):
    """A named tuple or struct sequence (``torch.max(x, 0)`` returns one)."""

    def __init__(
        self, items: Sequence[VariableTracker], tuple_type: type, source: Source | None = None
    ) -> None:
        super().__init__(items, source)
        self.tuple_type = tuple_type

    def python_type(self) -> type:
        return self.tuple_type

    def fields(self) -> tuple[str, ...]:
        named = getattr(self.tuple_type, "_fields", None)
        if named is not None:
            return tuple(named)
        n = getattr(self.tuple_type, "n_fields", len(self.items))
        probe = self.tuple_type(tuple(range(n)))
        names = [k for k in dir(self.tuple_type) if not k.startswith("_") and k not in ("count", "index", "n_fields", "n_sequence_fields", "n_unnamed_fields")]
        return tuple(sorted(names, key=lambda k: getattr(probe, k)))

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        fields = self.fields()
        if name in fields:
            return self.items[fields.index(name)]
        return super().var_getattr(tx, name)

    def new(self, items: Sequence[VariableTracker]) -> VariableTracker:
        return TupleVariable(items)

    def reconstruct_items(self, cg: PyCodegen) -> None:
        cg.before_callable()
        cg.load_const(self.tuple_type)
        cg.after_callable()
        super().reconstruct_items(cg)
        if hasattr(self.tuple_type, "_fields"):
            cg.emit("CALL_FUNCTION_EX", 0)
        else:
            cg.call(1)


class ListVariable(BaseListVariable):
    kind = list

    def __repr__(self) -> str:
        return f"List{list(self.items)!r}"

    def write(self, tx: Tx, items: Sequence[VariableTracker]) -> None:
        """Replace the items (every alias sees it; undone if the instruction fails)."""
        tx.output.trail.set(self.box, tuple(items))
        if self.source is not None:
            tx.output.side_effects.track_list(self)

    def setitem(self, tx: Tx, key: VariableTracker, value: VariableTracker) -> None:
        k = const_index(key, "list")
        items = list(self.items)
        try:
            if isinstance(k, slice):
                items[k] = value.unpack(tx)
            else:
                items[k] = value
        except (IndexError, TypeError, ValueError) as e:
            raise Unsupported(f"{self.describe()}[{k!r}] = ... raised {type(e).__name__}: {e}") from e
        self.write(tx, items)

    def delitem(self, tx: Tx, key: VariableTracker) -> None:
        k = const_index(key, "list")
        items = list(self.items)
        try:
            del items[k]
        except (IndexError, TypeError) as e:
            raise Unsupported(f"del {self.describe()}[{k!r}] raised {type(e).__name__}: {e}") from e
        self.write(tx, items)

    def call_method(
        self,
        tx: Tx,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        none = ConstantVariable(None)
        if name == "append" and len(args) == 1:
            self.write(tx, (*self.items, args[0]))
            return none
        if name == "extend" and len(args) == 1:
            self.write(tx, (*self.items, *args[0].unpack(tx)))
            return none
        if name == "insert" and len(args) == 2:
            items = list(self.items)
            items.insert(const_index(args[0], "list.insert"), args[1])
            self.write(tx, items)
            return none
        if name == "pop" and len(args) <= 1:
            idx = const_index(args[0], "list.pop") if args else -1
            items = list(self.items)
            try:
                popped = items.pop(idx)
            except (IndexError, TypeError) as e:
                raise Unsupported(f"list.pop({idx!r}) raised {type(e).__name__}: {e}") from e
            self.write(tx, items)
            return popped
        if name == "clear" and not args:
            self.write(tx, ())
            return none
        if name == "reverse" and not args:
            self.write(tx, self.items[::-1])
            return none
        if name == "copy" and not args:
            return ListVariable(self.items)
        if name == "__setitem__" and len(args) == 2:
            self.setitem(tx, args[0], args[1])
            return none
        return super().call_method(tx, name, args, kwargs)


class ListIteratorVariable(VariableTracker):
    """An iterator over a fixed list of items (loops are unrolled); its position is a box."""

    def __init__(
        self, items: Sequence[VariableTracker], returned: VariableTracker | None = None
    ) -> None:
        super().__init__(None)
        self.items = tuple(items)
        self.position: Box[int] = Box(0)
        #: what the generator that made these items returned (``yield from``'s value)
        self.returned = returned

    def describe(self) -> str:
        return "iterator"

    def next_item(self, tx: Tx) -> VariableTracker | None:
        index = self.position.value
        if index >= len(self.items):
            return None
        tx.output.trail.set(self.position, index + 1, observable=False)
        return self.items[index]

    def remaining(self) -> tuple[VariableTracker, ...]:
        return self.items[self.position.value :]

    def unpack(self, tx: Tx) -> list[VariableTracker]:
        rest = self.remaining()
        tx.output.trail.set(self.position, len(self.items), observable=False)
        return list(rest)

    def reconstruct(self, cg: PyCodegen) -> None:
        self.reconstruct_items(cg)
        cg.get_iter()

    def reconstruct_items(self, cg: PyCodegen) -> None:
        """The remaining items as a tuple."""
        rest = self.remaining()
        for item in rest:
            item.reconstruct(cg)
        cg.build(tuple, len(rest))
