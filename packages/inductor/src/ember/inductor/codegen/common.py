"""The skeleton the C++ and Triton code generators share; each supplies only its syntax.

- values and scopes: a :class:`Var` is a named value of a dtype; a :class:`Scope` holds
  the lines being emitted and the values computed in them (common subexpressions reuse
  a variable; an inner scope sees its parents' values, not the other way round);
- :class:`KernelState`: what one kernel's emission holds (pointers, values in registers,
  the index rewrite of the loops being emitted) and :meth:`KernelState.emit`, which
  declares a value in the backend's syntax (:meth:`KernelState.declare`);
- :class:`KernelOps`: the ``ops`` handler of both; every elementwise op is its row of
  ``op_table.OPS``, in the backend's column (``cpp`` or ``triton``), or the handler's
  method ``op_<name>`` where the row has none;
- printing sizes: index expressions (``index.print_index``) and real-valued ones
  (:func:`print_real`, batch norm's ``1/(n - 1)``), each language a :class:`RealSyntax`;
- reductions: the identity of each reduction type (:func:`reduction_identity`);
- walking a plan: a node's value (:func:`node_value`), a reduction's input
  (:func:`reduction_value`), a pointwise node computed and stored
  (:func:`emit_pointwise`), the values an inner loop leaves behind
  (:func:`forget_inner_values`), and the size arguments a kernel reads (:func:`size_args`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import sympy
import torch

from ..ir import Reduction
from ..kernel_plan import KernelPlan, Loop, SchedNode
from ..op_table import BY_NAME
from ..ops_handler import DefaultOps


@dataclass(frozen=True, slots=True)
class Var:
    """A value in generated code: its expression (a variable's name) and dtype."""

    expr: str
    dtype: torch.dtype

    def __str__(self) -> str:
        return self.expr


@dataclass
class Scope:
    """Lines being emitted and the values computed in them; ``parent`` values stay visible."""

    lines: list[str]
    cse: dict[str, Var] = field(default_factory=dict)
    parent: Scope | None = None

    def lookup(self, expr: str) -> Var | None:
        scope: Scope | None = self
        while scope is not None:
            hit = scope.cse.get(expr)
            if hit is not None:
                return hit
            scope = scope.parent
        return None


def _same(e: sympy.Expr) -> sympy.Expr:
    return e


@dataclass(kw_only=True)
class KernelState:
    """One kernel's emission: buffer name -> (pointer, dtype), values in registers, scope."""

    pointers: dict[str, tuple[str, torch.dtype]] = field(default_factory=dict)
    #: buffer name -> its value, where it is in registers
    locals: dict[str, Var] = field(default_factory=dict)
    counter: int = 0
    scope: Scope = field(default_factory=lambda: Scope([]))
    #: index expressions over the plan's symbols -> over the emitted (merged) loops
    rewrite: Callable[[sympy.Expr], sympy.Expr] = field(default=_same)

    def new_var(self) -> str:
        self.counter += 1
        return f"tmp{self.counter}"

    def declare(self, name: str, expr: str, dtype: torch.dtype, decl: str | None) -> str:
        """The line giving variable ``name`` the value ``expr`` (``decl``: its type, if not
        ``dtype``'s)."""
        raise NotImplementedError

    def emit(self, expr: str, dtype: torch.dtype, decl: str | None = None) -> Var:
        """``expr`` as a variable of the current scope (the one already computing it, if any)."""
        hit = self.scope.lookup(expr)
        if hit is not None:
            return hit
        var = Var(self.new_var(), dtype)
        self.scope.lines.append(self.declare(var.expr, expr, dtype, decl))
        self.scope.cse[expr] = var
        return var

    def stored(self, name: str) -> bool:
        """Whether the kernel writes buffer ``name`` to memory."""
        raise NotImplementedError

    def store(self, name: str, index: sympy.Expr, value: Var) -> None:
        """Write ``value`` to element ``index`` of buffer ``name``."""
        raise NotImplementedError


class KernelOps(DefaultOps):
    """The ``ops`` handler of a code generator; values are :class:`Var`.

    A backend names its column of ``op_table.OPS`` and gives :meth:`literal`,
    :meth:`load_memory` and the special ops (``to_dtype``, ``where``, ``masked``, ...).
    """

    #: the column of ``op_table.OPS`` this backend's syntax is in
    column: ClassVar[str]
    #: how messages name the backend
    label: ClassVar[str]

    def __init__(self, kernel: KernelState) -> None:
        self.k = kernel

    def literal(self, value: bool | int | float, dtype: torch.dtype) -> str:
        raise NotImplementedError

    def load_memory(self, name: str, index: sympy.Expr) -> Var:
        raise NotImplementedError

    def load(self, name: str, index: sympy.Expr) -> Var:
        local = self.k.locals.get(name)
        return local if local is not None else self.load_memory(name, index)

    def constant(self, value: bool | int | float, dtype: torch.dtype) -> Var:
        return Var(self.literal(value, dtype), dtype)

    def emit_op(self, name: str, expr: str, dtype: torch.dtype) -> Var:
        """The value of elementwise op ``name`` written as ``expr``."""
        return self.k.emit(expr, dtype)

    def _op(self, name: str, *args: Any) -> Var:
        op = BY_NAME.get(name)
        if op is None:
            raise NotImplementedError(f"{self.label} backend has no ops.{name}")
        template: str | None = getattr(op, self.column)
        if template is None:
            hook: Callable[..., Var] = getattr(self, f"op_{name}")
            return hook(*args)
        x = args[0]
        fields: dict[str, str] = {}
        if "{f}" in template:  # C's float32 variant of a math function
            fields["f"] = "f" if x.dtype == torch.float32 else ""
        if "{zero}" in template:
            fields["zero"] = self.literal(0, x.dtype)
        if "{one}" in template:
            fields["one"] = self.literal(1, x.dtype)
        dtype = torch.bool if op.bool_result else x.dtype
        return self.emit_op(name, template.format(*args, **fields), dtype)


# -- printing sizes ------------------------------------------------------------------------


def is_integral(expr: sympy.Expr) -> bool:
    """Whether ``expr`` is integer arithmetic (an index), as opposed to a real-valued
    expression of sizes (``1/(s0 - 1)``, batch norm's unbiased correction)."""
    for a in sympy.preorder_traversal(expr):
        if a.is_Float or (a.is_Rational and not a.is_Integer):
            return False
        if isinstance(a, sympy.Pow) and a.exp.is_negative:
            return False
    return True


@dataclass(frozen=True)
class RealSyntax:
    """How a language writes float64 arithmetic of sizes."""

    number: Callable[[float], str]
    symbol: Callable[[str], str]
    #: an integer expression as a float (the fallback)
    integer: Callable[[sympy.Expr], str]
    mul: str
    reciprocal: str
    sqrt: str


def print_real(expr: sympy.Expr, s: RealSyntax) -> str:
    """A real-valued expression of sizes as float64 source in syntax ``s``."""
    if expr.is_Number:
        return s.number(float(expr))
    if isinstance(expr, sympy.Symbol):
        return s.symbol(expr.name)
    if isinstance(expr, sympy.Add):
        return "(" + " + ".join(print_real(a, s) for a in expr.args) + ")"
    if isinstance(expr, sympy.Mul):
        return "(" + s.mul.join(print_real(a, s) for a in expr.args) + ")"
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer:
        base, n = print_real(expr.base, s), int(expr.exp)
        body = s.mul.join([base] * abs(n)) or "1.0"
        return f"({body})" if n > 0 else s.reciprocal.format(body)
    if isinstance(expr, sympy.Pow) and expr.exp == sympy.Rational(1, 2):
        return s.sqrt.format(print_real(expr.base, s))
    return s.integer(expr)


# -- reductions ----------------------------------------------------------------------------

_IDENTITY: dict[str, bool | int] = {"sum": 0, "prod": 1, "any": False, "all": True, "welford_m2": 0}


def reduction_identity(rtype: str, dtype: torch.dtype) -> bool | int | float:
    """The value reduction ``rtype`` starts from (and masked lanes contribute): ``0`` for a
    sum, the lowest value of ``dtype`` for a max (argmax), ..."""
    if rtype not in ("max", "min", "argmax", "argmin"):
        return _IDENTITY[rtype]
    low = rtype in ("max", "argmax")
    if dtype.is_floating_point:
        return -math.inf if low else math.inf
    if dtype == torch.bool:
        return not low
    info = torch.iinfo(dtype)
    return info.min if low else info.max


# -- walking a plan ------------------------------------------------------------------------


def node_value(ops: KernelOps, n: SchedNode, idx: Sequence[sympy.Expr]) -> Var:
    """Pointwise node ``n`` at ``idx``, in its buffer's dtype."""
    data = n.buffer.data
    assert not isinstance(data, Reduction)
    value = data.inner_fn(list(idx), ops)
    if not isinstance(value, Var):  # a body returning a Python number
        value = ops.constant(value, n.buffer.get_dtype())
    return ops.to_dtype(value, n.buffer.get_dtype())  # type: ignore[no-any-return]


def reduction_value(
    ops: KernelOps, n: SchedNode, outer: Sequence[sympy.Symbol], inner: Sequence[sympy.Symbol]
) -> Var:
    """What reduction ``n`` folds at one point of its range: in the reduction's dtype, or
    for argmax/argmin in the dtype compared."""
    data = n.buffer.data
    assert isinstance(data, Reduction)
    value = data.inner_fn(n.full_index(outer), n.reduction_index(inner), ops)
    if not isinstance(value, Var):
        value = ops.constant(value, data.src_dtype)
    if data.reduction_type not in ("argmax", "argmin"):
        value = ops.to_dtype(value, data.dtype)
    assert isinstance(value, Var)
    return value


def emit_pointwise(k: KernelState, ops: KernelOps, n: SchedNode, idx: Sequence[sympy.Expr]) -> Var:
    """Compute pointwise node ``n`` at ``idx`` into registers, and store it if it is stored."""
    value = node_value(ops, n, idx)
    k.locals[n.name] = value
    if k.stored(n.name):
        k.store(n.name, n.buffer.layout.index(list(idx)), value)
    return value


def size_args(plan: KernelPlan, text: str) -> list[str]:
    """The size symbols (``s0``, ``s3``) a kernel's body ``text`` reads, in symbol order:
    what the kernel takes as arguments after its buffers (ADR 0021, 0050)."""
    symbols = sorted(plan.size_symbols(), key=lambda sym: int(sym.name[1:]))
    return [sym.name for sym in symbols if re.search(rf"\b{sym.name}\b", text)]


def forget_inner_values(k: KernelState, loop: Loop) -> None:
    """Values computed inside ``loop``'s inner range are not visible after it."""
    for n in loop.nodes:
        if not n.is_reduction:
            k.locals.pop(n.name, None)


__all__ = [
    "KernelOps",
    "KernelState",
    "RealSyntax",
    "Scope",
    "Var",
    "emit_pointwise",
    "forget_inner_values",
    "is_integral",
    "node_value",
    "print_real",
    "reduction_identity",
    "reduction_value",
    "size_args",
]
