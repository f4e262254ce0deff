"""The C++ ops handler: one C++ expression per op, and the kernel state it writes into.

``CppOps`` turns each op into one ``auto tmpN = <expr>;`` line in the current
scope (common subexpressions reuse the variable), so the C++ code generator
differs from the Triton one only in the strings per op. ``CppKernel`` holds
what one kernel's emission needs: pointers, values kept in registers, the
index rewrite of the loops being emitted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from ..index import index_symbols, print_index
from ..kernel_plan import KernelPlan, private_offset
from ..ops_handler import DefaultOps
from ..options import InductorOptions
from .cpp_prelude import MVEC_FUNCS

CTYPES = {
    torch.float32: "float",
    torch.float64: "double",
    torch.int64: "int64_t",
    torch.int32: "int32_t",
    torch.int16: "int16_t",
    torch.int8: "int8_t",
    torch.uint8: "uint8_t",
    torch.bool: "bool",
}


def mem_ctype(dtype: torch.dtype) -> str:
    """The C++ type of ``dtype`` in memory and in the value just loaded from it.

    ``bool`` is kept as ``uint8_t`` there (torch stores 0/1 bytes): gcc 12 does not
    vectorize a loop that loads C++ ``bool`` next to float math (a causal mask left an
    attention softmax loop scalar: 4x slower). Loaded values are still used as bools.
    """
    return "uint8_t" if dtype == torch.bool else CTYPES[dtype]


def _c_integer(v: int) -> str:
    return f"{v}LL" if abs(v) >= 2**31 else str(v)


def cexpr(expr: sympy.Expr | int) -> str:
    """Print an integer index or size expression as C++ (int64 arithmetic). Size symbols
    (``s0``) print as their names: kernels take them as ``int64_t`` arguments."""
    if isinstance(expr, int):
        return _c_integer(expr)
    return print_index(expr, div="/", mul="*", integer=_c_integer)


def _integral(expr: sympy.Expr) -> bool:
    """Whether ``expr`` is integer arithmetic (an index), as opposed to a real-valued
    expression of sizes (``1/(s0 - 1)``, batch norm's unbiased correction)."""
    return not any(a.is_Float or (a.is_Rational and not a.is_Integer) for a in sympy.preorder_traversal(expr)) and not any(
        isinstance(a, sympy.Pow) and a.exp.is_negative for a in sympy.preorder_traversal(expr))


def cfloat(expr: sympy.Expr) -> str:
    """A real-valued expression of sizes as C++ ``double`` arithmetic."""
    if expr.is_Number:
        return repr(float(expr))
    if isinstance(expr, sympy.Symbol):
        return f"static_cast<double>({expr.name})"
    if isinstance(expr, sympy.Add):
        return "(" + " + ".join(cfloat(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.Mul):
        return "(" + "*".join(cfloat(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer:
        base, n = cfloat(expr.base), int(expr.exp)
        body = "*".join([base] * abs(n)) or "1.0"
        return f"({body})" if n > 0 else f"(1.0/({body}))"
    if isinstance(expr, sympy.Pow) and expr.exp == sympy.Rational(1, 2):
        return f"std::sqrt({cfloat(expr.base)})"
    return f"static_cast<double>({cexpr(expr)})"


def literal(value: bool | int | float, dtype: torch.dtype) -> str:
    ctype = CTYPES[dtype]
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        v = float(value)
        if math.isnan(v):
            return f"std::numeric_limits<{ctype}>::quiet_NaN()"
        if math.isinf(v):
            return f"{'-' if v < 0 else ''}std::numeric_limits<{ctype}>::infinity()"
        text = repr(v)
        return f"{text}f" if dtype == torch.float32 else text
    v = int(value)
    if v == -(2**63):
        return "std::numeric_limits<int64_t>::min()"
    return f"static_cast<{ctype}>({v}LL)"


@dataclass(frozen=True, slots=True)
class CppVar:
    expr: str
    dtype: torch.dtype

    def __str__(self) -> str:
        return self.expr


_UNARY_FLOAT = {
    "sqrt": "std::sqrt({0})",
    "floor": "std::floor({0})",
    "ceil": "std::ceil({0})",
    "trunc": "std::trunc({0})",
    "round": "std::nearbyint({0})",
    "atan": "std::atan({0})",
}
_UNARY_ANY = {
    "neg": "-{0}",
    "abs": "std::abs({0})",
    "sign": "ember_sign({0})",
    "logical_not": "!{0}",
    "isnan": "ember_isnan({0})",
    "isinf": "ember_isinf({0})",
    "reciprocal": "(1 / {0})",
}
_BINARY = {
    "add": "{0} + {1}",
    "sub": "{0} - {1}",
    "mul": "{0} * {1}",
    "truediv": "{0} / {1}",
    "floordiv": "ember_floordiv({0}, {1})",
    "mod": "ember_mod({0}, {1})",
    "fmod": "ember_fmod({0}, {1})",
    "pow": "std::pow({0}, {1})",
    "maximum": "ember_maximum({0}, {1})",
    "minimum": "ember_minimum({0}, {1})",
    "atan2": "std::atan2({0}, {1})",
    "hypot": "std::hypot({0}, {1})",
    "eq": "{0} == {1}",
    "ne": "{0} != {1}",
    "lt": "{0} < {1}",
    "le": "{0} <= {1}",
    "gt": "{0} > {1}",
    "ge": "{0} >= {1}",
    "logical_and": "({0} != 0) && ({1} != 0)",
    "logical_or": "({0} != 0) || ({1} != 0)",
    "logical_xor": "({0} != 0) != ({1} != 0)",
    "bitwise_and": "{0} & {1}",
    "bitwise_or": "{0} | {1}",
    "bitwise_xor": "{0} ^ {1}",
}
_BOOL_RESULT = {
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "isnan",
    "isinf",
}


@dataclass
class Scope:
    lines: list[str]
    cse: dict[str, CppVar]


class CppOps(DefaultOps):
    """Emits C++ statements into the kernel's current scope; values are ``CppVar``."""

    def __init__(self, kernel: CppKernel) -> None:
        self.k = kernel

    def _emit(self, expr: str, dtype: torch.dtype, ctype: str | None = None) -> CppVar:
        scope = self.k.scope
        hit = scope.cse.get(expr)
        if hit is not None:
            return hit
        name = self.k.new_var()
        scope.lines.append(f"{ctype or CTYPES[dtype]} {name} = {expr};")
        var = CppVar(name, dtype)
        scope.cse[expr] = var
        return var

    def load(self, name: str, index: sympy.Expr) -> CppVar:
        local = self.k.locals.get(name)
        if local is not None:
            return local
        ptr, dtype = self.k.pointer(name)
        return self._emit(f"{ptr}[{cexpr(self.k.address(name, index))}]", dtype, mem_ctype(dtype))

    def constant(self, value: bool | int | float, dtype: torch.dtype) -> CppVar:
        return CppVar(literal(value, dtype), dtype)

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> CppVar:
        expr = self.k.rewrite(expr)
        text = cexpr(expr) if _integral(expr) else cfloat(expr)
        return self._emit(f"static_cast<{CTYPES[dtype]}>({text})", dtype)

    def to_dtype(self, x: CppVar, dtype: torch.dtype) -> CppVar:
        if x.dtype == dtype:
            return x
        origin = self.k.from_bool.get(x.expr)
        if origin is not None and dtype == torch.bool:
            return origin  # bool -> number -> bool is the identity
        out = self._emit(convert(str(x), x.dtype, dtype), dtype)
        if x.dtype == torch.bool:
            self.k.from_bool[out.expr] = x
        return out

    def where(self, cond: CppVar, a: CppVar, b: CppVar) -> CppVar:
        return self._emit(f"{cond} ? {a} : {b}", a.dtype)

    def masked(
        self, mask: CppVar, body: Callable[[], Any], other: bool | int | float, dtype: torch.dtype
    ) -> CppVar:
        outer = self.k.scope
        inner = Scope([], dict(outer.cse))
        self.k.scope = inner
        try:
            value = body()
        finally:
            self.k.scope = outer
        ctype = CTYPES[dtype]
        name = self.k.new_var()
        body_text = " ".join(inner.lines)
        result = (
            convert(str(value), value.dtype, dtype)
            if isinstance(value, CppVar)
            else f"static_cast<{ctype}>({value})"
        )
        # a plain ``if``, not a lambda returning from one: gcc 12 vectorizes the loads of
        # this form as masked vector loads and left the lambda's loop scalar (a padded
        # depthwise convolution's input: 2.8 ns per element)
        outer.lines.append(
            f"{ctype} {name}; if ({mask}) {{ {body_text} {name} = {result}; }} "
            f"else {{ {name} = {literal(other, dtype)}; }}"
        )
        return CppVar(name, dtype)

    def indirect_indexing(self, x: CppVar, size: Any) -> sympy.Expr:
        v = self._emit(f"static_cast<int64_t>({x})", torch.int64)
        w = self._emit(f"ember_check_index({v}, {cexpr(size)})", torch.int64)
        return sympy.Symbol(w.expr, integer=True)

    def _op(self, name: str, *args: Any) -> CppVar:
        if name in _BINARY:
            a, b = args
            dtype = torch.bool if name in _BOOL_RESULT else a.dtype
            expr = _BINARY[name].format(a, b)
            if (
                dtype != torch.bool
                and name.startswith("bitwise")
                or (dtype == torch.bool and name in ("add", "mul", "sub"))
            ):
                expr = f"static_cast<{CTYPES[dtype]}>({expr})"
            return self._emit(expr, dtype)
        (x,) = args
        dtype = torch.bool if name in _BOOL_RESULT else x.dtype
        if name in _UNARY_ANY:
            return self._emit(_UNARY_ANY[name].format(x), dtype)
        if name == "bitwise_not":
            return self._emit(f"!{x}" if x.dtype == torch.bool else f"~{x}", dtype)
        if name == "relu":
            return self._emit(f"{x} < 0 ? {literal(0, dtype)} : {x}", dtype)
        suffix = "f" if x.dtype == torch.float32 else ""
        if name == "sigmoid":
            e = self._emit(f"ember_exp{suffix}(-{x})", dtype)
            return self._emit(f"{literal(1, dtype)} / ({literal(1, dtype)} + {e})", dtype)
        if name == "rsqrt":
            return self._emit(f"{literal(1, dtype)} / std::sqrt({x})", dtype)
        if name in MVEC_FUNCS:
            return self._emit(f"ember_{name}{suffix}({x})", dtype)
        if name in _UNARY_FLOAT:
            return self._emit(_UNARY_FLOAT[name].format(x), dtype)
        raise NotImplementedError(f"C++ backend has no ops.{name}")


_REDUCTION_INIT = {"sum": 0, "prod": 1, "any": False, "all": True}
_OMP_CLAUSE = {"sum": "+", "prod": "*", "max": "max", "min": "min", "any": "||", "all": "&&"}
_COMBINE = {"sum": "+", "prod": "*", "any": "||", "all": "&&"}


def reduction_init(rtype: str, dtype: torch.dtype) -> str:
    """The identity of reduction ``rtype`` (sum/prod/max/min/any/all) as a C++ literal."""
    if rtype not in ("max", "min"):
        return literal(_REDUCTION_INIT[rtype], dtype)
    if dtype.is_floating_point:
        return literal(-math.inf if rtype == "max" else math.inf, dtype)
    return f"std::numeric_limits<{CTYPES[dtype]}>::{'lowest' if rtype == 'max' else 'max'}()"


def reduction_update(rtype: str, acc: str, value: CppVar) -> str:
    """The statement folding ``value`` into accumulator ``acc``."""
    if rtype in ("max", "min"):
        cmp = "<" if rtype == "max" else ">"
        return f"{acc} = {acc} {cmp} {value} ? {value} : {acc};"
    return f"{acc} = {acc} {_COMBINE[rtype]} {value};"


def nan_update(flag: str, value: CppVar) -> str:
    """Float max/min: remember a NaN input (the comparison above skips it)."""
    return f"{flag} = {flag} | ({value} != {value});"


def nan_fixup(flag: str, acc: str, dtype: torch.dtype) -> str:
    return f"if ({flag}) {acc} = std::numeric_limits<{CTYPES[dtype]}>::quiet_NaN();"


@dataclass
class CppKernel:
    plan: KernelPlan
    options: InductorOptions
    pointers: dict[str, tuple[str, torch.dtype]] = field(default_factory=dict)
    arg_names: list[str] = field(default_factory=list)
    locals: dict[str, CppVar] = field(default_factory=dict)
    counter: int = 0
    scope: Scope = field(default_factory=lambda: Scope([], {}))
    rewrite: Callable[[sympy.Expr], sympy.Expr] = field(default=lambda e: e)
    #: numbers converted from a bool -> that bool (a round trip back is dropped: besides
    #: wasted work, gcc turns ``(f != 0) ? a : b`` on such a value into a branch)
    from_bool: dict[str, CppVar] = field(default_factory=dict)
    #: pointers the kernel only reads (``in_X`` of an input it does not also write)
    readonly: set[str] = field(default_factory=set)
    #: a pointwise kernel's lines that run before its innermost loop
    before_inner: list[str] = field(default_factory=list)
    #: masks a pointwise kernel's innermost loop is versioned on (``cpp_loops.versioned``)
    specialize: list[str] = field(default_factory=list)

    def new_var(self) -> str:
        self.counter += 1
        return f"tmp{self.counter}"

    def stored(self, name: str) -> bool:
        """Whether the kernel writes ``name`` to memory (a graph buffer or a local array)."""
        return name in self.plan.stores or name in self.plan.private

    def address(self, name: str, index: sympy.Expr) -> sympy.Expr:
        """Where element ``index`` of buffer ``name`` lives, as emitted in the loops."""
        if name in self.plan.private:
            depth = max(len(loop.inner) for loop in self.plan.loops)
            index = private_offset(index, index_symbols("r", depth))
        return self.rewrite(index)

    def pointer(self, name: str) -> tuple[str, torch.dtype]:
        return self.pointers[name]


def _cast(value: CppVar, dtype: torch.dtype) -> str:
    return str(value) if value.dtype == dtype else convert(str(value), value.dtype, dtype)


def convert(expr: str, src: torch.dtype, dst: torch.dtype) -> str:
    """C++ for ``expr`` (of ``src``) as ``dst``.

    Conversions to and from ``bool`` are written as a comparison and a select: gcc 12
    does not vectorize ``static_cast<float>(b)``/``static_cast<bool>(f)``, and one such
    cast leaves the whole loop scalar (a dropout mask in a softmax kernel did).
    """
    if dst == torch.bool:
        return f"({expr} != {literal(0, src)})"
    if src == torch.bool:
        return f"({expr} ? {literal(1, dst)} : {literal(0, dst)})"
    return f"static_cast<{CTYPES[dst]}>({expr})"

