"""The Triton ops handler: one Triton expression per op, and the kernel state it writes into.

``TritonOps`` turns each op into one ``tmpN = <expr>`` line in the current scope
(common subexpressions reuse the variable), like ``CppOps`` does for C++. Values
are blocks: ``[XBLOCK]`` in a 1-D pointwise kernel, ``[YBLOCK, XBLOCK]`` in a
tiled one, ``[XBLOCK, 1]`` or ``[XBLOCK, RBLOCK]`` in a reduction kernel.

Transcendental ops use ``tl.`` math where Triton has it (``exp``, ``log``,
``sin``, ``erf``, ...) and ``libdevice`` otherwise (``tanh``, ``expm1``,
``atan2``, ...). Triton's interpreter cannot run ``libdevice``; for CPU tensors
the kernel module's ``libdevice`` is ``triton_libdevice.py`` (numpy), so the
generated source is the same on a GPU and under the interpreter.

float16 and bfloat16 values are computed in float32: loads widen them, stores
narrow them, and ``to_dtype`` to them rounds (``.to(tl.float16).to(tl.float32)``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from ..index import print_index
from ..ops_handler import DefaultOps
from ..sizes import is_size_symbol

TL_DTYPES = {
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.int64: "tl.int64",
    torch.int32: "tl.int32",
    torch.int16: "tl.int16",
    torch.int8: "tl.int8",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}
#: Dtypes kept in float32 registers (rounded only by ``to_dtype`` and stores).
LOW_PRECISION = (torch.float16, torch.bfloat16)


def register_dtype(dtype: torch.dtype) -> str:
    """The Triton type a value of ``dtype`` has in registers."""
    return "tl.float32" if dtype in LOW_PRECISION else TL_DTYPES[dtype]


def texpr(expr: sympy.Expr) -> str:
    """Print an integer index expression as Triton (Python) arithmetic. Size symbols
    (``s0``) print as their names: kernels take them as arguments."""
    return print_index(expr, div="//", mul=" * ")


def _integral(expr: sympy.Expr) -> bool:
    """Whether ``expr`` is integer arithmetic (an index), as opposed to a real-valued
    expression of sizes (``1/(s0 - 1)``, batch norm's unbiased correction)."""
    for a in sympy.preorder_traversal(expr):
        if a.is_Float or (a.is_Rational and not a.is_Integer):
            return False
        if isinstance(a, sympy.Pow) and a.exp.is_negative:
            return False
    return True


def tfloat(expr: sympy.Expr) -> str:
    """A real-valued expression of sizes as float64 Triton arithmetic."""
    if expr.is_Number:
        return f"tl.full([1], {float(expr)!r}, tl.float64)"
    if isinstance(expr, sympy.Symbol):
        return f"({expr.name} + tl.zeros([1], tl.float64))"
    if isinstance(expr, sympy.Add):
        return "(" + " + ".join(tfloat(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.Mul):
        return "(" + " * ".join(tfloat(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer:
        base, n = tfloat(expr.base), int(expr.exp)
        body = " * ".join([base] * abs(n)) or "1.0"
        return f"({body})" if n > 0 else f"(1.0 / ({body}))"
    if isinstance(expr, sympy.Pow) and expr.exp == sympy.Rational(1, 2):
        return f"tl.sqrt({tfloat(expr.base)})"
    return f"({texpr(expr)} + tl.zeros([1], tl.float64))"


def scalar_literal(value: bool | int | float, dtype: torch.dtype) -> str:
    """``value`` as a Python literal (what ``tl.full(shape, value, dtype)`` takes)."""
    if dtype == torch.bool:
        return "True" if value else "False"
    if dtype.is_floating_point:
        v = float(value)
        return f'float("{v}")' if math.isnan(v) or math.isinf(v) else repr(v)
    return str(int(value))


def literal(value: bool | int | float, dtype: torch.dtype) -> str:
    """A constant of ``dtype``: a plain literal where Triton's own typing gives ``dtype``
    (bool, int32, float32), a one-element block of the right type otherwise."""
    if dtype == torch.bool:
        return "True" if value else "False"
    if dtype.is_floating_point:
        v = float(value)
        text = f'float("{v}")' if math.isnan(v) or math.isinf(v) else repr(v)
        if dtype in (torch.float32, *LOW_PRECISION):
            return text
        return f"tl.full([1], {text}, {TL_DTYPES[dtype]})"
    v = int(value)
    if dtype == torch.int32 and -(2**31) <= v < 2**31:
        return str(v)
    return f"tl.full([1], {v}, {TL_DTYPES[dtype]})"


_PLAIN_LITERAL = re.compile(r'True|False|-?[0-9][0-9.e+-]*|float\("-?(inf|nan)"\)')


def cast(value: TVar, tl_dtype: str) -> str:
    """``value`` converted to ``tl_dtype``: ``.to`` on a block; a plain literal (``1.0``,
    ``True``), which has no ``.to``, becomes a one-element block of that type."""
    if _PLAIN_LITERAL.fullmatch(value.expr):
        return f"tl.full([1], {value.expr}, {tl_dtype})"
    return f"{value}.to({tl_dtype})"


@dataclass(frozen=True, slots=True)
class TVar:
    expr: str
    dtype: torch.dtype

    def __str__(self) -> str:
        return self.expr


#: ops that are ``tl.`` math (the same functions on a GPU and under the interpreter)
_TL_MATH = {
    "exp": "tl.exp",
    "exp2": "tl.exp2",
    "log": "tl.log",
    "log2": "tl.log2",
    "sqrt": "tl.sqrt",
    "rsqrt": "tl.rsqrt",
    "sin": "tl.sin",
    "cos": "tl.cos",
    "erf": "tl.erf",
    "floor": "tl.floor",
    "ceil": "tl.ceil",
    "sigmoid": "tl.sigmoid",
}
#: ops Triton has only in libdevice (CUDA's libm)
_LIBDEVICE = {
    "expm1": "expm1",
    "log10": "log10",
    "log1p": "log1p",
    "tan": "tan",
    "asin": "asin",
    "acos": "acos",
    "atan": "atan",
    "sinh": "sinh",
    "cosh": "cosh",
    "tanh": "tanh",
    "asinh": "asinh",
    "acosh": "acosh",
    "atanh": "atanh",
    "erfc": "erfc",
    "trunc": "trunc",
    "round": "nearbyint",
}
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_ARITH = {"add": "+", "sub": "-", "mul": "*", "truediv": "/"}
_BITWISE = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
_LOGICAL = {"logical_and": "&", "logical_or": "|", "logical_xor": "^"}


@dataclass
class Scope:
    """Lines being emitted and the values computed in them; ``parent`` values stay visible."""

    lines: list[str]
    cse: dict[str, TVar] = field(default_factory=dict)
    parent: Scope | None = None

    def lookup(self, expr: str) -> TVar | None:
        scope: Scope | None = self
        while scope is not None:
            hit = scope.cse.get(expr)
            if hit is not None:
                return hit
            scope = scope.parent
        return None


class TritonKernel:
    """What one kernel's emission needs: pointers, masks, index rewrite, values in registers."""

    def __init__(self, pointers: dict[str, tuple[str, torch.dtype]]) -> None:
        self.pointers = pointers
        self.scope = Scope([])
        self.counter = 0
        #: buffer name -> its value, where it is in registers
        self.locals: dict[str, TVar] = {}
        #: masks of the enclosing ``ops.masked`` bodies
        self.masked: list[str] = []
        #: index expressions over the plan's symbols -> over the emitted (merged) loops
        self.rewrite: Callable[[sympy.Expr], sympy.Expr] = lambda e: e
        #: symbol -> the mask of the lanes it varies over (``xmask``, ``ymask``, ``r0mask``)
        self.symbol_masks: dict[sympy.Symbol, str] = {}
        #: symbol -> exclusive upper bound (loop extents; indirect indices' dim sizes)
        self.ranges: dict[sympy.Symbol, int] = {}
        #: every address expression emitted (int64 indexing is needed if one can reach 2**31)
        self.addresses: list[sympy.Expr] = []
        #: lanes of the current scope (``xmask``, ``xmask & r0mask``, ...)
        self.lane_mask = "xmask"
        #: a lane variable of the current scope's shape (blockifies scalar addresses)
        self.lane_index = "xindex"
        #: the kernel checks indirect indices (it takes an ``err_ptr`` argument)
        self.index_check = False
        #: check indirect indices with ``tl.device_assert`` instead (compiled CUDA kernels:
        #: no flag to read back, as eager's CUDA kernels; launched with ``debug=True``)
        self.device_asserts = False
        #: the kernel holds a ``tl.device_assert``
        self.asserts = False
        #: ``@triton.jit`` helpers the kernel calls (name -> source)
        self.helpers: dict[str, str] = {}

    def new_var(self) -> str:
        self.counter += 1
        return f"tmp{self.counter}"

    def emit(self, expr: str, dtype: torch.dtype) -> TVar:
        hit = self.scope.lookup(expr)
        if hit is not None:
            return hit
        var = TVar(self.new_var(), dtype)
        self.scope.lines.append(f"{var} = {expr}")
        self.scope.cse[expr] = var
        return var

    def line(self, text: str) -> None:
        self.scope.lines.append(text)

    def mask_for(self, index: sympy.Expr) -> str | None:
        """The mask of the lanes an access at ``index`` covers (None: a scalar address)."""
        parts: list[str] = []
        for sym in sorted(index.free_symbols, key=str):
            m = self.symbol_masks.get(sym)
            if m is None and is_size_symbol(sym):
                continue  # a size argument: the same for every lane
            if m is None:
                raise NotImplementedError(f"index symbol {sym} has no lanes in this kernel")
            for part in m.split(" & "):
                if part not in parts:
                    parts.append(part)
        parts.extend(m for m in self.masked if m not in parts)
        return " & ".join(parts) if parts else None

    def address(self, ptr: str, index: sympy.Expr) -> tuple[str, str | None]:
        """(pointer expression, mask) for element ``index`` of the buffer at ``ptr``.

        An address without loop symbols (a broadcast scalar) is spread over the scope's
        lanes, so every load and store is a block of the scope's shape or smaller."""
        index = self.rewrite(index)
        self.addresses.append(index)
        mask = self.mask_for(index)
        text = f"{ptr} + ({texpr(index)})"
        if not any(s in self.symbol_masks for s in index.free_symbols):
            text += f" + tl.zeros_like({self.lane_index})"
            mask = " & ".join([self.lane_mask, *self.masked])
        return text, mask

    def store(self, name: str, index: sympy.Expr, value: TVar) -> None:
        ptr, dtype = self.pointers[name]
        text, mask = self.address(ptr, index)
        self.line(f"tl.store({text}, {store_value(value, dtype)}, {mask})")


def store_value(value: TVar, dtype: torch.dtype) -> str:
    """``value`` as the element type of a buffer of ``dtype``."""
    if dtype == torch.bool:
        return str(value) if value.dtype == torch.bool else f"({value} != 0)"
    if value.dtype == torch.bool or register_dtype(value.dtype) != TL_DTYPES[dtype]:
        return cast(value, TL_DTYPES[dtype])
    return str(value)


class TritonOps(DefaultOps):
    """Emits Triton statements into the kernel's current scope; values are ``TVar``."""

    def __init__(self, kernel: TritonKernel) -> None:
        self.k = kernel

    def load(self, name: str, index: sympy.Expr) -> TVar:
        local = self.k.locals.get(name)
        if local is not None:
            return local
        ptr, dtype = self.k.pointers[name]
        text, mask = self.k.address(ptr, index)
        load = f"tl.load({text}, {mask}, other=0)"
        if dtype in LOW_PRECISION:
            load += ".to(tl.float32)"
        return self.k.emit(load, dtype)

    def constant(self, value: bool | int | float, dtype: torch.dtype) -> TVar:
        return TVar(literal(value, dtype), dtype)

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> TVar:
        index = self.k.rewrite(expr)
        if not index.free_symbols:
            if index.is_Integer:
                return self.constant(int(index), dtype)
            return self.constant(float(index), dtype)
        # a real-valued expression of size arguments (batch norm's ``1/(n-1)``), or an index
        text = texpr(index) if _integral(index) else tfloat(index)
        if not any(s in self.k.symbol_masks for s in index.free_symbols):
            # only size arguments: a scalar, spread over the scope's lanes like a load
            text = f"{text} + tl.zeros_like({self.k.lane_index})"
        return self.k.emit(f"({text}).to({register_dtype(dtype)})", dtype)

    def to_dtype(self, x: TVar, dtype: torch.dtype) -> TVar:
        if x.dtype == dtype:
            return x
        if dtype == torch.bool:
            return self.k.emit(f"({x} != 0)", dtype)
        if dtype in LOW_PRECISION:
            return self.k.emit(f"{cast(x, TL_DTYPES[dtype])}.to(tl.float32)", dtype)
        if register_dtype(x.dtype) == TL_DTYPES[dtype] and x.dtype != torch.bool:
            return TVar(x.expr, dtype)  # float16/bfloat16 already are float32 in registers
        return self.k.emit(cast(x, TL_DTYPES[dtype]), dtype)

    def where(self, cond: TVar, a: TVar, b: TVar) -> TVar:
        return self.k.emit(f"tl.where({cond}, {a}, {b})", a.dtype)

    def masked(
        self, mask: TVar, body: Callable[[], Any], other: bool | int | float, dtype: torch.dtype
    ) -> TVar:
        self.k.masked.append(str(mask))
        try:
            value = body()
        finally:
            self.k.masked.pop()
        if not isinstance(value, TVar):
            value = self.constant(value, dtype)
        value = self.to_dtype(value, dtype)
        return self.k.emit(f"tl.where({mask}, {value}, {literal(other, dtype)})", dtype)

    def indirect_indexing(self, x: TVar, size: Any) -> sympy.Expr:
        """The index ``x`` (negative counts from the end) as a symbol; out of range sets the
        kernel's error flag (``KernelIndexError`` after the kernel) or, in a compiled CUDA
        kernel, fails a device-side assertion (as eager's CUDA kernels do); reads element 0."""
        k = self.k
        n = str(size) if isinstance(size, int) else texpr(sympy.sympify(size))
        v = k.emit(f"{x}.to(tl.int64)", torch.int64)
        w = k.emit(f"tl.where({v} < 0, {v} + {n}, {v})", torch.int64)
        bad = k.emit(f"({w} < 0) | ({w} >= {n})", torch.bool)
        flag = k.emit(" & ".join([str(bad), k.lane_mask, *k.masked]), torch.bool)
        if k.device_asserts:
            k.line(f'tl.device_assert({flag} == 0, "index out of range in an ember.inductor kernel")')
            k.asserts = True
        else:
            k.line(f"tl.store(err_ptr + tl.zeros_like({flag}).to(tl.int32), 1, {flag})")
            k.index_check = True
        safe = k.emit(f"tl.where({bad}, 0, {w})", torch.int64)
        sym = sympy.Symbol(safe.expr, integer=True, nonnegative=True)
        k.symbol_masks[sym] = k.lane_mask
        k.ranges[sym] = size
        return sym

    def _op(self, name: str, *args: Any) -> TVar:
        k = self.k
        if len(args) == 2:
            a, b = args
            return self._binary(name, a, b)
        x: TVar = args[0]
        dtype = x.dtype
        is_float = dtype.is_floating_point
        if name in _TL_MATH:
            return k.emit(f"{_TL_MATH[name]}({x})", dtype)
        if name in _LIBDEVICE:
            return k.emit(f"libdevice.{_LIBDEVICE[name]}({x})", dtype)
        if name == "neg":
            return k.emit(f"-{x}", dtype)
        if name == "abs":
            return k.emit(f"tl.abs({x})", dtype) if dtype != torch.bool else x
        if name == "reciprocal":
            return k.emit(f"1.0 / {x}", dtype)
        if name == "relu":
            return k.emit(f"tl.where({x} < 0, {literal(0, dtype)}, {x})", dtype)
        if name == "sign":
            if dtype == torch.bool:
                return x
            one, zero = literal(1, dtype), literal(0, dtype)
            neg = k.emit(f"tl.where({x} < {zero}, -{one}, {x})", dtype)
            return k.emit(f"tl.where({x} > {zero}, {one}, {neg})", dtype)
        if name in ("logical_not",) or (name == "bitwise_not" and dtype == torch.bool):
            return k.emit(f"({x} == 0)", torch.bool)
        if name == "bitwise_not":
            return k.emit(f"~{x}", dtype)
        if name == "isnan":
            return k.emit(f"({x} != {x})", torch.bool)
        if name == "isinf":
            if not is_float:
                return k.emit(f"({x} != {x})", torch.bool)
            return k.emit(f'(tl.abs({x}) == float("inf"))', torch.bool)
        raise NotImplementedError(f"Triton backend has no ops.{name}")

    def _binary(self, name: str, a: TVar, b: TVar) -> TVar:
        k = self.k
        dtype = a.dtype
        if name in _CMP:
            return k.emit(f"({a} {_CMP[name]} {b})", torch.bool)
        if name in _LOGICAL:
            return k.emit(f"(({a} != 0) {_LOGICAL[name]} ({b} != 0))", torch.bool)
        if dtype == torch.bool and name in ("add", "mul", "maximum", "minimum"):
            op = "|" if name in ("add", "maximum") else "&"
            return k.emit(f"({a} {op} {b})", dtype)
        if name in _ARITH:
            return k.emit(f"({a} {_ARITH[name]} {b})", dtype)
        if name in _BITWISE:
            return k.emit(f"({a} {_BITWISE[name]} {b})", dtype)
        if name in ("maximum", "minimum"):
            cmp = "<" if name == "maximum" else ">"
            return k.emit(f"tl.where(({a} {cmp} {b}) | ({b} != {b}), {b}, {a})", dtype)
        if name in ("atan2", "hypot"):
            return k.emit(f"libdevice.{name}({a}, {b})", dtype)
        if name == "pow":
            if dtype.is_floating_point:
                return k.emit(f"libdevice.pow({a}, {b})", dtype)
            # integer powers through float64, as the C++ backend's std::pow
            p = f"libdevice.pow({a}.to(tl.float64), {b}.to(tl.float64))"
            return k.emit(f"{p}.to({TL_DTYPES[dtype]})", dtype)
        if name == "fmod":
            if dtype.is_floating_point:
                return k.emit(f"libdevice.fmod({a}, {b})", dtype)
            return k.emit(f"({a} % {b})", dtype)  # Triton's % truncates like C
        if name == "mod":
            r = (
                k.emit(f"libdevice.fmod({a}, {b})", dtype)
                if dtype.is_floating_point
                else k.emit(f"({a} % {b})", dtype)
            )
            fix = f"({r} != 0) & (({r} < 0) != ({b} < 0))"
            return k.emit(f"tl.where({fix}, {r} + {b}, {r})", dtype)
        if name == "floordiv":
            if dtype.is_floating_point:
                return k.emit(f"tl.floor({a} / {b})", dtype)
            q = k.emit(f"({a} // {b})", dtype)  # truncates
            fix = f"(({q} * {b}) != {a}) & (({a} < 0) != ({b} < 0))"
            return k.emit(f"tl.where({fix}, {q} - 1, {q})", dtype)
        raise NotImplementedError(f"Triton backend has no ops.{name}")
