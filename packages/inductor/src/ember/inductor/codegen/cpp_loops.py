"""C++ loop emission shared by the kernel skeletons: loop nests, stores, loop bodies.

``cpp.py`` (row-major kernels) and ``cpp_column.py`` (column reductions) both
build kernels from these pieces; the loop structure they emit comes from the
scheduler's plan (``KernelPlan.outer_loops``, ``Loop.ranges``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import sympy
import torch

from ..index import contiguous_strides
from ..ir import Reduction
from ..kernel_plan import Loop, SchedNode
from ..loops import MergedLoops
from ..sizes import Size
from .common import Scope, emit_pointwise, forget_inner_values, reduction_value
from .cpp_ops import (
    _OMP_CLAUSE,
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


def loop_nest(
    loops: MergedLoops,
    body: list[str],
    *,
    parallel: bool,
    simd_inner: bool,
    reductions: list[str],
    parallel_reduction: bool = False,
    before_inner: list[str] | None = None,
    specialize: list[str] | None = None,
) -> list[str]:
    """``before_inner``: lines placed inside the next-to-innermost loop, before the
    innermost one (values that do not depend on the innermost index); ``specialize``:
    masks the innermost loop is versioned on (``versioned``), where there are outer loops."""
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
        if d == depth - 1 and before_inner:
            out.extend("  " * d + b for b in before_inner)
        head = f"for (int64_t {sym.name} = 0; {sym.name} < {cexpr(size)}; ++{sym.name}) {{"
        if d == depth - 1 and depth > 1 and specialize:

            def one(lines: list[str], pragma: str = pragma, head: str = head) -> list[str]:
                return [*([pragma] if pragma else []), head, *("  " + b for b in lines), "}"]

            out.extend("  " * d + b for b in versioned(one, body, specialize))
            for d2 in reversed(range(depth - 1)):
                out.append("  " * d2 + "}")
            return out
        if pragma:
            out.append("  " * d + pragma)
        out.append("  " * d + head)
    out.extend("  " * depth + b for b in body)
    for d in reversed(range(depth)):
        out.append("  " * d + "}")
    return out


_TILE = 4096


def _tiled_loop(size: Size, var: str, body: list[str], red: str) -> list[str]:
    tile = f"{var}_tile"
    size = cexpr(size)
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


#: ``T tmpN = expr;``: one value, nothing else
_DECL = re.compile(r"^(?:const )?[A-Za-z_][\w:<>]* (tmp\d+) = ([^;{}]*);$")
#: identifiers outside number literals (``1e-05f`` has none)
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
#: a value a line writes (``tmp3 = ...``, ``tmp3 += ...``; not ``tmp3 == ...``)
_ASSIGNED = re.compile(r"\b(tmp\d+)\s*[-+*/|&^]?=(?!=)")


def hoist_invariant(
    k: CppKernel, lines: list[str], loop_vars: set[str], sizes: tuple[Size, ...]
) -> tuple[list[str], list[str]]:
    """Split a loop body into the lines that do not depend on the loop's indices (they
    can run once before the loop) and the rest.

    What it is for: an index loaded through an indirect access (an embedding row,
    ``W[idx[x0], r0]``) is the same for every ``r0``, but gcc cannot move its bounds
    check (``ember_check_index``, which writes the error flag) out of the loop, so it
    vectorizes the loop with a gather per load; computed once before the loop, the
    loads are plain vector loads (a GPT-2 embedding + layer norm kernel: 5.2 -> 1.1 us).
    A line moves when its expression reads no loop index, no value the body computes
    or assigns, and memory only through pointers the kernel never writes. Loads and
    index checks move only when the loop surely runs (static trip counts > 0): before
    an empty loop they would read or check what the loop never touches.
    """
    runs = all(isinstance(s, int | sympy.Integer) and int(s) > 0 for s in sizes)
    variant = set(loop_vars)
    for line in lines:
        if not _DECL.match(line):  # what other lines write: accumulators, masked values
            variant.update(_ASSIGNED.findall(line))
            variant.update(_DECLARED.findall(line))
    hoisted: list[str] = []
    rest: list[str] = []
    for line in lines:
        m = _DECL.match(line)
        if m is not None and _invariant(k, m.group(2), variant, runs):
            hoisted.append(line)
        else:
            rest.append(line)
            if m is not None:
                variant.add(m.group(1))
    return hoisted, rest


def _invariant(k: CppKernel, expr: str, variant: set[str], runs: bool) -> bool:
    for name in _NAME.findall(expr):
        if name in variant:
            return False
        if name.startswith(("in_", "out_", "local_")) and name not in k.readonly:
            return False
        if not runs and (name in k.readonly or name == "ember_check_index"):
            return False
    return True


#: the mask of a masked value: ``float tmp7; if (tmp5) { ... } else { ... }``
_MASKED = re.compile(r"\bif \((tmp\d+)\) \{")
#: a value declared by a line (with or without a value)
_DECLARED = re.compile(r"(?:^|[;{}] )(?:const )?[A-Za-z_][\w:<>]* (tmp\d+)(?: =|;)")
#: most masks one loop gets a copy per combination of (2**n copies); with more, one copy
#: where all are true (the interior of an image) and the loop as it was for the rest
MAX_VERSIONED_MASKS = 3


def invariant_masks(lines: list[str]) -> list[str]:
    """The masks of masked values in a loop body that the body does not compute (values
    computed before the loop: the same for every iteration), in order of first use."""
    declared = {name for line in lines for name in _DECLARED.findall(line)}
    masks: list[str] = []
    for line in lines:
        for name in _MASKED.findall(line):
            if name not in declared and name not in masks:
                masks.append(name)
    return masks


def versioned(
    loop: Callable[[list[str]], list[str]], body: list[str], masks: list[str]
) -> list[str]:
    """``loop(body)`` once per value of each mask, chosen by ``if``s on the masks before the
    loop, each copy with the mask written as a constant. A mask that does not depend on
    the loop's index (a window at the image border, a part of a ``cat`` along an outer
    dim) leaves the loads in ``if (mask)`` blocks, which gcc 12 does not vectorize on
    this machine ("no vectype for MASK_LOAD": a channels-last 3x3 max pool 0.3 ms); with
    the mask a constant, gcc removes the branch and vectorizes each copy. Past
    ``MAX_VERSIONED_MASKS`` masks, one copy runs where all are true and the loop as it
    was elsewhere."""
    if not masks:
        return loop(body)
    if len(masks) > MAX_VERSIONED_MASKS:
        inside = body
        for mask in masks:
            inside = [line.replace(f"if ({mask}) {{", "if (true) {") for line in inside]
        return [
            f"if ({' && '.join(masks)}) {{",
            *("  " + b for b in loop(inside)),
            "} else {",
            *("  " + b for b in loop(body)),
            "}",
        ]
    mask, rest = masks[0], masks[1:]
    on = [line.replace(f"if ({mask}) {{", "if (true) {") for line in body]
    off = [line.replace(f"if ({mask}) {{", "if (false) {") for line in body]
    return [
        f"if ({mask}) {{",
        *("  " + b for b in versioned(loop, on, rest)),
        "} else {",
        *("  " + b for b in versioned(loop, off, rest)),
        "}",
    ]


def emit_loop_body(k: CppKernel, outer: MergedLoops) -> list[str]:
    """Pure pointwise kernels: every node once per (outer) index. Lines that do not
    depend on the innermost index go to ``k.before_inner`` (``hoist_invariant``)."""
    k.scope = Scope([], {})
    k.rewrite = outer.rewrite
    ops = CppOps(k)
    for loop in k.plan.loops:
        for n in loop.nodes:
            emit_pointwise(k, ops, n, n.full_index(k.plan.outer_symbols))
    if len(outer.sizes) < 2:
        return k.scope.lines
    k.before_inner, body = hoist_invariant(
        k, k.scope.lines, {outer.symbols[-1].name}, outer.sizes[-1:]
    )
    k.specialize = invariant_masks(body)
    return body


def merge_inner_loops(k: CppKernel, loop: Loop, outer: MergedLoops) -> MergedLoops:
    """``loop``'s merged inner dims (from the plan); point ``k.rewrite`` at them."""
    k.rewrite = loop.rewrite(outer)
    return loop.merged()


