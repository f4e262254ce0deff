"""Triton code generation for one ``KernelPlan``: the kernel skeleton around ``TritonOps``.

Three skeletons, chosen from the plan:

- **pointwise** (1-D blocks): the plan's merged outer loops flattened into
  ``xindex``, ``XBLOCK`` elements per program, masked at the end;
- **tiled** (2-D blocks): when some access runs contiguously along an outer dim
  other than the last (a transpose), ``[YBLOCK, XBLOCK]`` tiles, ``y`` over the
  leading dims and ``x`` over the last;
- **reduction**: ``XBLOCK`` outer rows per program; each inner ``Loop`` of the
  plan iterates its (merged, flattened) range in ``RBLOCK`` chunks
  (*looped*), or as one block when every inner range has at most
  ``PERSISTENT_RNUMEL`` elements (*persistent*: values stay in registers between
  the plan's loops). Reduction epilogues (the plan's loops without an inner
  range) and several outputs share the kernel.

Sizes come from the plan (its merged loops); the element counts are kernel
arguments, so the launch grid is computed from sizes at call time. Indices are
int32 unless an address or element count can reach 2**31.

Symbolic sizes (ADR 0050): the size symbols the body reads (``s0``, a stride
``s3``) are kernel arguments after the element counts, and the wrapper passes
the counts as expressions of them (``s0*s1``). What only a size can decide is
decided per call, from *variants* of one kernel in one module: ``kernel`` (looped
over ``RBLOCK`` chunks, or pointwise) and ``kernel_persistent`` (the whole inner
range in one block, ``RBLOCK`` the next power of two of it), each with an
``_i64`` twin where an address can reach 2**31 at some sizes but not others.
The launcher picks the variant and the block sizes from the call's element
counts rounded up to powers of two (a size bucket), so a new size never
generates or recompiles anything ember owns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import sympy
import torch

from ..index import affine_coefficients, upper_bound
from ..kernel_plan import KernelPlan, Loop, SchedNode
from ..sizes import Size, as_size, product
from .backend import KernelSource
from .common import Scope, emit_pointwise, forget_inner_values, reduction_value, size_args
from .pysize import pyexpr
from .triton_configs import PERSISTENT_RNUMEL
from .triton_ops import TritonKernel, TritonOps, TVar, texpr
from .triton_reduce import ReductionCode, reduce_block, reduce_loop, reduce_trivial

_HEADER = """import triton
import triton.language as tl
from triton.language.extra import libdevice
"""


def _numel(sizes: Sequence[Size]) -> Size:
    if all(isinstance(s, int) for s in sizes):
        return math.prod(sizes)
    return product(sizes)


def _size_text(size: Size) -> str:
    """A size as kernel source: an int, or an expression of the size arguments."""
    return str(size) if isinstance(size, int) else texpr(sympy.sympify(size))


def _decompose(var: str, syms: Sequence[sympy.Symbol], sizes: Sequence[Size]) -> list[str]:
    """Lines defining each loop symbol from the flat lane index ``var`` (row-major)."""
    lines = []
    inner: Size = 1
    for k in reversed(range(len(syms))):
        expr = var if inner == 1 else f"({var} // {_size_text(inner)})"
        if k > 0:
            expr = f"({expr} % {_size_text(sizes[k])})"
        lines.append(f"{syms[k].name} = {expr}")
        inner = inner * sizes[k]
        if not isinstance(inner, int):
            inner = as_size(inner)
    return list(reversed(lines))


class _Gen:
    """Emits one kernel; ``function()`` assembles its signature, header and body."""

    def __init__(
        self,
        plan: KernelPlan,
        dtypes: Mapping[str, torch.dtype],
        name: str,
        persistent: bool | None = None,
    ) -> None:
        self.plan = plan
        #: a reduction's persistence when its inner ranges are symbolic (one variant each)
        self.force_persistent = persistent
        self.name = name
        pointers = {n: (f"in_{n}", dtypes[n]) for n in plan.loads}
        pointers.update({n: (f"out_{n}", dtypes[n]) for n in plan.stores})
        self.k = TritonKernel(pointers=pointers, stores=set(plan.stores))
        self.ops = TritonOps(self.k)
        self.outer = plan.merged_outer()
        self.numels: list[tuple[str, Size]] = []
        self.blocks: list[str] = ["XBLOCK"]
        self.header: list[str] = []
        self.kind = "pointwise"
        self.persistent = False
        self.rblock = 0

    # -- shared pieces --------------------------------------------------------------------
    def _outer_lanes(self, var: str, syms: Sequence[sympy.Symbol], sizes: Sequence[Size], mask: str) -> None:
        self.header.extend(_decompose(var, syms, sizes))
        for s, n in zip(syms, sizes):
            self.k.symbol_masks[s] = mask
            self.k.ranges[s] = n

    def _flat_x(self, sizes: Sequence[Size], syms: Sequence[sympy.Symbol], shape: str) -> None:
        """All outer dims flattened into ``xindex``: ``XBLOCK`` consecutive elements per program
        (``shape``: ``""`` for a 1-D block, ``"[:, None]"`` for the rows of a reduction)."""
        self.numels = [("xnumel", _numel(sizes))]
        self.header += [
            "xoffset = tl.program_id(0) * XBLOCK",
            f"xindex = xoffset + tl.arange(0, XBLOCK){shape}",
            "xmask = xindex < xnumel",
        ]
        self._outer_lanes("xindex", syms, sizes, "xmask")

    def _emit_pointwise_node(self, n: SchedNode, idx: list[sympy.Expr]) -> None:
        emit_pointwise(self.k, self.ops, n, idx)

    def index_bounds(self) -> list[Size] | None:
        """The largest element count and address of every access (None: one is unbounded,
        so the kernel indexes with int64 at every size)."""
        bounds: list[Size] = [v for _, v in self.numels]
        for e in self.k.addresses:
            bound = upper_bound(e, self.k.ranges)
            if bound is None:
                return None
            bounds.append(bound)
        return bounds

    def _int64(self) -> bool | list[Size]:
        """Whether indices need int64: True, False, or the symbolic bounds that decide it
        per call (the kernel then has an ``_i64`` variant)."""
        limit = 2**31 - 1
        bounds = self.index_bounds()
        if bounds is None:
            return True
        static = [b for b in bounds if isinstance(b, int)]
        symbolic = [b for b in bounds if not isinstance(b, int)]
        if any(b > limit for b in static):
            return True
        return symbolic or False

    # -- pointwise ------------------------------------------------------------------------
    def _tiled(self) -> bool:
        """Some access is contiguous along an outer dim other than the last (a transpose)."""
        syms = self.outer.symbols
        if len(syms) < 2:
            return False
        n_outer = len(self.plan.outer)
        for n in self.plan.nodes:
            loads, store = n.accesses(n_outer)
            for e in [*(e for _, e in loads), store]:
                fit = affine_coefficients(self.outer.rewrite(e), syms)
                if fit is not None and fit[0][syms[-1]] not in (0, 1) and 1 in (fit[0][s] for s in syms[:-1]):
                    return True
        return False

    def pointwise(self) -> None:
        sizes, syms = self.outer.sizes, self.outer.symbols
        k = self.k
        if self._tiled():
            self.kind = "tiled"
            self.blocks = ["YBLOCK", "XBLOCK"]
            self.numels = [("ynumel", _numel(sizes[:-1])), ("xnumel", sizes[-1])]
            self.header += [
                "xtiles = tl.cdiv(xnumel, XBLOCK)",
                "pid = tl.program_id(0)",
                "xoffset = (pid % xtiles) * XBLOCK",
                "yoffset = (pid // xtiles) * YBLOCK",
                "xindex = xoffset + tl.arange(0, XBLOCK)[None, :]",
                "yindex = yoffset + tl.arange(0, YBLOCK)[:, None]",
                "xmask = xindex < xnumel",
                "ymask = yindex < ynumel",
            ]
            self._outer_lanes("yindex", syms[:-1], sizes[:-1], "ymask")
            self._outer_lanes("xindex", syms[-1:], sizes[-1:], "xmask")
            k.lane_mask, k.lane_index = "ymask & xmask", "(yindex + xindex)"
        else:
            self._flat_x(sizes, syms, "")
        k.rewrite = self.outer.rewrite
        for loop in self.plan.loops:
            for n in loop.nodes:
                self._emit_pointwise_node(n, n.full_index(self.plan.outer_symbols))

    # -- reductions ------------------------------------------------------------------------
    def reduction(self) -> None:
        self.kind = "reduction"
        k = self.k
        self._flat_x(self.outer.sizes, self.outer.symbols, "[:, None]")
        groups: dict[tuple[int, ...], int] = {}
        for loop in self.plan.loops:
            if loop.inner:
                groups.setdefault(loop.merged().sizes, len(groups))
        for g_sizes, g in groups.items():
            self.numels.append((f"r{g}numel", _numel(g_sizes)))
        rnumels = [_numel(s) for s in groups]
        if all(isinstance(n, int) for n in rnumels):
            widest = max((int(n) for n in rnumels), default=1)
            self.persistent = widest <= PERSISTENT_RNUMEL
            if self.persistent:
                self.rblock = max(16, 1 << (widest - 1).bit_length())
        else:  # one variant per choice; RBLOCK of the persistent one is chosen per call
            self.persistent = bool(self.force_persistent)
        self.blocks = ["XBLOCK", "RBLOCK"]
        outer_scope = k.scope
        group_scopes: dict[int, Scope] = {}
        group_locals: dict[int, dict[str, TVar]] = {}
        stored_before: set[str] = set()
        for loop in self.plan.loops:
            if not loop.inner:
                self._outer_loop(loop)
            else:
                g = groups[loop.merged().sizes]
                if self.persistent:
                    scope = group_scopes.setdefault(g, Scope(outer_scope.lines, {}, outer_scope))
                    self._inner_loop(loop, g, scope, group_locals.setdefault(g, {}))
                else:
                    if any(n.reads & stored_before for n in loop.nodes):
                        # earlier chunks of this program wrote what this loop reads
                        k.line("tl.debug_barrier()")
                    self._inner_loop(loop, g, Scope([], {}, outer_scope), None)
            stored_before.update(n.name for n in loop.nodes if n.name in self.plan.stores)
            k.scope = outer_scope

    def _outer_loop(self, loop: Loop) -> None:
        """Statements once per outer row (epilogues; reductions over nothing)."""
        k = self.k
        k.rewrite = loop.rewrite(self.outer)
        k.lane_mask, k.lane_index = "xmask", "xindex"
        for n in loop.nodes:
            if n.is_reduction:
                value = self._reduction_value(n, [])
                self._finish(n, reduce_trivial(self.k, n, value))
            else:
                self._emit_pointwise_node(n, n.full_index(self.plan.outer_symbols))

    def _reduction_value(self, n: SchedNode, inner_syms: Sequence[sympy.Symbol]) -> TVar:
        return reduction_value(self.ops, n, self.plan.outer_symbols, inner_syms)

    def _finish(self, n: SchedNode, result: TVar) -> None:
        """A reduction's result is in registers for the rest of the kernel; store it if needed."""
        k = self.k
        k.locals[n.name] = result
        if n.name in self.plan.stores:
            k.rewrite = self.outer.rewrite
            k.lane_mask, k.lane_index = "xmask", "xindex"
            k.store(n.name, n.buffer.layout.index(n.full_index(self.plan.outer_symbols)), result)

    def _inner_loop(
        self, loop: Loop, g: int, scope: Scope, kept: dict[str, TVar] | None
    ) -> None:
        """One of the plan's inner loops: chunks of ``RBLOCK`` (looped) or one block."""
        k = self.k
        outer_scope = k.scope
        inner = loop.merged()
        rvar, rmask, rnumel = f"r{g}index", f"r{g}mask", f"r{g}numel"
        k.scope = scope
        start = "0" if self.persistent else f"r{g}offset"
        k.line(f"{rvar} = {start} + tl.arange(0, RBLOCK)[None, :]")
        k.line(f"{rmask} = {rvar} < {rnumel}")
        for text in _decompose(rvar, inner.symbols, inner.sizes):
            k.line(text)
        for s, size in zip(inner.symbols, inner.sizes):
            k.symbol_masks[s] = rmask
            k.ranges[s] = size
        k.rewrite = loop.rewrite(self.outer)
        k.lane_mask, k.lane_index = f"xmask & {rmask}", f"(xindex + {rvar})"
        if kept:
            k.locals.update(kept)
        codes: list[tuple[SchedNode, ReductionCode]] = []
        for n in loop.nodes:
            if n.is_reduction:
                value = self._reduction_value(n, loop.symbols)
                make = reduce_block if self.persistent else reduce_loop
                codes.append((n, make(k, n, value, rvar, rnumel)))
            else:
                self._emit_pointwise_node(n, n.full_index(self.plan.outer_symbols + loop.symbols))
                if kept is not None:
                    kept[n.name] = k.locals[n.name]
        forget_inner_values(k, loop)
        body = scope.lines
        k.scope = outer_scope
        if not self.persistent:
            for _, code in codes:
                outer_scope.lines.extend(code.before)
            outer_scope.lines.append(f"for r{g}offset in range(0, {rnumel}, RBLOCK):")
            outer_scope.lines.extend("    " + ln for ln in body)
        for n, code in codes:
            outer_scope.lines.extend(code.after)
            self._finish(n, code.result)

    # -- assembly --------------------------------------------------------------------------
    def body(self, int64: bool) -> list[str]:
        """The kernel's statements, indexing with int64 or int32 lanes."""
        header, lines = list(self.header), list(self.k.scope.lines)
        if int64:
            header = [ln.replace("tl.program_id(0)", "tl.program_id(0).to(tl.int64)") for ln in header]
            lines = [
                ln.replace("+ tl.arange(0, RBLOCK)", "+ tl.arange(0, RBLOCK).to(tl.int64)")
                for ln in lines
            ]
        return header + lines

    def function(self, name: str, int64: bool, sizes: Sequence[str]) -> list[str]:
        """``@triton.jit def name(...)``: pointers, error flag, element counts, size
        arguments, block sizes."""
        params = [ptr for ptr, _ in self.k.pointers.values()]
        if self.k.index_check:
            params.append("err_ptr")
        params += [name for name, _ in self.numels]
        params += list(sizes)
        params += [f"{b}: tl.constexpr" for b in self.blocks]
        lines = ["", "@triton.jit", f"def {name}({', '.join(params)}):"]
        return lines + ["    " + ln for ln in self.body(int64)]


