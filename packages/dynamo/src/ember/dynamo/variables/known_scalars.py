"""Integer values of 0-d tensors made from Python ints while tracing.

Models make small integer tensors from sizes and use them as Python ints again:
DeBERTa computes ``att_span = torch.tensor(min(max(q.size(-2), k.size(-2)), 512))``
and slices ``rel_embeddings[512 - att_span : 512 + att_span]``. The slice bound is a
tensor, so it would need the tensor's data, which is only known when the graph runs.
But its value is known while tracing: it is the Python int (or the symbolic size
expression) the tensor was made from, carried through integer arithmetic.

A :class:`Known` is that value's recipe: a leaf (a constant or a symbolic size) or an
operator applied to recipes. A tensor gets one when it is made by ``torch.tensor`` /
``torch.as_tensor`` from an int, or by ``+ - * //`` or unary minus from tensors that
have one and ints, and when its result is a 0-d ``int64`` tensor. Reading the value
(``int(t)``, ``t.item()``, a slice bound) materializes the recipe: constants fold, and
symbolic sizes become size arithmetic in the graph, so a new length does not recompile.

The recipe stays true only while the tensor is not written: it is kept with the
tensor's version counter (fake tensors count in-place writes, views share the
counter), and a tensor written since it was made has no known value.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .base import VariableTracker
from .constant import ConstantVariable
from .sym import SymNodeVariable

if TYPE_CHECKING:
    from ..output_graph import OutputGraph
    from ..translator_core import TranslatorCore as Tx
    from .tensor import TensorVariable

#: int64's range: a constant outside it would have wrapped in the tensor
_INT64 = (-(2**63), 2**63 - 1)

_BINARY: dict[Any, Callable[[Any, Any], Any]] = {
    operator.add: operator.add,
    operator.iadd: operator.add,
    operator.sub: operator.sub,
    operator.isub: operator.sub,
    operator.mul: operator.mul,
    operator.imul: operator.mul,
    operator.floordiv: operator.floordiv,
    operator.ifloordiv: operator.floordiv,
    torch.add: operator.add,
    torch.sub: operator.sub,
    torch.mul: operator.mul,
}
_UNARY: dict[Any, Callable[[Any], Any]] = {operator.neg: operator.neg, operator.pos: operator.pos}
MAKERS = (torch.tensor, torch.as_tensor)


@dataclass(frozen=True)
class Known:
    """A value: ``leaf`` (a constant or symbolic int), or ``fn(*operands)``."""

    leaf: VariableTracker | None = None
    fn: Callable[..., Any] | None = None
    operands: tuple[Known, ...] = ()

    def constant(self) -> int | None:
        """The value if no symbolic size is in it."""
        if self.leaf is not None:
            return self.leaf.as_python_constant() if self.leaf.is_python_constant() else None
        parts = [o.constant() for o in self.operands]
        if any(p is None for p in parts):
            return None
        assert self.fn is not None
        value: int = self.fn(*parts)
        return value

    def materialize(self, output: OutputGraph) -> VariableTracker:
        """A tracker for the value: a constant, or size arithmetic in the graph."""
        if self.leaf is not None:
            return self.leaf
        const = self.constant()
        if const is not None:
            return ConstantVariable(const)
        assert self.fn is not None
        parts = [o.materialize(output) for o in self.operands]
        return output.create_op("call_function", self.fn, parts, {})


def _int_leaf(v: VariableTracker) -> Known | None:
    if isinstance(v, SymNodeVariable):
        return Known(leaf=v) if v.python_type() is int else None
    if v.is_python_constant():
        value = v.as_python_constant()
        if type(value) is int:  # not bool: ``True - t`` is an error for bool tensors
            return Known(leaf=ConstantVariable(value))
    return None


def _is_tensor(v: VariableTracker) -> bool:
    """A ``TensorVariable`` (which imports this module: no import back)."""
    return hasattr(v, "known_version")


def _operand(v: VariableTracker) -> Known | None:
    if _is_tensor(v):
        return known_value(v)  # type: ignore[arg-type]
    return _int_leaf(v)


def known_value(t: TensorVariable) -> Known | None:
    """``t``'s value if it was made from ints and has not been written since."""
    if t.known is None or t.example._version != t.known_version:
        return None
    return t.known


def _fits(known: Known) -> bool:
    const = known.constant()
    if const is None:
        return True
    return _INT64[0] <= const <= _INT64[1]


def _recipe(target: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> Known | None:
    if target in MAKERS:
        if len(args) != 1 or set(kwargs) - {"dtype", "device"}:
            return None
        return _int_leaf(args[0])
    if kwargs:
        return None
    if target in _UNARY and len(args) == 1:
        inner = _operand(args[0])
        return Known(fn=_UNARY[target], operands=(inner,)) if inner is not None else None
    if target in _BINARY and len(args) == 2:
        a, b = _operand(args[0]), _operand(args[1])
        if a is None or b is None:
            return None
        fn = _BINARY[target]
        if fn is operator.floordiv and not ((d := b.constant()) is not None and d > 0):
            return None  # only by a positive constant: no division by zero to mirror
        return Known(fn=fn, operands=(a, b))
    return None


def tensor_of_size(
    tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker | None:
    """``torch.tensor(n)`` of a symbolic int ``n``: ``torch.scalar_tensor(n, dtype=int64)``,
    which keeps ``n`` symbolic (``torch.tensor`` would read its value, and so
    specialize the size to it: a recompile per length)."""
    if len(args) != 1 or not isinstance(args[0], SymNodeVariable) or set(kwargs) - {"dtype", "device"}:
        return None
    if args[0].python_type() is not int:
        return None
    kw = dict(kwargs)
    kw.setdefault("dtype", ConstantVariable(torch.int64))
    result = tx.output.create_op("call_function", torch.scalar_tensor, args, kw)
    if _is_tensor(result):
        attach_known(result, torch.tensor, args, {})  # type: ignore[arg-type]
    return result


def with_values(output: OutputGraph, args: list[VariableTracker], first: int) -> list[VariableTracker]:
    """``args`` with each 0-d tensor of known value from index ``first`` on replaced by the
    value: for an op that reads the tensor's data while it runs (``torch.clamp(t, 0, n)``
    with a 0-d tensor ``n`` takes the overload with a Python number ``max``, calling
    ``n.item()``), which fake tensors cannot answer; the value is what eager reads."""
    out = list(args)
    for i in range(first, len(out)):
        a = out[i]
        if _is_tensor(a) and (known := known_value(a)) is not None:  # type: ignore[arg-type]
            out[i] = known.materialize(output)
    return out


def index_values(tx: Tx, parts: list[VariableTracker]) -> list[VariableTracker]:
    """Slice bounds, with a 0-d tensor of known value given as its value (any other
    tensor bound needs data the graph computes: ``make_slice`` breaks there)."""
    return with_values(tx.output, parts, 0)


def attach_known(
    result: TensorVariable, target: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> None:
    """Give an op's fresh 0-d int64 result the recipe of its value, where there is one."""
    example = result.example
    if example.dim() != 0 or example.dtype != torch.int64:
        return
    known = _recipe(target, args, kwargs)
    if known is not None and _fits(known):
        result.known = known
        result.known_version = example._version


__all__ = ["MAKERS", "Known", "attach_known", "index_values", "known_value", "tensor_of_size",
           "with_values"]
