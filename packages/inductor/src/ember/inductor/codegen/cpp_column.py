"""Column reductions for the C++ backend: reduce across rows, vectorize along the row.

A reduction whose input is contiguous along the kept (outer) dimension and strided
along the reduced one — ``x.sum(0)`` on a row-major matrix, the bias gradient of
every ``Linear`` — is slow as ``for x: for r: acc += in[x + X*r]``: the inner loop
strides through memory and cannot be vectorized. This emitter interchanges the loops:

    for each tile of T consecutive x (threads split the tiles):
        acc[0..T) = init
        for r:                      (rows, in memory order)
            simd for x in tile: acc[x - tile] = combine(acc[x - tile], f(x, r))
        for x in tile: epilogue on acc[x - tile], stores

so each row is read as T contiguous elements. Only the C++ codegen knows about this:
the loop IR and the scheduler's plan are unchanged.
"""

from __future__ import annotations

import math

import sympy

from ..ir import Reduction
from ..kernel_plan import KernelPlan, Loop, SchedNode
from ..loops import MergedLoops
from ..sizes import is_size_symbol, is_static
from .common import Scope, emit_pointwise, forget_inner_values, reduction_value
from .cpp_loops import emit_inner_loop, merge_inner_loops
from .cpp_ops import (
    CTYPES,
    CppKernel,
    CppOps,
    CppVar,
    cexpr,
    nan_fixup,
    nan_update,
    reduction_init,
    reduction_update,
)

#: Column-tile width (elements): accumulators live in stack arrays of this length.
TILE = 64

_SIMPLE = ("sum", "prod", "max", "min", "any", "all")


def _stride(expr: sympy.Expr, sym: sympy.Symbol) -> int | None:
    """How far ``expr`` moves when ``sym`` goes 0 -> 1 (other symbols at 0); None if not numeric."""
    zero = {s: 0 for s in expr.free_symbols if not is_size_symbol(s)}
    try:
        a = expr.xreplace(zero)
        b = expr.xreplace({**zero, sym: 1})
        return int(b) - int(a)
    except (TypeError, ValueError):
        return None


def column_plan(plan: KernelPlan, outer: MergedLoops) -> Loop | None:
    """The reduction loop of ``plan`` if it should be emitted as a column reduction.

    Requires: one loop with an inner (reduction) range, first in the plan, holding only
    simple reductions (no argmax/argmin) and pointwise nodes; every later loop is an
    epilogue on the outer index; and more loads contiguous along the last outer dim
    than along the reduction.
    """
    if not outer.sizes or not is_static(outer.sizes) or outer.sizes[-1] < 8 or plan.private:
        return None  # the tiling needs static outer sizes (a symbolic reduction range is fine)
    first, rest = plan.loops[0], plan.loops[1:]
    if not first.inner or not first.has_reduction or any(loop.inner for loop in rest):
        return None
    for n in first.nodes:
        data = n.buffer.data
        if isinstance(data, Reduction) and data.reduction_type not in _SIMPLE:
            return None
    if not first.symbols:
        return None
    n_outer = len(plan.outer)
    loads: list[sympy.Expr] = []
    for n in first.nodes:
        node_loads, _ = n.accesses(n_outer)
        loads.extend(outer.rewrite(e) for _, e in node_loads)
    inner = first.merged()
    xs, rs = outer.symbols[-1], inner.symbols[-1]
    column = row = 0
    for e in loads:
        e = inner.rewrite(e)
        sx, sr = _stride(e, xs), _stride(e, rs)
        if sr == 1:
            row += 1
        elif sx == 1:
            column += 1
    return first if column > row else None


