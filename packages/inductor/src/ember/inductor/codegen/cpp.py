"""C++/OpenMP code generation for one ``KernelPlan``.

``CppOps`` is the ops handler: each op becomes one ``auto tmpN = <expr>;``
line (common subexpressions reuse the variable), so the C++ differs from the
Triton backend only in the strings per op. ``CppKernel`` writes the loop
skeleton: an OpenMP ``parallel for`` over the outer loops when there is
enough work, and ``omp simd`` (with reduction clauses) on innermost loops.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from ..index import FloorDiv, ModIndex, index_symbols
from ..ir import Reduction
from ..loops import MergedLoops, merge_loops
from ..ops_handler import DefaultOps
from ..options import InductorOptions
from ..scheduler import KernelPlan, Loop, SchedNode, private_offset
from .cpp_column import column_plan, emit_column_kernel
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


def cexpr(expr: sympy.Expr) -> str:
    """Print an integer index expression as C++ (int64 arithmetic)."""
    if isinstance(expr, sympy.Integer):
        v = int(expr)
        return f"{v}LL" if abs(v) >= 2**31 else str(v)
    if isinstance(expr, sympy.Symbol):
        return str(expr.name)
    if isinstance(expr, FloorDiv):
        return f"({cexpr(expr.args[0])} / {cexpr(expr.args[1])})"
    if isinstance(expr, ModIndex):
        return f"({cexpr(expr.args[0])} % {cexpr(expr.args[1])})"
    if isinstance(expr, sympy.Add):
        return "(" + " + ".join(cexpr(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.Mul):
        return "(" + "*".join(cexpr(a) for a in expr.args) + ")"
    raise NotImplementedError(f"cannot print index expression {expr!r} as C++")


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
        return self._emit(f"static_cast<{CTYPES[dtype]}>({cexpr(self.k.rewrite(expr))})", dtype)

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
        outer.lines.append(
            f"{ctype} {name} = [&]() -> {ctype} {{ if ({mask}) {{ {body_text} return {result}; }} "
            f"return {literal(other, dtype)}; }}();"
        )
        return CppVar(name, dtype)

    def indirect_indexing(self, x: CppVar, size: int) -> sympy.Expr:
        v = self._emit(f"static_cast<int64_t>({x})", torch.int64)
        w = self._emit(f"ember_check_index({v}, {size})", torch.int64)
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


def _numel(sizes: tuple[int, ...]) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


def generate_kernel(
    plan: KernelPlan, buffer_dtypes: dict[str, torch.dtype], options: InductorOptions
) -> tuple[str, list[str]]:
    """C++ source of one kernel (without prelude) and its argument buffer names, in order."""
    k = CppKernel(plan, options)
    args: list[str] = []
    params: list[str] = []
    for name in plan.loads:
        k.pointers[name] = (f"in_{name}", buffer_dtypes[name])
        params.append(f"const {mem_ctype(buffer_dtypes[name])}* __restrict__ in_{name}")
        args.append(name)
    for name in plan.private:
        k.pointers[name] = (f"local_{name}", buffer_dtypes[name])
    for name in plan.stores:
        k.pointers[name] = (f"out_{name}", buffer_dtypes[name])
        params.append(f"{mem_ctype(buffer_dtypes[name])}* __restrict__ out_{name}")
        args.append(name)
    n_outer = len(plan.outer)
    outer_syms = plan.nodes[0].symbols(n_outer)[0]
    accesses: list[sympy.Expr] = []
    for n in plan.nodes:
        loads, store = n.accesses(n_outer)
        accesses.extend(e for _, e in loads)
        accesses.append(store)
    outer = merge_loops(plan.outer, outer_syms, accesses)
    lines: list[str] = []
    total_work = _numel(plan.outer) * max((_numel(lp.inner) for lp in plan.loops), default=1)
    parallel_outer = _numel(outer.sizes) >= 8 and total_work >= options.parallel_threshold
    if plan.is_pointwise:
        body = _emit_loop_body(k, plan.loops, outer.rewrite, n_outer, [])
        lines.extend(
            _loop_nest(outer, body, parallel=parallel_outer, simd_inner=True, reductions=[])
        )
    elif options.column_reductions and column_plan(plan, outer, n_outer) is not None:
        parallel = total_work >= options.parallel_threshold
        lines.extend(emit_column_kernel(k, plan, outer, n_outer, parallel))
    else:
        # iteration-local buffers: declared inside the outer loops, so one per thread
        body = [
            f"{mem_ctype(buffer_dtypes[name])} local_{name}[{numel}];"
            for name, numel in plan.private.items()
        ]
        for loop in plan.loops:
            body.extend(
                _emit_inner_loop(
                    k,
                    loop,
                    outer,
                    n_outer,
                    parallel_inner=not parallel_outer and total_work >= options.parallel_threshold,
                )
            )
        lines.extend(
            _loop_nest(outer, body, parallel=parallel_outer, simd_inner=False, reductions=[])
        )
    src = (
        f'extern "C" void ember_kernel({", ".join(params)})\n{{\n'
        + "\n".join("  " + ln for ln in lines)
        + "\n}\n"
    )
    return src, args


def _loop_nest(
    loops: MergedLoops,
    body: list[str],
    *,
    parallel: bool,
    simd_inner: bool,
    reductions: list[str],
    parallel_reduction: bool = False,
) -> list[str]:
    depth = len(loops.sizes)
    if depth == 0:
        return ["{", *("  " + b for b in body), "}"]
    out: list[str] = []
    red = " ".join(reductions)
    for d, (size, sym) in enumerate(zip(loops.sizes, loops.symbols)):
        pragma = ""
        if d == 0 and parallel:
            collapse = depth - 1 if simd_inner and depth > 1 else depth
            if simd_inner and depth == 1:
                # "parallel for simd" on one loop leaves gcc's vector math calls scalar:
                # tile it, threads over tiles and simd within a tile.
                return _tiled_loop(size, sym.name, body, red)
            else:
                pragma = "#pragma omp parallel for" + (
                    f" collapse({collapse})" if collapse > 1 else ""
                )
                pragma += f" {red}" if red else ""
        elif d == depth - 1 and simd_inner:
            pragma = f"#pragma omp simd {red}".rstrip()
        if pragma:
            out.append("  " * d + pragma)
        out.append("  " * d + f"for (int64_t {sym.name} = 0; {sym.name} < {size}; ++{sym.name}) {{")
    out.extend("  " * depth + b for b in body)
    for d in reversed(range(depth)):
        out.append("  " * d + "}")
    return out


_TILE = 4096


def _tiled_loop(size: int, var: str, body: list[str], red: str) -> list[str]:
    tile = f"{var}_tile"
    out = [
        f"#pragma omp parallel for {red}".rstrip(),
        f"for (int64_t {tile} = 0; {tile} < {size}; {tile} += {_TILE}) {{",
        f"  const int64_t {var}_end = {tile} + {_TILE} < {size} ? {tile} + {_TILE} : {size};",
        f"  #pragma omp simd {red}".rstrip(),
        f"  for (int64_t {var} = {tile}; {var} < {var}_end; ++{var}) {{",
    ]
    out.extend("    " + b for b in body)
    out += ["  }", "}"]
    return out


def _store_line(k: CppKernel, node: SchedNode, value: CppVar, index: sympy.Expr) -> str:
    ptr, dtype = k.pointer(node.name)
    return f"{ptr}[{cexpr(k.address(node.name, index))}] = {_cast(value, dtype)};"


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


def _emit_loop_body(
    k: CppKernel,
    loops: list[Loop],
    rewrite: Callable[[sympy.Expr], sympy.Expr],
    n_outer: int,
    _: list[str],
) -> list[str]:
    """Pure pointwise kernels: every node once per (outer) index."""
    k.scope = Scope([], {})
    k.rewrite = rewrite
    ops = CppOps(k)
    for loop in loops:
        for n in loop.nodes:
            outer, _inner = n.symbols(n_outer)
            idx = n.full_index(outer)
            data = n.buffer.data
            assert not isinstance(data, Reduction)
            value = data.inner_fn(idx, ops)
            value = ops.to_dtype(value, n.buffer.get_dtype())
            k.locals[n.name] = value
            if k.stored(n.name):
                k.scope.lines.append(_store_line(k, n, value, n.buffer.layout.index(idx)))
    return k.scope.lines


def merge_inner_loops(k: CppKernel, loop: Loop, outer: MergedLoops, n_outer: int) -> MergedLoops:
    """Merge ``loop``'s inner dims over every access in it; point ``k.rewrite`` at the result."""
    _, inner_syms = loop.nodes[0].symbols(n_outer)
    accesses: list[sympy.Expr] = []
    for n in loop.nodes:
        loads, store = n.accesses(n_outer)
        accesses.extend(outer.rewrite(e) for _, e in loads)
        if not n.is_reduction:
            accesses.append(outer.rewrite(store))
    inner = merge_loops(loop.inner, inner_syms, accesses, outer.ranges)
    k.rewrite = lambda e: inner.rewrite(outer.rewrite(e))
    return inner


