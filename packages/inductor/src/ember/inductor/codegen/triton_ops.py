"""The Triton ops handler: one Triton expression per op, and the kernel state it writes into.

``TritonOps`` turns each op into one ``tmpN = <expr>`` line in the current scope
(``common.KernelOps``, as ``CppOps`` does for C++: each elementwise op is the
``triton`` column of its ``op_table.OPS`` row, or an ``op_<name>`` method below). Values
are blocks: ``[XBLOCK]`` in a 1-D pointwise kernel, ``[YBLOCK, XBLOCK]`` in a
tiled one, ``[XBLOCK, 1]`` or ``[XBLOCK, RBLOCK]`` in a reduction kernel.

Transcendental ops use ``tl.`` math where Triton has it (``exp``, ``log``,
``sin``, ``erf``, ...) and ``libdevice`` otherwise (``tanh``, ``expm1``,
``atan2``, ...: the table's column says which). Triton's interpreter cannot run ``libdevice``; for CPU tensors
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
from ..sizes import is_size_symbol
from .common import KernelOps, KernelState, RealSyntax, Var, is_integral, print_real

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


_REAL = RealSyntax(
    number=lambda v: f"tl.full([1], {v!r}, tl.float64)",
    symbol=lambda name: f"({name} + tl.zeros([1], tl.float64))",
    integer=lambda e: f"({texpr(e)} + tl.zeros([1], tl.float64))",
    mul=" * ",
    reciprocal="(1.0 / ({0}))",
    sqrt="tl.sqrt({0})",
)


def tfloat(expr: sympy.Expr) -> str:
    """A real-valued expression of sizes as float64 Triton arithmetic."""
    return print_real(expr, _REAL)


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


#: a Triton value (a block: ``tmp3``, a literal)
TVar = Var

#: ops on bools computed as logic (``True + True`` is ``True`` in torch)
_BOOL_LOGIC = {"add": "|", "maximum": "|", "mul": "&", "minimum": "&"}


@dataclass(kw_only=True)
class TritonKernel(KernelState):
    """``common.KernelState`` with what Triton kernels need: masks, lanes, index ranges."""

    #: buffers the kernel writes
    stores: set[str] = field(default_factory=set)
    #: masks of the enclosing ``ops.masked`` bodies
    masked: list[str] = field(default_factory=list)
    #: symbol -> the mask of the lanes it varies over (``xmask``, ``ymask``, ``r0mask``)
    symbol_masks: dict[sympy.Symbol, str] = field(default_factory=dict)
    #: symbol -> exclusive upper bound (loop extents; indirect indices' dim sizes)
    ranges: dict[sympy.Symbol, Any] = field(default_factory=dict)
    #: every address expression emitted (int64 indexing is needed if one can reach 2**31)
    addresses: list[sympy.Expr] = field(default_factory=list)
    #: lanes of the current scope (``xmask``, ``xmask & r0mask``, ...)
    lane_mask: str = "xmask"
    #: a lane variable of the current scope's shape (blockifies scalar addresses)
    lane_index: str = "xindex"
    #: the kernel checks indirect indices (it takes an ``err_ptr`` argument)
    index_check: bool = False
    #: check indirect indices with ``tl.device_assert`` instead (compiled CUDA kernels:
    #: no flag to read back, as eager's CUDA kernels; launched with ``debug=True``)
    device_asserts: bool = False
    #: the kernel holds a ``tl.device_assert``
    asserts: bool = False
    #: ``@triton.jit`` helpers the kernel calls (name -> source)
    helpers: dict[str, str] = field(default_factory=dict)

    def declare(self, name: str, expr: str, dtype: torch.dtype, decl: str | None) -> str:
        return f"{name} = {expr}"

    def stored(self, name: str) -> bool:
        return name in self.stores

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

    def store(self, name: str, index: sympy.Expr, value: Var) -> None:
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


class TritonOps(KernelOps):
    """Emits Triton statements into the kernel's current scope; values are ``TVar``."""

    column = "triton"
    label = "Triton"
    k: TritonKernel

    def __init__(self, kernel: TritonKernel) -> None:
        super().__init__(kernel)

    def literal(self, value: bool | int | float, dtype: torch.dtype) -> str:
        return literal(value, dtype)

    def load_memory(self, name: str, index: sympy.Expr) -> TVar:
        ptr, dtype = self.k.pointers[name]
        text, mask = self.k.address(ptr, index)
        load = f"tl.load({text}, {mask}, other=0)"
        if dtype in LOW_PRECISION:
            load += ".to(tl.float32)"
        return self.k.emit(load, dtype)
    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> TVar:
        index = self.k.rewrite(expr)
        if not index.free_symbols:
            if index.is_Integer:
                return self.constant(int(index), dtype)
            return self.constant(float(index), dtype)
        # a real-valued expression of size arguments (batch norm's ``1/(n-1)``), or an index
        text = texpr(index) if is_integral(index) else tfloat(index)
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

    # -- the syntax of ``op_table.OPS`` rows without a Triton column --------------------

    def _op(self, name: str, *args: Any) -> TVar:
        if len(args) == 2 and args[0].dtype == torch.bool and name in _BOOL_LOGIC:
            a, b = args
            return self.k.emit(f"({a} {_BOOL_LOGIC[name]} {b})", a.dtype)
        return super()._op(name, *args)

    def op_abs(self, x: TVar) -> TVar:
        return self.k.emit(f"tl.abs({x})", x.dtype) if x.dtype != torch.bool else x

    def op_sign(self, x: TVar) -> TVar:
        if x.dtype == torch.bool:
            return x
        one, zero = literal(1, x.dtype), literal(0, x.dtype)
        neg = self.k.emit(f"tl.where({x} < {zero}, -{one}, {x})", x.dtype)
        return self.k.emit(f"tl.where({x} > {zero}, {one}, {neg})", x.dtype)

    def op_bitwise_not(self, x: TVar) -> TVar:
        if x.dtype == torch.bool:
            return self.k.emit(f"({x} == 0)", torch.bool)
        return self.k.emit(f"~{x}", x.dtype)

    def op_isinf(self, x: TVar) -> TVar:
        if not x.dtype.is_floating_point:
            return self.k.emit(f"({x} != {x})", torch.bool)
        return self.k.emit(f'(tl.abs({x}) == float("inf"))', torch.bool)

    def op_pow(self, a: TVar, b: TVar) -> TVar:
        if a.dtype.is_floating_point:
            return self.k.emit(f"libdevice.pow({a}, {b})", a.dtype)
        # integer powers through float64, as the C++ backend's std::pow
        p = f"libdevice.pow({a}.to(tl.float64), {b}.to(tl.float64))"
        return self.k.emit(f"{p}.to({TL_DTYPES[a.dtype]})", a.dtype)

    def op_fmod(self, a: TVar, b: TVar) -> TVar:
        if a.dtype.is_floating_point:
            return self.k.emit(f"libdevice.fmod({a}, {b})", a.dtype)
        return self.k.emit(f"({a} % {b})", a.dtype)  # Triton's % truncates like C

    def op_mod(self, a: TVar, b: TVar) -> TVar:
        r = self.op_fmod(a, b)
        fix = f"({r} != 0) & (({r} < 0) != ({b} < 0))"
        return self.k.emit(f"tl.where({fix}, {r} + {b}, {r})", a.dtype)

    def op_floordiv(self, a: TVar, b: TVar) -> TVar:
        if a.dtype.is_floating_point:
            return self.k.emit(f"tl.floor({a} / {b})", a.dtype)
        q = self.k.emit(f"({a} // {b})", a.dtype)  # truncates
        fix = f"(({q} * {b}) != {a}) & (({a} < 0) != ({b} < 0))"
        return self.k.emit(f"tl.where({fix}, {q} - 1, {q})", a.dtype)
