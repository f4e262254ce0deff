"""View ops as index arithmetic: no data moves, the reader's index is rewritten."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import sympy
import torch

from ..index import FloorDiv, ModIndex, contiguous_strides
from ..ir import Index, IRNode, Layout, ReinterpretView, View, as_strided_of_buffer
from ..sizes import (
    Size,
    SizeHints,
    as_size,
    as_sizes,
    exact_divisions,
    is_static,
    product,
    provably,
)
from . import LoweringContext, as_int_list, normalize_dim, out_size, register_lowering

aten = torch.ops.aten


def _numel_fact(old: Sequence[Size], new: Sequence[Size]) -> sympy.Expr | None:
    """What a view's own precondition (equal element counts) says about its sizes: an
    expression known to be zero, with the factors that are always positive (sizes)
    removed. ``(s0, s1, s2) -> (s0, s1, 4, s2 // 4)`` gives ``s2 - 4*floor(s2/4)``."""
    diff = sympy.expand(sympy.sympify(product(old)) - product(new))
    if diff == 0:
        return None
    factored = sympy.factor_terms(diff)
    parts = sympy.Mul.make_args(factored)
    kept = [p for p in parts if not (p.is_Number or provably(p > 0))]
    return sympy.expand(sympy.Mul(*kept)) if kept else None


def _equal_products(a: Size, b: Size, fact: sympy.Expr | None) -> bool:
    d = sympy.expand(exact_divisions(sympy.sympify(a)) - exact_divisions(sympy.sympify(b)))
    return d == 0 or (fact is not None and (sympy.expand(d - fact) == 0 or sympy.expand(d + fact) == 0))


def _reshape_groups(
    old: Sequence[Size], new: Sequence[Size], hints: SizeHints
) -> list[tuple[list[int], list[int]]] | None:
    """Pair up runs of old and new dims with equal products (size-1 dims attach anywhere).

    Symbolic sizes are grouped by their hints and the groups then checked as
    expressions (using what the view's equal element counts imply): a reshape
    that only works for the sizes at hand is refused.
    """
    fact = _numel_fact(old, new) if not (is_static(old) and is_static(new)) else None
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(old) or j < len(new):
        gi: list[int] = []
        gj: list[int] = []
        pi: Size = 1
        pj: Size = 1
        if i < len(old):
            gi.append(i)
            pi = pi * old[i]
            i += 1
        if j < len(new):
            gj.append(j)
            pj = pj * new[j]
            j += 1
        while hints.hint(pi) != hints.hint(pj):
            if hints.hint(pi) < hints.hint(pj) and i < len(old):
                gi.append(i)
                pi = pi * old[i]
                i += 1
            elif hints.hint(pj) < hints.hint(pi) and j < len(new):
                gj.append(j)
                pj = pj * new[j]
                j += 1
            else:
                return None
        if not _equal_products(pi, pj, fact):
            return None
        groups.append((gi, gj))
    return groups


def reshape(x: IRNode, new_size: Sequence[Size], hints: SizeHints | None = None) -> IRNode:
    old = x.get_size()
    new = as_sizes(new_size)
    hints = hints if hints is not None else SizeHints()
    if old == new:
        return x
    strided = as_strided_of_buffer(x)
    if (
        strided is not None
        and strided.layout.is_contiguous()
        or (
            strided is not None
            and Layout(old, strided.layout.stride, x.get_dtype()).is_contiguous()
        )
    ):
        assert strided is not None
        layout = Layout(new, contiguous_strides(new), x.get_dtype(), strided.layout.offset)
        return ReinterpretView(strided.base, layout)
    if any(n == 0 for n in (*old, *new)):
        # no elements (a zero-size weight viewed as (1, 0), fuzz seed 354): nothing is
        # ever loaded, and the size groups below cannot pair a 0 with anything
        return View(x, new, lambda idx: [sympy.Integer(0)] * len(old))
    groups = _reshape_groups(old, new, hints)
    if groups is None:
        raise ValueError(f"cannot view size {old} as {new}")

    def reindex(idx: Index) -> Index:
        out: list[sympy.Expr] = [sympy.Integer(0)] * len(old)
        for gi, gj in groups:
            flat: sympy.Expr = sympy.Integer(0)
            for k, s in zip(gj, contiguous_strides([new[j] for j in gj])):
                flat = flat + idx[k] * s
            if len(gi) == 1:
                out[gi[0]] = flat
                continue
            for k, s in zip(gi, contiguous_strides([old[i] for i in gi])):
                out[k] = ModIndex(FloorDiv(flat, s), old[k]) if old[k] != 1 else sympy.Integer(0)
        return out

    return View(x, new, reindex)


@register_lowering(
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.view_copy.default
)
def _view(ctx: LoweringContext, node: torch.fx.Node, x: IRNode, size: Any) -> IRNode:
    return reshape(x, out_size(node), ctx.hints)


def permute(x: IRNode, dims: Sequence[int]) -> IRNode:
    ndim = len(x.get_size())
    dims = [normalize_dim(d, ndim) for d in dims]
    if dims == list(range(ndim)):
        return x
    size = tuple(x.get_size()[d] for d in dims)

    def reindex(idx: Index) -> Index:
        out: list[sympy.Expr] = [sympy.Integer(0)] * ndim
        for j, d in enumerate(dims):
            out[d] = idx[j]
        return out

    return View(x, size, reindex)


@register_lowering(aten.permute.default)
def _permute(ctx: LoweringContext, node: torch.fx.Node, x: IRNode, dims: Any) -> IRNode:
    return permute(x, as_int_list(dims))


@register_lowering(aten.transpose.int)
def _transpose(ctx: LoweringContext, node: torch.fx.Node, x: IRNode, a: int, b: int) -> IRNode:
    ndim = len(x.get_size())
    if ndim == 0:
        return x
    dims = list(range(ndim))
    a, b = normalize_dim(a, ndim), normalize_dim(b, ndim)
    dims[a], dims[b] = dims[b], dims[a]
    return permute(x, dims)


@register_lowering(aten.t.default)
def _t(ctx: LoweringContext, node: torch.fx.Node, x: IRNode) -> IRNode:
    return x if len(x.get_size()) < 2 else permute(x, [1, 0])


def expand(x: IRNode, size: Sequence[Size]) -> IRNode:
    xsize = x.get_size()
    size = tuple(
        xsize[k - (len(size) - len(xsize))] if s == -1 else as_size(s) for k, s in enumerate(size)
    )
    if size == xsize:
        return x
    lead = len(size) - len(xsize)

    def reindex(idx: Index) -> Index:
        return [
            sympy.Integer(0) if xs == 1 and size[lead + k] != 1 else idx[lead + k]
            for k, xs in enumerate(xsize)
        ]

    return View(x, size, reindex)


@register_lowering(aten.expand.default)
def _expand(
    ctx: LoweringContext, node: torch.fx.Node, x: IRNode, size: Any, *, implicit: bool = False
) -> IRNode:
    return expand(x, out_size(node))


def slice_(x: IRNode, dim: int, start: Size, step: int, length: Size) -> IRNode:
    size = list(x.get_size())
    size[dim] = length

    def reindex(idx: Index) -> Index:
        out = list(idx)
        out[dim] = start + idx[dim] * step
        return out

    return View(x, tuple(size), reindex)


@register_lowering(aten.slice.Tensor)
def _slice(
    ctx: LoweringContext,
    node: torch.fx.Node,
    x: IRNode,
    dim: int = 0,
    start: Any = None,
    end: Any = None,
    step: int = 1,
) -> IRNode:
    dim = normalize_dim(dim, len(x.get_size()))
    n = x.get_size()[dim]
    length = out_size(node)[dim]
    begin = _slice_start(start, n)
    if begin is None:
        return ctx.fallback(node, "slice with a start that may be out of range for some sizes")  # type: ignore[no-any-return]
    if begin == 0 and step == 1 and length == n:
        return x
    return slice_(x, dim, begin, step, length)


def _slice_start(start: Any, n: Size) -> Size | None:
    """Where a slice starts (``start`` clamped to ``[0, n]`` as Python does), or None when
    that depends on the sizes (a symbolic bound that is not provably in range)."""
    if start is None:
        return 0
    if isinstance(start, int) and isinstance(n, int):
        return slice(start, None).indices(n)[0]
    begin = as_size(start + n) if provably(sympy.sympify(start) < 0) else as_size(start)
    if provably(sympy.sympify(begin) >= 0) and provably(sympy.sympify(begin) <= n):
        return begin
    return None


def select(x: IRNode, dim: int, index: Size) -> IRNode:
    size = list(x.get_size())
    n = size.pop(dim)
    if isinstance(index, int) and index < 0:
        index = index + n if isinstance(n, int) else as_size(index + n)

    def reindex(idx: Index) -> Index:
        out = list(idx)
        out.insert(dim, sympy.sympify(index))
        return out

    return View(x, tuple(size), reindex)


@register_lowering(aten.select.int)
def _select(ctx: LoweringContext, node: torch.fx.Node, x: IRNode, dim: int, index: int) -> IRNode:
    return select(x, normalize_dim(dim, len(x.get_size())), index)


def squeeze_to(x: IRNode, keep: Sequence[bool]) -> IRNode:
    """Drop the size-1 dims whose ``keep`` flag is False."""
    size = tuple(s for s, k in zip(x.get_size(), keep) if k)

    def reindex(idx: Index) -> Index:
        it = iter(idx)
        return [next(it) if k else sympy.Integer(0) for k in keep]

    return View(x, size, reindex)


@register_lowering(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _squeeze(ctx: LoweringContext, node: torch.fx.Node, x: IRNode, dims: Any = None) -> IRNode:
    size = x.get_size()
    if len(size) == 0:
        return x
    chosen = (
        set(range(len(size)))
        if dims is None
        else {normalize_dim(d, len(size)) for d in as_int_list(dims)}
    )
    keep = [not (k in chosen and s == 1) for k, s in enumerate(size)]
    return x if all(keep) else squeeze_to(x, keep)


def unsqueeze(x: IRNode, dim: int) -> IRNode:
    size = list(x.get_size())
    size.insert(dim, 1)

    def reindex(idx: Index) -> Index:
        out = list(idx)
        del out[dim]
        return out

    return View(x, tuple(size), reindex)


@register_lowering(aten.unsqueeze.default)
def _unsqueeze(ctx: LoweringContext, node: torch.fx.Node, x: IRNode, dim: int) -> IRNode:
    return unsqueeze(x, normalize_dim(dim, len(x.get_size()) + 1))


@register_lowering(aten.split.Tensor, aten.split_with_sizes.default)
def _split(
    ctx: LoweringContext, node: torch.fx.Node, x: IRNode, sizes: Any, dim: int = 0
) -> list[IRNode]:
    dim = normalize_dim(dim, len(x.get_size()))
    outs: list[IRNode] = []
    start: Size = 0
    for meta in node.meta["val"]:
        length = as_size(meta.shape[dim])
        outs.append(slice_(x, dim, start, 1, length))
        start = start + length if isinstance(start, int) and isinstance(length, int) else as_size(
            start + length)
    return outs


@register_lowering(aten.unbind.int)
def _unbind(ctx: LoweringContext, node: torch.fx.Node, x: IRNode, dim: int = 0) -> list[IRNode]:
    dim = normalize_dim(dim, len(x.get_size()))
    return [select(x, dim, i) for i in range(len(node.meta["val"]))]


@register_lowering(operator.getitem)
def _getitem(ctx: LoweringContext, node: torch.fx.Node, seq: Any, i: int) -> Any:
    return seq[i]


@register_lowering(aten.as_strided.default)
def _as_strided(
    ctx: LoweringContext,
    node: torch.fx.Node,
    x: IRNode,
    size: Any,
    stride: Any,
    storage_offset: Any = None,
) -> IRNode:
    from ..ir import InputBuffer

    base = ctx.realize(x, _traced_dense_stride(node.args[0], x))
    root = base.base if isinstance(base, ReinterpretView) else base
    if isinstance(root, InputBuffer):
        # Storage offsets of caller tensors are not known when compiling.
        return ctx.fallback(node, "as_strided of a graph input")  # type: ignore[no-any-return]
    offset = base.layout.offset if storage_offset is None else as_size(storage_offset)
    layout = Layout(tuple(as_int_list(size)), tuple(as_int_list(stride)), x.get_dtype(), offset)
    return ReinterpretView(root, layout)


def _traced_dense_stride(arg: Any, x: IRNode) -> tuple[int, ...] | None:
    """The strides ``as_strided``'s argument had when traced, where ``x`` (its lowered value,
    not a view) must be stored in them: ``as_strided`` reads storage through strides that
    assume that layout, and ember realizes values in its own order (contiguous, or a
    convolution's output following its input). ``None`` where nothing needs changing."""
    if isinstance(x, (View, ReinterpretView)) or not isinstance(arg, torch.fx.Node):
        return None
    val = arg.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.storage_offset() != 0:
        return None
    size, stride = tuple(val.shape), tuple(val.stride())
    if not all(isinstance(v, int) for v in (*size, *stride)):
        return None
    dims = sorted((st, sz) for sz, st in zip(size, stride) if sz != 1)
    expected = 1
    for st, sz in dims:  # dense: a permutation of contiguous strides
        if st != expected:
            return None
        expected *= sz
    layout = getattr(x, "layout", None)
    if layout is not None and all(
        st == want for sz, st, want in zip(size, layout.stride, stride) if sz != 1
    ):
        return None  # already stored so
    return stride