def _emit_inner_loop(
    k: CppKernel, loop: Loop, outer: MergedLoops, n_outer: int, *, parallel_inner: bool
) -> list[str]:
    outer_syms, inner_syms = loop.nodes[0].symbols(n_outer)
    inner = merge_inner_loops(k, loop, outer, n_outer)
    outer_scope = k.scope
    pre: list[str] = []
    post: list[str] = []
    clauses: list[str] = []
    can_simd = True
    k.scope = Scope([], {})
    ops = CppOps(k)
    results: list[tuple[SchedNode, CppVar]] = []
    for n in loop.nodes:
        data = n.buffer.data
        if isinstance(data, Reduction):
            acc = k.new_var()
            rtype = data.reduction_type
            dtype = data.dtype
            ctype = CTYPES[dtype]
            value = data.inner_fn(n.full_index(outer_syms), n.reduction_index(inner_syms), ops)
            if rtype in ("argmax", "argmin"):
                can_simd = False
                src_ctype = CTYPES[data.src_dtype]
                best = k.new_var()
                lin = sum(
                    (s * st for s, st in zip(inner_syms, _contig(loop.inner))), sympy.Integer(0)
                )
                cmp = ">" if rtype == "argmax" else "<"
                pre += [f"{src_ctype} {best} = 0;", f"int64_t {acc} = -1;"]
                isnan = f"({value} != {value})" if data.src_dtype.is_floating_point else "false"
                best_nan = f"({best} != {best})" if data.src_dtype.is_floating_point else "false"
                k.scope.lines.append(
                    f"if ({acc} < 0 || (!{best_nan} && ({isnan} || {value} {cmp} {best}))) "
                    f"{{ {best} = {value}; {acc} = {cexpr(k.rewrite(lin))}; }}"
                )
                post.append(f"if ({acc} < 0) {acc} = 0;")
                results.append((n, CppVar(acc, torch.int64)))
                continue
            value = ops.to_dtype(value, dtype)
            pre.append(f"{ctype} {acc} = {reduction_init(rtype, dtype)};")
            k.scope.lines.append(reduction_update(rtype, acc, value))
            clauses.append(f"reduction({_OMP_CLAUSE[rtype]}:{acc})")
            if rtype in ("max", "min") and dtype.is_floating_point:
                # the NaN flag is an int: a bool || reduction costs ~30% of a max loop
                nan = k.new_var()
                pre.append(f"int {nan} = 0;")
                k.scope.lines.append(nan_update(nan, value))
                clauses.append(f"reduction(|:{nan})")
                post.append(nan_fixup(nan, acc, dtype))
            results.append((n, CppVar(acc, dtype)))
        else:
            idx = n.full_index(list(outer_syms) + list(inner_syms))
            value = ops.to_dtype(data.inner_fn(idx, ops), n.buffer.get_dtype())
            if loop.inner:
                k.locals[n.name] = value
            else:
                results.append((n, value))
                k.locals[n.name] = value
            if k.stored(n.name):
                k.scope.lines.append(_store_line(k, n, value, n.buffer.layout.index(idx)))
    body = k.scope.lines
    k.scope = outer_scope
    out = list(pre)
    if loop.inner:
        parallel = parallel_inner and can_simd
        out += _loop_nest(inner, body, parallel=parallel, simd_inner=can_simd, reductions=clauses)
    else:
        out += body
    out += post
    for n, value in results:
        if isinstance(n.buffer.data, Reduction):
            k.locals[n.name] = value
            if k.stored(n.name):
                k.rewrite = outer.rewrite
                out.append(
                    _store_line(k, n, value, n.buffer.layout.index(n.full_index(outer_syms)))
                )
    # values computed inside an inner loop are not visible after it
    for n in loop.nodes:
        if loop.inner and not n.is_reduction:
            k.locals.pop(n.name, None)
    k.rewrite = outer.rewrite
    return out


def _contig(sizes: tuple[int, ...]) -> list[int]:
    from ..index import contiguous_strides

    return list(contiguous_strides(sizes))