def emit_inner_loop(k: CppKernel, loop: Loop, outer: MergedLoops, *, parallel_inner: bool) -> list[str]:
    outer_syms, inner_syms = k.plan.outer_symbols, loop.symbols
    inner = merge_inner_loops(k, loop, outer)
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
            value = reduction_value(ops, n, outer_syms, inner_syms)
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
            value = emit_pointwise(k, ops, n, n.full_index(list(outer_syms) + list(inner_syms)))
            if not loop.inner:
                results.append((n, value))
    body = k.scope.lines
    k.scope = outer_scope
    if loop.inner:
        hoisted, body = hoist_invariant(k, body, {s.name for s in inner.symbols}, inner.sizes)
        pre = hoisted + pre
    out = list(pre)
    if loop.inner:
        parallel = parallel_inner and can_simd
        masks = invariant_masks(body) if can_simd and not parallel else []

        def nest(lines: list[str]) -> list[str]:
            return loop_nest(inner, lines, parallel=parallel, simd_inner=can_simd, reductions=clauses)

        out += versioned(nest, body, masks)
    else:
        out += body
    out += post
    for n, value in results:
        if isinstance(n.buffer.data, Reduction):
            k.locals[n.name] = value
            if k.stored(n.name):
                k.rewrite = outer.rewrite
                out.append(
                    k.store_line(n.name, n.buffer.layout.index(n.full_index(outer_syms)), value)
                )
    if loop.inner:
        forget_inner_values(k, loop)
    k.rewrite = outer.rewrite
    return out


def _contig(sizes: tuple[int, ...]) -> list[int]:
    return list(contiguous_strides(sizes))
