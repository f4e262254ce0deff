"""``itertools`` while tracing.

Finite iterators are unrolled into a :class:`ListIteratorVariable` of their
items, as loops are. ``count()`` and ``repeat(x)`` without a length never
end: an :class:`EndlessIteratorVariable` gives items one at a time and is
only taken from by what stops on its own (``zip`` with a finite partner,
``islice``, ``next``, ``map``).
"""

from __future__ import annotations

import itertools
import operator
from typing import TYPE_CHECKING, Any

from ..errors import Unsupported
from ..mutable import Box
from .base import VariableTracker
from .constant import ConstantVariable
from .lists import ListIteratorVariable, TupleVariable
from .operators import Args, Kwargs, apply_operator

if TYPE_CHECKING:
    from ..translator_core import TranslatorCore as Tx


class EndlessIteratorVariable(VariableTracker):
    """``itertools.count(start, step)`` or ``itertools.repeat(x)``."""

    def __init__(self, first: VariableTracker, step: VariableTracker | None) -> None:
        super().__init__(None)
        self.first = first
        #: None: repeat ``first`` forever; else add ``step`` each time
        self.step = step
        self.taken: Box[int] = Box(0)

    def describe(self) -> str:
        return "endless iterator (itertools.count / repeat)"

    def next_item(self, tx: Tx) -> VariableTracker:
        n = self.taken.value
        tx.output.trail.set(self.taken, n + 1, observable=False)
        if self.step is None:
            return self.first
        value = self.first
        for _ in range(n):
            value = apply_operator(tx, operator.add, [value, self.step])
        return value

    def take(self, tx: Tx, n: int) -> list[VariableTracker]:
        return [self.next_item(tx) for _ in range(n)]

    def unpack(self, tx: Tx) -> list[VariableTracker]:
        raise Unsupported("iterating to the end of an endless iterator (itertools.count/repeat)")


def items_of(tx: Tx, v: VariableTracker) -> list[VariableTracker]:
    if isinstance(v, EndlessIteratorVariable):
        raise Unsupported("an endless iterator where a finite one is needed")
    return v.unpack(tx)


def take_parallel(tx: Tx, iterables: Args) -> list[list[VariableTracker]]:
    """The items of each argument, as many as the shortest finite one has (``zip``)."""
    finite = [items_of(tx, a) if not isinstance(a, EndlessIteratorVariable) else None for a in iterables]
    lengths = [len(f) for f in finite if f is not None]
    if not lengths:
        raise Unsupported("zip/map over endless iterators only")
    n = min(lengths)
    out: list[list[VariableTracker]] = []
    for a, f in zip(iterables, finite, strict=True):
        out.append(f[:n] if f is not None else a.take(tx, n))  # type: ignore[attr-defined]
    return out


def const_int(v: VariableTracker | None, what: str) -> int | None:
    if v is None:
        return None
    value = v.as_python_constant()
    if value is not None and not isinstance(value, int):
        raise Unsupported(f"{what} must be an int or None")
    return value


def islice(tx: Tx, args: Args) -> VariableTracker:
    it, rest = args[0], [const_int(a, "islice bound") for a in args[1:]]
    if len(rest) == 1:
        start, stop, step = 0, rest[0], 1
    elif len(rest) in (2, 3):
        start, stop = rest[0] or 0, rest[1]
        step = (rest[2] if len(rest) == 3 else 1) or 1
    else:
        raise Unsupported("islice() takes 2 to 4 arguments (TypeError)")
    if isinstance(it, EndlessIteratorVariable):
        if stop is None:
            raise Unsupported("islice() of an endless iterator without a stop")
        taken = it.take(tx, stop)
        return ListIteratorVariable(taken[start:stop:step])
    return ListIteratorVariable(items_of(tx, it)[start:stop:step])


