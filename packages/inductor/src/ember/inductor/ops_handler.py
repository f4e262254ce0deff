"""The ``ops`` protocol that every loop body is written against.

A loop body is a plain function ``body(index, ops)``: it reads memory with
``ops.load(name, index_expr)`` and combines values with ``ops.<name>(...)``.
What a value *is* depends on the handler passed in: a string of C++ for the
C++ backend, a printed expression for debugging, nothing at all for the
dependency collector. Handlers are explicit arguments, never thread-local.
The elementwise ops are the rows of ``op_table.OPS`` (one row per op, with each
backend's syntax); ``DefaultOps`` has a method for each, and the memory, constant
and control ops (``SPECIAL_OPS``) are declared here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import sympy
import torch

from .op_table import OPS

#: the elementwise ops, in the order of ``op_table.OPS`` (where each is defined)
UNARY_OPS: tuple[str, ...] = tuple(op.name for op in OPS if op.arity == 1)
BINARY_OPS: tuple[str, ...] = tuple(op.name for op in OPS if op.arity == 2)
SPECIAL_OPS: tuple[str, ...] = (
    "load",
    "constant",
    "index_expr",
    "to_dtype",
    "where",
    "masked",
    "indirect_indexing",
)
ALL_OPS: tuple[str, ...] = UNARY_OPS + BINARY_OPS + SPECIAL_OPS


class OpsHandler(Protocol):
    """What a loop body may call. ``Any`` is the handler's value type."""

    def load(self, name: str, index: sympy.Expr) -> Any: ...
    def constant(self, value: bool | int | float, dtype: torch.dtype) -> Any: ...
    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> Any: ...
    def to_dtype(self, x: Any, dtype: torch.dtype) -> Any: ...
    def where(self, cond: Any, a: Any, b: Any) -> Any: ...
    def masked(
        self, mask: Any, body: Callable[[], Any], other: bool | int | float, dtype: torch.dtype
    ) -> Any: ...
    def indirect_indexing(self, x: Any, size: int) -> sympy.Expr: ...

    # every elementwise op of ``op_table.OPS``: ``ops.exp(x)``, ``ops.add(a, b)``, ...
    def __getattr__(self, name: str) -> Callable[..., Any]: ...


class DefaultOps:
    """Routes every op to ``_op(name, *args)``; handlers override what they need."""

    def _op(self, name: str, *args: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement ops.{name}")

    def load(self, name: str, index: sympy.Expr) -> Any:
        return self._op("load", name, index)

    def constant(self, value: bool | int | float, dtype: torch.dtype) -> Any:
        return self._op("constant", value, dtype)

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> Any:
        return self._op("index_expr", expr, dtype)

    def to_dtype(self, x: Any, dtype: torch.dtype) -> Any:
        return self._op("to_dtype", x, dtype)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return self._op("where", cond, a, b)

    def masked(
        self, mask: Any, body: Callable[[], Any], other: bool | int | float, dtype: torch.dtype
    ) -> Any:
        return self._op("masked", mask, body, other, dtype)

    def indirect_indexing(self, x: Any, size: int) -> sympy.Expr:
        result: sympy.Expr = self._op("indirect_indexing", x, size)
        return result

    if TYPE_CHECKING:  # the elementwise ops, made below from the table

        def __getattr__(self, name: str) -> Callable[..., Any]: ...


def _forward(name: str) -> Callable[..., Any]:
    def op(self: DefaultOps, *args: Any) -> Any:
        return self._op(name, *args)

    op.__name__, op.__qualname__ = name, f"DefaultOps.{name}"
    return op


def _declared(name: str, arity: int) -> Callable[..., Any]:
    def op(self: OpsHandler, *args: Any) -> Any: ...

    op.__name__, op.__qualname__ = name, f"OpsHandler.{name}"
    op.__doc__ = f"``ops.{name}`` ({arity} operand{'s' if arity > 1 else ''}; ``op_table.OPS``)."
    return op


# one method per table row: DefaultOps routes it to ``_op``; the protocol lists it (typing
# reaches it through ``__getattr__``)
for _op in OPS:
    setattr(DefaultOps, _op.name, _forward(_op.name))
    setattr(OpsHandler, _op.name, _declared(_op.name, _op.arity))


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class PrintOps(DefaultOps):
    """Renders a body as a readable expression (debug dumps, ``ir_pre_fusion.txt``)."""

    def _op(self, name: str, *args: Any) -> Any:
        if name == "indirect_indexing":
            return sympy.Symbol(f"indirect({args[0]})", integer=True)
        if name == "masked":
            mask, body, other, dtype = args
            return f"masked({mask}, {body()}, {other})"
        if name in ("constant", "index_expr", "to_dtype"):
            return f"{name}({args[0]}, {_dtype_name(args[1])})"
        return f"{name}({', '.join(str(a) for a in args)})"


#: Ops that cost a libm-style evaluation rather than one instruction (``Op.heavy``): the
#: transcendental ones, ``pow`` and ``atan2``.
HEAVY_OPS = frozenset(op.name for op in OPS if op.heavy)
#: ops costing more than a few cycles per vector element (HEAVY_OPS, divisions, roots)
COSTLY_OPS = HEAVY_OPS | {"sqrt", "rsqrt", "truediv", "reciprocal", "floordiv", "mod", "fmod"}


class DepsOps(DefaultOps):
    """Collects ``(buffer name, index)`` for every load; values are placeholders."""

    def __init__(self) -> None:
        self.loads: list[tuple[str, sympy.Expr]] = []
        self.num_ops = 0
        self.num_indirect = 0
        #: transcendental calls (exp, erf, tanh, ...): what makes recomputing a value costly
        self.num_heavy = 0
        #: COSTLY_OPS calls (the heavy ones included)
        self.num_costly = 0
        #: selects by position (``masked``: a ``cat``'s parts, a pad's border)
        self.num_masked = 0
        #: expressions the body computes with other than load indices (``index_expr(s0)``,
        #: the bound of an indirect index): size symbols in them are kernel arguments too
        self.exprs: list[sympy.Basic] = []

    def _op(self, name: str, *args: Any) -> Any:
        self.num_ops += 1
        if name in HEAVY_OPS:
            self.num_heavy += 1
        if name in COSTLY_OPS:
            self.num_costly += 1
        if name != "load":
            self.exprs.extend(a for a in args if isinstance(a, sympy.Basic))
        if name == "indirect_indexing":
            self.num_indirect += 1
            return sympy.Symbol(f"indirect{self.num_indirect}", integer=True)
        if name == "load":
            self.loads.append((args[0], args[1]))
        elif name == "masked":
            self.num_masked += 1
            args[1]()
        return "v"