def emit_column_kernel(
    k: CppKernel, plan: KernelPlan, outer: MergedLoops, parallel: bool
) -> list[str]:
    """The whole kernel body for a plan accepted by :func:`column_plan`."""
    loop = plan.loops[0]
    outer_syms, inner_syms = plan.outer_symbols, loop.symbols
    inner = merge_inner_loops(k, loop, outer)
    xs = outer.symbols[-1].name
    size = outer.sizes[-1]
    tile = min(TILE, size)
    lane = f"({xs} - {xs}_tile)"

    pre: list[str] = []
    post: list[str] = []
    k.scope = Scope([], {})
    ops = CppOps(k)
    accs: list[tuple[SchedNode, CppVar]] = []
    for n in loop.nodes:
        data = n.buffer.data
        if isinstance(data, Reduction):
            rtype, dtype = data.reduction_type, data.dtype
            ctype = CTYPES[dtype]
            arr = k.new_var()
            acc = f"{arr}[{lane}]"
            value = reduction_value(ops, n, outer_syms, inner_syms)
            k.scope.lines.append(reduction_update(rtype, acc, value))
            if rtype in ("max", "min") and dtype.is_floating_point:
                nan = k.new_var()
                pre.append(f"int {nan}[{tile}];")
                pre.append(f"for (int64_t i = 0; i < {tile}; ++i) {nan}[i] = 0;")
                k.scope.lines.append(nan_update(f"{nan}[{lane}]", value))
                post.append(nan_fixup(f"{nan}[{lane}]", acc, dtype))
            pre.append(f"{ctype} {arr}[{tile}];")
            pre.append(
                f"for (int64_t i = 0; i < {tile}; ++i) {arr}[i] = {reduction_init(rtype, dtype)};"
            )
            accs.append((n, CppVar(acc, dtype)))
        else:  # (a column plan has no private buffers: stored means a graph buffer)
            emit_pointwise(k, ops, n, n.full_index(list(outer_syms) + list(inner_syms)))
    body = k.scope.lines
    forget_inner_values(k, loop)

    # After the rows: per lane, NaN fix-ups, reduction stores, then the epilogue loops.
    k.rewrite = outer.rewrite
    k.scope = Scope([], {})
    finish = list(post)
    for n, var in accs:
        k.locals[n.name] = var
        if n.name in plan.stores:
            finish.append(k.store_line(n.name, n.buffer.layout.index(n.full_index(outer_syms)), var))
    for epilogue in plan.loops[1:]:
        finish.extend(emit_inner_loop(k, epilogue, outer, parallel_inner=False))

    rows: list[str] = []
    for d, (rsize, rsym) in enumerate(zip(inner.sizes, inner.symbols)):
        rows.append(
            "  " * d + f"for (int64_t {rsym.name} = 0; {rsym.name} < {cexpr(rsize)}; ++{rsym.name}) {{"
        )
    depth = len(inner.sizes)
    rows.append("  " * depth + "#pragma omp simd")
    rows.append("  " * depth + f"for (int64_t {xs} = {xs}_tile; {xs} < {xs}_end; ++{xs}) {{")
    rows.extend("  " * (depth + 1) + b for b in body)
    rows.append("  " * depth + "}")
    rows.extend("  " * d + "}" for d in reversed(range(depth)))

    tile_body = [
        f"const int64_t {xs}_tile = {xs}_t * {tile};",
        f"const int64_t {xs}_end = {xs}_tile + {tile} < {size} ? {xs}_tile + {tile} : {size};",
        *pre,
        *rows,
        f"for (int64_t {xs} = {xs}_tile; {xs} < {xs}_end; ++{xs}) {{",
        *("  " + b for b in finish),
        "}",
    ]
    n_tiles = -(-size // tile)
    loops = [(s, sym.name) for s, sym in zip(outer.sizes[:-1], outer.symbols[:-1])]
    loops.append((n_tiles, f"{xs}_t"))
    out: list[str] = []
    if parallel and math.prod(s for s, _ in loops) >= 2:
        out.append(
            "#pragma omp parallel for" + (f" collapse({len(loops)})" if len(loops) > 1 else "")
        )
    for d, (s, name) in enumerate(loops):
        out.append("  " * d + f"for (int64_t {name} = 0; {name} < {s}; ++{name}) {{")
    out.extend("  " * len(loops) + b for b in tile_body)
    out.extend("  " * d + "}" for d in reversed(range(len(loops))))
    return out