def accumulate(tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
    items = items_of(tx, args[0])
    fn = args[1] if len(args) > 1 else kwargs.get("func")
    initial = kwargs.get("initial")
    out: list[VariableTracker] = []
    acc = initial
    if acc is not None and not (acc.is_python_constant() and acc.as_python_constant() is None):
        out.append(acc)
    else:
        acc = None
    for item in items:
        if acc is None:
            acc = item
        elif fn is None or (fn.is_python_constant() and fn.as_python_constant() is None):
            acc = apply_operator(tx, operator.add, [acc, item])
        else:
            acc = fn.call_function(tx, [acc, item], {})
        out.append(acc)
    return ListIteratorVariable(out)


def construct_itertools(tx: Tx, cls: Any, args: Args, kwargs: Kwargs) -> VariableTracker:
    """``itertools.<cls>(*args, **kwargs)``."""
    if cls is itertools.chain and not kwargs:
        return ListIteratorVariable([x for a in args for x in items_of(tx, a)])
    if cls is itertools.islice and not kwargs:
        return islice(tx, args)
    if cls is itertools.repeat:
        times = const_int(args[1] if len(args) > 1 else kwargs.get("times"), "repeat count")
        if times is None:
            return EndlessIteratorVariable(args[0], None)
        return ListIteratorVariable([args[0]] * max(times, 0))
    if cls is itertools.count:
        start = args[0] if args else kwargs.get("start", ConstantVariable(0))
        step = args[1] if len(args) > 1 else kwargs.get("step", ConstantVariable(1))
        return EndlessIteratorVariable(start, step)
    if cls is itertools.accumulate:
        return accumulate(tx, args, kwargs)
    if cls is itertools.zip_longest:
        fill = kwargs.get("fillvalue", ConstantVariable(None))
        lists = [items_of(tx, a) for a in args]
        n = max((len(x) for x in lists), default=0)
        return ListIteratorVariable(
            [TupleVariable([x[i] if i < len(x) else fill for x in lists]) for i in range(n)]
        )
    if cls is itertools.starmap and len(args) == 2:
        fn = args[0]
        return ListIteratorVariable(
            [fn.call_function(tx, items_of(tx, t), {}) for t in items_of(tx, args[1])]
        )
    if cls in (itertools.product, itertools.combinations, itertools.permutations,
               itertools.combinations_with_replacement, itertools.pairwise):
        return combinatoric(tx, cls, args, kwargs)
    if cls in (itertools.takewhile, itertools.dropwhile, itertools.filterfalse) and len(args) == 2:
        pred, items = args[0], items_of(tx, args[1])
        truths = [pred.call_function(tx, [v], {}).truth(tx) for v in items]
        if cls is itertools.filterfalse:
            return ListIteratorVariable([v for v, t in zip(items, truths, strict=True) if not t])
        cut = next((i for i, t in enumerate(truths) if not t), len(items))
        return ListIteratorVariable(items[:cut] if cls is itertools.takewhile else items[cut:])
    if cls is itertools.compress and len(args) == 2:
        pairs = zip(items_of(tx, args[0]), items_of(tx, args[1]), strict=False)
        return ListIteratorVariable([v for v, s in pairs if s.truth(tx)])
    raise Unsupported(f"`itertools.{getattr(cls, '__name__', cls)}` cannot be traced")


def combinatoric(tx: Tx, cls: Any, args: Args, kwargs: Kwargs) -> VariableTracker:
    """product / combinations / permutations / pairwise over item positions."""
    const_kwargs = {k: v.as_python_constant() for k, v in kwargs.items()}
    if cls is itertools.product:
        pools = [items_of(tx, a) for a in args]
        index_tuples = itertools.product(*[range(len(p)) for p in pools], **const_kwargs)
        repeat = const_kwargs.get("repeat", 1)
        pools = pools * repeat
        return ListIteratorVariable(
            [TupleVariable([pools[k][i] for k, i in enumerate(t)]) for t in index_tuples]
        )
    items = items_of(tx, args[0])
    extra = [a.as_python_constant() for a in args[1:]]
    positions = cls(range(len(items)), *extra, **const_kwargs)
    return ListIteratorVariable([TupleVariable([items[i] for i in t]) for t in positions])


ITERTOOLS_TYPES: frozenset[Any] = frozenset(
    v for v in vars(itertools).values() if isinstance(v, type)
)
