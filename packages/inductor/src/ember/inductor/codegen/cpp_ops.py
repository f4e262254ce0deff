"""The C++ ops handler: one C++ expression per op, and the kernel state it writes into.

``CppOps`` turns each op into one ``T tmpN = <expr>;`` line in the current
scope (``common.KernelOps``: common subexpressions reuse the variable; each
elementwise op is the ``cpp`` column of its ``op_table.OPS`` row). ``CppKernel``
is ``common.KernelState`` with what only C++ kernels need (private arrays, the
values converted from bools, the lines hoisted before an inner loop).
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
from ..options import InductorOptions
from .common import (
    KernelOps,
    KernelState,
    RealSyntax,
    Scope,
    Var,
    is_integral,
    print_real,
    reduction_identity,
)

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


_REAL = RealSyntax(
    number=lambda v: repr(v),
    symbol=lambda name: f"static_cast<double>({name})",
    integer=lambda e: f"static_cast<double>({cexpr(e)})",
    mul="*",
    reciprocal="(1.0/({0}))",
    sqrt="std::sqrt({0})",
)


def cfloat(expr: sympy.Expr) -> str:
    """A real-valued expression of sizes as C++ ``double`` arithmetic."""
    return print_real(expr, _REAL)


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


#: a C++ value (``tmp3``, a literal, ``acc[x0 - x0_tile]``)
CppVar = Var

#: ops whose value is C++ ``bool`` arithmetic cast back to the operands' type
_BOOL_ARITH = ("add", "mul", "sub")


class CppOps(KernelOps):
    """Emits C++ statements into the kernel's current scope; values are ``CppVar``."""

    column = "cpp"
    label = "C++"
    k: CppKernel

    def __init__(self, kernel: CppKernel) -> None:
        super().__init__(kernel)

    def _emit(self, expr: str, dtype: torch.dtype, ctype: str | None = None) -> CppVar:
        return self.k.emit(expr, dtype, ctype)

    def literal(self, value: bool | int | float, dtype: torch.dtype) -> str:
        return literal(value, dtype)

    def load_memory(self, name: str, index: sympy.Expr) -> CppVar:
        ptr, dtype = self.k.pointer(name)
        return self._emit(f"{ptr}[{cexpr(self.k.address(name, index))}]", dtype, mem_ctype(dtype))

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> CppVar:
        expr = self.k.rewrite(expr)
        text = cexpr(expr) if is_integral(expr) else cfloat(expr)
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
        inner = Scope([], {}, outer)
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

    # -- the syntax of ``op_table.OPS`` rows without a C++ column, and the casts around it --

    def emit_op(self, name: str, expr: str, dtype: torch.dtype) -> CppVar:
        # bitwise ops on small integers and arithmetic on bools compute in int: cast back
        if (dtype != torch.bool and name.startswith("bitwise_") and name != "bitwise_not") or (
            dtype == torch.bool and name in _BOOL_ARITH
        ):
            expr = f"static_cast<{CTYPES[dtype]}>({expr})"
        return self._emit(expr, dtype)

    def op_bitwise_not(self, x: CppVar) -> CppVar:
        return self._emit(f"!{x}" if x.dtype == torch.bool else f"~{x}", x.dtype)

    def op_sigmoid(self, x: CppVar) -> CppVar:
        dtype, suffix = x.dtype, "f" if x.dtype == torch.float32 else ""
        e = self._emit(f"ember_exp{suffix}(-{x})", dtype)
        return self._emit(f"{literal(1, dtype)} / ({literal(1, dtype)} + {e})", dtype)


_OMP_CLAUSE = {"sum": "+", "prod": "*", "max": "max", "min": "min", "any": "||", "all": "&&"}
_COMBINE = {"sum": "+", "prod": "*", "any": "||", "all": "&&"}


def reduction_init(rtype: str, dtype: torch.dtype) -> str:
    """The identity of reduction ``rtype`` (sum/prod/max/min/any/all) as a C++ literal."""
    if rtype in ("max", "min") and not dtype.is_floating_point:
        return f"std::numeric_limits<{CTYPES[dtype]}>::{'lowest' if rtype == 'max' else 'max'}()"
    return literal(reduction_identity(rtype, dtype), dtype)


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
class CppKernel(KernelState):
    plan: KernelPlan
    options: InductorOptions
    arg_names: list[str] = field(default_factory=list)
    #: numbers converted from a bool -> that bool (a round trip back is dropped: besides
    #: wasted work, gcc turns ``(f != 0) ? a : b`` on such a value into a branch)
    from_bool: dict[str, CppVar] = field(default_factory=dict)
    #: pointers the kernel only reads (``in_X`` of an input it does not also write)
    readonly: set[str] = field(default_factory=set)
    #: a pointwise kernel's lines that run before its innermost loop
    before_inner: list[str] = field(default_factory=list)
    #: masks a pointwise kernel's innermost loop is versioned on (``cpp_loops.versioned``)
    specialize: list[str] = field(default_factory=list)

    def declare(self, name: str, expr: str, dtype: torch.dtype, decl: str | None) -> str:
        return f"{decl or CTYPES[dtype]} {name} = {expr};"

    def stored(self, name: str) -> bool:
        """Whether the kernel writes ``name`` to memory (a graph buffer or a local array)."""
        return name in self.plan.stores or name in self.plan.private

    def store(self, name: str, index: sympy.Expr, value: CppVar) -> None:
        self.scope.lines.append(self.store_line(name, index, value))

    def store_line(self, name: str, index: sympy.Expr, value: CppVar) -> str:
        ptr, dtype = self.pointer(name)
        return f"{ptr}[{cexpr(self.address(name, index))}] = {_cast(value, dtype)};"

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

