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
from .base import VariableTracker
from .constant import ConstantVariable
from .lists import BaseListVariable, ListVariable
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
    if has_tensor(args):
        if fn in (operator.not_, operator.truth):
            raise Unsupported(
                "data-dependent control flow: the truth value of a tensor is only known at run time"
            )
        return tx.output.create_op("call_function", fn, args, {})
    if all_const(args):
        return fold(tx, fn, args)
    if fn in INPLACE_TO_OUT and isinstance(args[0], ListVariable) and fn is operator.iadd:
        args[0].call_method(tx, "extend", [args[1]], {})
        return args[0]
    base = INPLACE_TO_OUT.get(fn, fn)
    if len(args) == 2:
        a, b = args
        if (
            base is operator.add
            and isinstance(a, BaseListVariable)
            and isinstance(b, BaseListVariable)
            and a.kind is b.kind
        ):
            return a.new([*a.items, *b.items])
        if base is operator.mul and isinstance(a, BaseListVariable) and b.is_python_constant():
            return a.new(a.items * b.as_python_constant())
        if base in (operator.eq, operator.ne):
            same = same_value(a, b)
            if same is not None:
                return ConstantVariable(same if base is operator.eq else not same)
    if fn is operator.not_ and len(args) == 1:
        return ConstantVariable(not args[0].truth(tx))
    if fn is operator.truth and len(args) == 1:
        return ConstantVariable(args[0].truth(tx))
    names = ", ".join(a.describe() for a in args)
    raise Unsupported(f"operator `{getattr(fn, '__name__', fn)}` on {names}")


def same_value(a: VariableTracker, b: VariableTracker) -> bool | None:
    """``a == b`` as ``in`` computes it (identity first), or None if unknown."""
    if a is b:
        return True
    if a.is_python_constant() and b.is_python_constant():
        return bool(a.as_python_constant() == b.as_python_constant())
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        return None
    ra, rb = getattr(a, "value", None), getattr(b, "value", None)
    default_eq: Any = object.__eq__
    if ra is not None and rb is not None and type(ra).__eq__ is default_eq:
        return ra is rb
    return None


def iterate(tx: Tx, obj: VariableTracker) -> list[VariableTracker]:
    return obj.unpack(tx)