def _module(gens: Sequence[tuple[str, _Gen, bool]], sizes: Sequence[str]) -> str:
    """One module of ``@triton.jit`` functions: the helpers, then each (name, kernel, int64)."""
    lines = [_HEADER]
    helpers: dict[str, str] = {}
    for _, gen, _ in gens:
        helpers.update(gen.k.helpers)
    for helper in helpers.values():
        lines += ["", "@triton.jit", helper]
    for name, gen, int64 in gens:
        lines += gen.function(name, int64, sizes)
    return "\n".join(lines) + "\n"


def _size_args(plan: KernelPlan, gens: Sequence[_Gen]) -> list[str]:
    """The size symbols the kernels' bodies read (kernel arguments after the counts)."""
    text = "\n".join("\n".join(g.body(False)) for g in gens)
    return size_args(plan, text)


def _bound_text(bounds: Sequence[Size]) -> str:
    """The Python expression of the largest of ``bounds`` (the wrapper evaluates it per call)."""
    texts = sorted({pyexpr(sympy.sympify(b)) for b in bounds})
    return texts[0] if len(texts) == 1 else f"max({', '.join(texts)})"


def generate_kernel(
    plan: KernelPlan, dtypes: Mapping[str, torch.dtype], *, device_asserts: bool = False
) -> KernelSource:
    """Triton source of one kernel (a module defining ``kernel``) and its launch data.

    ``device_asserts``: indirect indices are checked by ``tl.device_assert`` (compiled GPU
    kernels, launched with ``debug=True``) rather than an error flag read after the kernel
    (Triton's interpreter; a host sync on a GPU)."""
    def emit(persistent: bool | None) -> _Gen:
        gen = _Gen(plan, dtypes, "kernel", persistent)
        gen.k.device_asserts = device_asserts
        if plan.is_pointwise:
            gen.pointwise()
        else:
            gen.reduction()
        return gen

    gen = emit(False)
    numels = [v for _, v in gen.numels]
    symbolic = not all(isinstance(v, int) for v in numels)
    # looped and persistent variants where a symbolic inner range decides between them
    gens = [("kernel", gen)]
    if gen.kind == "reduction" and not all(isinstance(v, int) for v in numels[1:]):
        gens.append(("kernel_persistent", emit(True)))
    sizes = _size_args(plan, [g for _, g in gens])
    int64 = gen._int64()
    variants: list[tuple[str, _Gen, bool]] = []
    for name, g in gens:
        if isinstance(int64, list):  # decided per call from the sizes
            variants += [(name, g, False), (f"{name}_i64", g, True)]
        else:
            variants.append((name, g, int64))
    src = _module(variants, sizes)
    meta: dict[str, Any] = {
        "kind": gen.kind,
        "numels": [v if isinstance(v, int) else pyexpr(v) for v in numels],
        "n_tensors": len(plan.args),
        "persistent": gen.persistent,
        "rblock": gen.rblock,
        "index_check": gen.k.index_check,
        "asserts": gen.k.asserts,
    }
    if symbolic or sizes:
        meta["symbolic"] = True
        meta["numel_hints"] = [plan.hints.hint(v) for v in numels]
        by_name = {sym.name: v for sym, v in plan.hints.hints.items()}
        meta["size_hints"] = [by_name.get(n, 2) for n in sizes]
        meta["variants"] = [name for name, _, _ in variants]
        if isinstance(int64, list):
            meta["index_bound"] = _bound_text(int64)
            meta["index_bound_hint"] = max(plan.hints.hint(b) for b in int64)
    return KernelSource(src, plan.args, meta, sizes)


__all__ = ["PERSISTENT_RNUMEL", "generate_kernel"]
