"""Python operators on trackers: folding constants, tensor ops, list and tuple arithmetic.

What ``a + b``, ``-a``, ``a == b`` mean for any pair of trackers, used by
the opcode handlers, the builtins and the other trackers. On constants they
fold (run now, in Python); on tensors they become graph nodes.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import Unsupported
from ..numpy_ops import numpy_op
from .base import VariableTracker
from .constant import ConstantVariable
from .lists import BaseListVariable, ListVariable, TupleVariable
from .ndarray import NumpyNdarrayVariable, numpy_call
from .objects import MISSING, ObjectVariable
from .sets import SetVariable
from .sym import SymNodeVariable
from .tensor import TensorVariable

if TYPE_CHECKING:
    from ..translator_core import TranslatorCore as Tx

Args = list[VariableTracker]
Kwargs = dict[str, VariableTracker]


def has_tensor(vs: Sequence[VariableTracker]) -> bool:
    for v in vs:
        if isinstance(v, TensorVariable):
            return True
        if isinstance(v, BaseListVariable) and has_tensor(v.items):
            return True
    return False


def all_const(vs: list[VariableTracker]) -> bool:
    return all(v.is_python_constant() for v in vs)


def has_sym(vs: list[VariableTracker]) -> bool:
    """Some of ``vs`` is a symbolic size, and the rest are constants or symbolic sizes."""
    return any(isinstance(v, SymNodeVariable) for v in vs) and all(
        isinstance(v, SymNodeVariable) or v.is_python_constant() for v in vs
    )


def fold(tx: Tx, fn: Any, args: Args, kwargs: Kwargs | None = None) -> VariableTracker:
    """``fn`` run now on constant arguments; its result as a tracker."""
    try:
        value = fn(
            *[a.as_python_constant() for a in args],
            **{k: v.as_python_constant() for k, v in (kwargs or {}).items()},
        )
    except Exception as e:
        name = getattr(fn, "__name__", str(fn))
        raise Unsupported(f"`{name}` on constants raised {type(e).__name__}: {e}") from e
    return tx.wrap_constant(value)


ARITH = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
    operator.mod, operator.pow, operator.matmul, operator.and_, operator.or_,
    operator.xor, operator.lshift, operator.rshift, operator.iadd, operator.isub,
    operator.imul, operator.itruediv, operator.ifloordiv, operator.imod, operator.ipow,
    operator.imatmul, operator.iand, operator.ior, operator.ixor, operator.ilshift,
    operator.irshift, operator.neg, operator.pos, operator.invert, operator.abs,
    operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne,
    operator.not_, operator.truth,
}


INPLACE_TO_OUT = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv,
    operator.imod: operator.mod, operator.ipow: operator.pow, operator.imatmul: operator.matmul,
    operator.iand: operator.and_, operator.ior: operator.or_, operator.ixor: operator.xor,
    operator.ilshift: operator.lshift, operator.irshift: operator.rshift,
}


def apply_operator(tx: Tx, fn: Any, args: Args) -> VariableTracker:
    """``a + b``, ``a < b``, ``-a``... for any trackers."""
    if any(isinstance(a, NumpyNdarrayVariable) for a in args):
        # NumPy's meaning (NEP 50 promotion, ...): through torch._numpy
        return numpy_call(tx, numpy_op(fn), args, {}, fn)
    sequence = sequence_operator(tx, fn, args)
    if sequence is not None:
        return sequence
    if args and isinstance(args[0], SetVariable) and len(args) == 2:
        result = args[0].binary(tx, fn, args[1])
        if result is not None:
            return result
    if any(isinstance(a, ObjectVariable) for a in args):
        found = user_operator(tx, fn, args)
        if found is not None:
            return found
    if fn in INPLACE_TO_OUT and not isinstance(args[0], TensorVariable):
        # a number or a tuple has no in-place operator: `n += t` is `n = n + t`
        fn = INPLACE_TO_OUT[fn]
    if has_tensor(args):
        if fn in (operator.not_, operator.truth):
            raise Unsupported(
                "data-dependent control flow: the truth value of a tensor is only known at run time"
            )
        return tx.output.create_op("call_function", fn, args, {})
    if all_const(args):
        return fold(tx, fn, args)
    if has_sym(args):
        if fn in (operator.not_, operator.truth):
            return ConstantVariable(args[0].truth(tx) != (fn is operator.not_))
        return tx.output.create_op("call_function", INPLACE_TO_OUT.get(fn, fn), args, {})
    base = INPLACE_TO_OUT.get(fn, fn)
    if len(args) == 2:
        a, b = args
        if base in (operator.eq, operator.ne):
            same = same_value(a, b)
            if same is None:
                same = same_items(tx, a, b)
            if same is not None:
                return ConstantVariable(same if base is operator.eq else not same)
    if fn is operator.not_ and len(args) == 1:
        return ConstantVariable(not args[0].truth(tx))
    if fn is operator.truth and len(args) == 1:
        return ConstantVariable(args[0].truth(tx))
    names = ", ".join(a.describe() for a in args)
    raise Unsupported(f"operator `{getattr(fn, '__name__', fn)}` on {names}")


#: operator -> (method, reflected method) Python tries on user objects
DUNDERS: dict[Any, tuple[str, str | None]] = {
    operator.add: ("__add__", "__radd__"), operator.sub: ("__sub__", "__rsub__"),
    operator.mul: ("__mul__", "__rmul__"), operator.truediv: ("__truediv__", "__rtruediv__"),
    operator.floordiv: ("__floordiv__", "__rfloordiv__"), operator.mod: ("__mod__", "__rmod__"),
    operator.pow: ("__pow__", "__rpow__"), operator.matmul: ("__matmul__", "__rmatmul__"),
    operator.and_: ("__and__", "__rand__"), operator.or_: ("__or__", "__ror__"),
    operator.xor: ("__xor__", "__rxor__"), operator.lshift: ("__lshift__", "__rlshift__"),
    operator.rshift: ("__rshift__", "__rrshift__"),
    operator.lt: ("__lt__", "__gt__"), operator.le: ("__le__", "__ge__"),
    operator.gt: ("__gt__", "__lt__"), operator.ge: ("__ge__", "__le__"),
    operator.eq: ("__eq__", "__eq__"), operator.ne: ("__ne__", "__ne__"),
    operator.neg: ("__neg__", None), operator.pos: ("__pos__", None),
    operator.invert: ("__invert__", None), operator.abs: ("__abs__", None),
}


def user_operator(tx: Tx, fn: Any, args: Args) -> VariableTracker | None:
    """An operator on an instance of a user class: its Python dunder methods
    (``__add__``, then the other operand's ``__radd__``; ``__iadd__`` first
    for ``+=``); None when neither defines one (Python's defaults apply)."""
    if fn in INPLACE_TO_OUT:
        name = "__i" + DUNDERS[INPLACE_TO_OUT[fn]][0][2:]
        if isinstance(args[0], ObjectVariable):
            result = args[0].call_dunder(tx, name, [args[1]])
            if result is not MISSING and not is_not_implemented(result):
                return result  # type: ignore[no-any-return]
        fn = INPLACE_TO_OUT[fn]
    names = DUNDERS.get(fn)
    if names is None:
        return None
    name, reflected = names
    if len(args) == 1:
        result = args[0].call_dunder(tx, name, []) if isinstance(args[0], ObjectVariable) else MISSING
        return None if result is MISSING else result
    a, b = args
    attempts: list[tuple[VariableTracker, str, VariableTracker]] = []
    if isinstance(a, ObjectVariable):
        attempts.append((a, name, b))
    if isinstance(b, ObjectVariable) and reflected is not None:
        reflected_first = isinstance(a, ObjectVariable) and b.cls is not a.cls and issubclass(b.cls, a.cls)
        attempts.insert(0 if reflected_first else len(attempts), (b, reflected, a))
    for obj, method, other in attempts:
        result = obj.call_dunder(tx, method, [other])  # type: ignore[attr-defined]
        if result is not MISSING and not is_not_implemented(result):
            return result  # type: ignore[no-any-return]
    if fn in (operator.eq, operator.ne):
        same = a is b
        return ConstantVariable(same if fn is operator.eq else not same)
    raise Unsupported(
        f"operator `{getattr(fn, '__name__', fn)}` on {a.describe()} and {b.describe()} (TypeError)"
    )


def is_not_implemented(v: VariableTracker) -> bool:
    return v.is_python_constant() and v.as_python_constant() is NotImplemented


def sequence_operator(tx: Tx, fn: Any, args: Args) -> VariableTracker | None:
    """List and tuple arithmetic (``a + b``, ``t += (x,)``, ``[x] * 3``), which
    is Python work even when the items are tensors; None for other operands."""
    if len(args) != 2:
        return None
    a, b = _as_sequence(args[0], args[1]), _as_sequence(args[1], args[0])
    if fn is operator.mul and isinstance(b, BaseListVariable) and not isinstance(a, BaseListVariable):
        a, b = b, a  # 3 * [x]
    if not isinstance(a, BaseListVariable):
        return None
    if fn is operator.iadd and isinstance(a, ListVariable):
        a.call_method(tx, "extend", [b], {})  # in place: every alias sees it
        return a
    base = INPLACE_TO_OUT.get(fn, fn)
    if base is operator.add and isinstance(b, BaseListVariable) and a.kind is b.kind:
        return a.new([*a.items, *b.items])
    if base is operator.mul and b.is_python_constant() and isinstance(b.as_python_constant(), int):
        return a.new(a.items * b.as_python_constant())
    return None


def _as_sequence(v: VariableTracker, other: VariableTracker) -> VariableTracker:
    """A constant tuple/list as a tracker of its items when ``other`` is a sequence
    tracker of that kind (``(-1,) + x.shape[1:]`` with a symbolic size in the shape)."""
    if not isinstance(other, BaseListVariable) or isinstance(v, BaseListVariable):
        return v
    if not v.is_python_constant():
        return v
    value = v.as_python_constant()
    if type(value) is not other.kind or not isinstance(value, (tuple, list)):
        return v
    items = [ConstantVariable(x) for x in value]
    return TupleVariable(items) if isinstance(value, tuple) else ListVariable(items)


def same_value(a: VariableTracker, b: VariableTracker) -> bool | None:
    """``a == b`` as ``in`` computes it (identity first), or None if unknown."""
    if a is b:
        return True
    if a.is_python_constant() and b.is_python_constant():
        return bool(a.as_python_constant() == b.as_python_constant())
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        return None
    default_eq: Any = object.__eq__
    if (a.fresh or b.fresh) and all(
        getattr(v.python_type(), "__eq__", default_eq) is default_eq for v in (a, b) if v.fresh
    ):
        return False  # an object made while tracing equals only itself
    ra, rb = getattr(a, "value", None), getattr(b, "value", None)
    if ra is not None and rb is not None and type(ra).__eq__ is default_eq:
        return ra is rb
    return None


def same_items(tx: Tx, a: VariableTracker, b: VariableTracker) -> bool | None:
    """``a == b`` for tuples/lists holding symbolic sizes (``x.shape == y.shape``), item by
    item; each symbolic comparison is decided now (and guarded)."""
    if not (isinstance(a, BaseListVariable) and isinstance(b, BaseListVariable)):
        return None
    if len(a.items) != len(b.items):
        return False
    for x, y in zip(a.items, b.items, strict=True):
        if not (has_sym([x, y]) or all_const([x, y])):
            return None
        if not apply_operator(tx, operator.eq, [x, y]).truth(tx):
            return False
    return True


def iterate(tx: Tx, obj: VariableTracker) -> list[VariableTracker]:
    return obj.unpack(tx)


def less_than(tx: Tx, a: VariableTracker, b: VariableTracker) -> bool:
    """``a < b`` as ``sorted``/``min``/``max`` evaluate it; sequences compare
    item by item (equal items skipped), as Python's tuples and lists do."""
    if a.is_python_constant() and b.is_python_constant():
        try:
            return bool(a.as_python_constant() < b.as_python_constant())
        except TypeError as e:
            raise Unsupported(f"`<` between {a.describe()} and {b.describe()} (TypeError)") from e
    if isinstance(a, BaseListVariable) and isinstance(b, BaseListVariable):
        for x, y in zip(a.items, b.items, strict=False):
            same = same_value(x, y)
            if same is None:
                raise Unsupported(f"comparing {x.describe()} with {y.describe()}")
            if not same:
                return less_than(tx, x, y)
        return len(a.items) < len(b.items)
    return apply_operator(tx, operator.lt, [a, b]).truth(tx)
