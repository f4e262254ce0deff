"""The ``ops`` protocol that every loop body is written against.

A loop body is a plain function ``body(index, ops)``: it reads memory with
``ops.load(name, index_expr)`` and combines values with ``ops.<name>(...)``.
What a value *is* depends on the handler passed in: a string of C++ for the
C++ backend, a printed expression for debugging, nothing at all for the
dependency collector. Handlers are explicit arguments, never thread-local.
Backends differ only in their handler (one string per op), their index
printer and their kernel skeleton.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import sympy
import torch

UNARY_OPS: tuple[str, ...] = (
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "erf",
    "erfc",
    "sigmoid",
    "reciprocal",
    "floor",
    "ceil",
    "trunc",
    "round",
    "neg",
    "abs",
    "sign",
    "relu",
    "logical_not",
    "bitwise_not",
    "isnan",
    "isinf",
)
BINARY_OPS: tuple[str, ...] = (
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "fmod",
    "pow",
    "maximum",
    "minimum",
    "atan2",
    "hypot",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
)
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

    def exp(self, x: Any) -> Any: ...
    def exp2(self, x: Any) -> Any: ...
    def expm1(self, x: Any) -> Any: ...
    def log(self, x: Any) -> Any: ...
    def log2(self, x: Any) -> Any: ...
    def log10(self, x: Any) -> Any: ...
    def log1p(self, x: Any) -> Any: ...
    def sqrt(self, x: Any) -> Any: ...
    def rsqrt(self, x: Any) -> Any: ...
    def sin(self, x: Any) -> Any: ...
    def cos(self, x: Any) -> Any: ...
    def tan(self, x: Any) -> Any: ...
    def asin(self, x: Any) -> Any: ...
    def acos(self, x: Any) -> Any: ...
    def atan(self, x: Any) -> Any: ...
    def sinh(self, x: Any) -> Any: ...
    def cosh(self, x: Any) -> Any: ...
    def tanh(self, x: Any) -> Any: ...
    def asinh(self, x: Any) -> Any: ...
    def acosh(self, x: Any) -> Any: ...
    def atanh(self, x: Any) -> Any: ...
    def erf(self, x: Any) -> Any: ...
    def erfc(self, x: Any) -> Any: ...
    def sigmoid(self, x: Any) -> Any: ...
    def reciprocal(self, x: Any) -> Any: ...
    def floor(self, x: Any) -> Any: ...
    def ceil(self, x: Any) -> Any: ...
    def trunc(self, x: Any) -> Any: ...
    def round(self, x: Any) -> Any: ...
    def neg(self, x: Any) -> Any: ...
    def abs(self, x: Any) -> Any: ...
    def sign(self, x: Any) -> Any: ...
    def relu(self, x: Any) -> Any: ...
    def logical_not(self, x: Any) -> Any: ...
    def bitwise_not(self, x: Any) -> Any: ...
    def isnan(self, x: Any) -> Any: ...
    def isinf(self, x: Any) -> Any: ...
    def add(self, a: Any, b: Any) -> Any: ...
    def sub(self, a: Any, b: Any) -> Any: ...
    def mul(self, a: Any, b: Any) -> Any: ...
    def truediv(self, a: Any, b: Any) -> Any: ...
    def floordiv(self, a: Any, b: Any) -> Any: ...
    def mod(self, a: Any, b: Any) -> Any: ...
    def fmod(self, a: Any, b: Any) -> Any: ...
    def pow(self, a: Any, b: Any) -> Any: ...
    def maximum(self, a: Any, b: Any) -> Any: ...
    def minimum(self, a: Any, b: Any) -> Any: ...
    def atan2(self, a: Any, b: Any) -> Any: ...
    def hypot(self, a: Any, b: Any) -> Any: ...
    def eq(self, a: Any, b: Any) -> Any: ...
    def ne(self, a: Any, b: Any) -> Any: ...
    def lt(self, a: Any, b: Any) -> Any: ...
    def le(self, a: Any, b: Any) -> Any: ...
    def gt(self, a: Any, b: Any) -> Any: ...
    def ge(self, a: Any, b: Any) -> Any: ...
    def logical_and(self, a: Any, b: Any) -> Any: ...
    def logical_or(self, a: Any, b: Any) -> Any: ...
    def logical_xor(self, a: Any, b: Any) -> Any: ...
    def bitwise_and(self, a: Any, b: Any) -> Any: ...
    def bitwise_or(self, a: Any, b: Any) -> Any: ...
    def bitwise_xor(self, a: Any, b: Any) -> Any: ...


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

    def exp(self, x: Any) -> Any:
        return self._op("exp", x)

    def exp2(self, x: Any) -> Any:
        return self._op("exp2", x)

    def expm1(self, x: Any) -> Any:
        return self._op("expm1", x)

    def log(self, x: Any) -> Any:
        return self._op("log", x)

    def log2(self, x: Any) -> Any:
        return self._op("log2", x)

    def log10(self, x: Any) -> Any:
        return self._op("log10", x)

    def log1p(self, x: Any) -> Any:
        return self._op("log1p", x)

    def sqrt(self, x: Any) -> Any:
        return self._op("sqrt", x)

    def rsqrt(self, x: Any) -> Any:
        return self._op("rsqrt", x)

    def sin(self, x: Any) -> Any:
        return self._op("sin", x)

    def cos(self, x: Any) -> Any:
        return self._op("cos", x)

    def tan(self, x: Any) -> Any:
        return self._op("tan", x)

    def asin(self, x: Any) -> Any:
        return self._op("asin", x)

    def acos(self, x: Any) -> Any:
        return self._op("acos", x)

    def atan(self, x: Any) -> Any:
        return self._op("atan", x)

    def sinh(self, x: Any) -> Any:
        return self._op("sinh", x)

    def cosh(self, x: Any) -> Any:
        return self._op("cosh", x)

    def tanh(self, x: Any) -> Any:
        return self._op("tanh", x)

    def asinh(self, x: Any) -> Any:
        return self._op("asinh", x)

    def acosh(self, x: Any) -> Any:
        return self._op("acosh", x)

    def atanh(self, x: Any) -> Any:
        return self._op("atanh", x)

    def erf(self, x: Any) -> Any:
        return self._op("erf", x)

    def erfc(self, x: Any) -> Any:
        return self._op("erfc", x)

    def sigmoid(self, x: Any) -> Any:
        return self._op("sigmoid", x)

    def reciprocal(self, x: Any) -> Any:
        return self._op("reciprocal", x)

    def floor(self, x: Any) -> Any:
        return self._op("floor", x)

    def ceil(self, x: Any) -> Any:
        return self._op("ceil", x)

    def trunc(self, x: Any) -> Any:
        return self._op("trunc", x)

    def round(self, x: Any) -> Any:
        return self._op("round", x)

    def neg(self, x: Any) -> Any:
        return self._op("neg", x)

    def abs(self, x: Any) -> Any:
        return self._op("abs", x)

    def sign(self, x: Any) -> Any:
        return self._op("sign", x)

    def relu(self, x: Any) -> Any:
        return self._op("relu", x)

    def logical_not(self, x: Any) -> Any:
        return self._op("logical_not", x)

    def bitwise_not(self, x: Any) -> Any:
        return self._op("bitwise_not", x)

    def isnan(self, x: Any) -> Any:
        return self._op("isnan", x)

    def isinf(self, x: Any) -> Any:
        return self._op("isinf", x)

    def add(self, a: Any, b: Any) -> Any:
        return self._op("add", a, b)

    def sub(self, a: Any, b: Any) -> Any:
        return self._op("sub", a, b)

    def mul(self, a: Any, b: Any) -> Any:
        return self._op("mul", a, b)

    def truediv(self, a: Any, b: Any) -> Any:
        return self._op("truediv", a, b)

    def floordiv(self, a: Any, b: Any) -> Any:
        return self._op("floordiv", a, b)

    def mod(self, a: Any, b: Any) -> Any:
        return self._op("mod", a, b)

    def fmod(self, a: Any, b: Any) -> Any:
        return self._op("fmod", a, b)

    def pow(self, a: Any, b: Any) -> Any:
        return self._op("pow", a, b)

    def maximum(self, a: Any, b: Any) -> Any:
        return self._op("maximum", a, b)

    def minimum(self, a: Any, b: Any) -> Any:
        return self._op("minimum", a, b)

    def atan2(self, a: Any, b: Any) -> Any:
        return self._op("atan2", a, b)

    def hypot(self, a: Any, b: Any) -> Any:
        return self._op("hypot", a, b)

    def eq(self, a: Any, b: Any) -> Any:
        return self._op("eq", a, b)

    def ne(self, a: Any, b: Any) -> Any:
        return self._op("ne", a, b)

    def lt(self, a: Any, b: Any) -> Any:
        return self._op("lt", a, b)

    def le(self, a: Any, b: Any) -> Any:
        return self._op("le", a, b)

    def gt(self, a: Any, b: Any) -> Any:
        return self._op("gt", a, b)

    def ge(self, a: Any, b: Any) -> Any:
        return self._op("ge", a, b)

    def logical_and(self, a: Any, b: Any) -> Any:
        return self._op("logical_and", a, b)

    def logical_or(self, a: Any, b: Any) -> Any:
        return self._op("logical_or", a, b)

    def logical_xor(self, a: Any, b: Any) -> Any:
        return self._op("logical_xor", a, b)

    def bitwise_and(self, a: Any, b: Any) -> Any:
        return self._op("bitwise_and", a, b)

    def bitwise_or(self, a: Any, b: Any) -> Any:
        return self._op("bitwise_or", a, b)

    def bitwise_xor(self, a: Any, b: Any) -> Any:
        return self._op("bitwise_xor", a, b)


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


#: Ops that cost a libm-style evaluation rather than one instruction: the transcendental
#: unary ops (``UNARY_OPS`` up to ``sigmoid``, less the square roots, which are one
#: instruction each) and ``pow``/``atan2``.
HEAVY_OPS = (
    frozenset(UNARY_OPS[: UNARY_OPS.index("sigmoid") + 1]) - {"sqrt", "rsqrt"}
) | {"pow", "atan2"}
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
