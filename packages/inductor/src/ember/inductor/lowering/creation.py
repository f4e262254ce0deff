"""Ops that create or assemble tensors: full/arange, cat/stack/pad, and gathers.

Loads that may fall outside an input (cat, pad) are wrapped in
``ops.masked`` so no backend reads out of bounds; loads through an index
tensor (gather, embedding, index) turn the loaded value into an index symbol
with ``ops.indirect_indexing``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
import torch

from ..index import index_symbols
from ..ir import Index, IRNode, Pointwise, View, as_strided_of_buffer
from ..ops_handler import DepsOps, OpsHandler
from ..sizes import Size, as_size, provably
from . import (
    LoweringContext,
    as_int_list,
    broadcast_loader,
    normalize_dim,
    out_dtype,
    out_size,
    register_lowering,
    scalar_value,
)
from .views import unsqueeze

aten = torch.ops.aten


def _full(size: Sequence[Size], value: Any, dtype: torch.dtype) -> Pointwise:
    return Pointwise(tuple(size), dtype, lambda idx, ops: scalar_value(ops, value, dtype))


@register_lowering(aten.full.default)
def _full_lower(
    ctx: LoweringContext, node: torch.fx.Node, size: Any, value: Any, **kwargs: Any
) -> Pointwise:
    return _full(out_size(node), value, out_dtype(node))


@register_lowering(aten.zeros.default, aten.ones.default)
def _zeros(ctx: LoweringContext, node: torch.fx.Node, size: Any, **kwargs: Any) -> Pointwise:
    return _full(out_size(node), 0 if node.target is aten.zeros.default else 1, out_dtype(node))


@register_lowering(aten.full_like.default, aten.zeros_like.default, aten.ones_like.default)
def _full_like(ctx: LoweringContext, node: torch.fx.Node, x: Any, *args: Any, **kwargs: Any) -> Any:
    if kwargs.get("memory_format") not in (None, torch.preserve_format, torch.contiguous_format):
        return ctx.fallback(node, "*_like with an explicit memory format")
    if node.target is aten.full_like.default:
        value = args[0]
    else:
        value = 0 if node.target is aten.zeros_like.default else 1
    return _full(out_size(node), value, out_dtype(node))


@register_lowering(aten.scalar_tensor.default)
def _scalar_tensor(
    ctx: LoweringContext, node: torch.fx.Node, value: Any, **kwargs: Any
) -> Pointwise:
    return _full((), value, out_dtype(node))


@register_lowering(aten.arange.start_step, aten.arange.start, aten.arange.default)
def _arange(ctx: LoweringContext, node: torch.fx.Node, *args: Any, **kwargs: Any) -> Pointwise:
    start: Any = 0
    step: Any = 1
    if node.target is aten.arange.default:
        (_end,) = args[:1]
    elif node.target is aten.arange.start:
        start = args[0]
    else:
        start, step = args[0], args[2] if len(args) > 2 else kwargs.get("step", 1)
    dtype = out_dtype(node)
    size = out_size(node)
    if not dtype.is_floating_point:
        first, stride = _int_or_size(start), _int_or_size(step)
        return Pointwise(
            size, dtype, lambda idx, ops: ops.index_expr(first + idx[0] * stride, dtype)
        )

    def inner(idx: Index, ops: OpsHandler) -> Any:
        i = ops.index_expr(idx[0], torch.float64)
        v = ops.add(
            _float_value(ops, start),
            ops.mul(i, _float_value(ops, step)),
        )
        return ops.to_dtype(v, dtype)

    return Pointwise(size, dtype, inner)


def _int_or_size(value: Any) -> Any:
    return value if isinstance(value, sympy.Basic) else int(value)


def _float_value(ops: OpsHandler, value: Any) -> Any:
    if isinstance(value, sympy.Basic):
        return ops.index_expr(value, torch.float64)
    return ops.constant(float(value), torch.float64)


def cat(xs: Sequence[IRNode], dim: int, size: tuple[Size, ...], dtype: torch.dtype) -> Pointwise:
    parts: list[tuple[Size, Size, Any, IRNode]] = []
    start: Size = 0
    for x in xs:
        length = x.get_size()[dim] if len(x.get_size()) else 0
        if length != 0:
            parts.append((start, as_size(start + length), x.make_loader(), x))
        start = as_size(start + length)

    def inner(idx: Index, ops: OpsHandler) -> Any:
        result: Any = None
        for lo, hi, load, x in reversed(parts):
            shifted = list(idx)
            shifted[dim] = idx[dim] - lo

            def body(_load: Any = load, _idx: Any = shifted, _x: IRNode = x) -> Any:
                v = _load(_idx, ops)
                return v if _x.get_dtype() == dtype else ops.to_dtype(v, dtype)

            if result is None:
                if lo == 0:
                    result = body()
                else:  # masked too: its loads at idx - lo must not run for earlier parts
                    # (an indirect load's bounds check raised there: fuzz seed 4630)
                    after = ops.ge(ops.index_expr(idx[dim], torch.int64),
                                   scalar_value(ops, lo, torch.int64))
                    result = ops.masked(after, body, 0, dtype)
                continue
            at = ops.index_expr(idx[dim], torch.int64)
            inside = ops.lt(at, scalar_value(ops, hi, torch.int64))
            # the load runs only inside [lo, hi): with ``< hi`` alone it read before its
            # input for the positions of earlier parts (the select discarded the value, but
            # the read was out of bounds, and gcc's vectorized masked loads made it a wrong
            # result: swin's patch merging)
            mine = inside if lo == 0 else ops.logical_and(
                ops.ge(at, scalar_value(ops, lo, torch.int64)), inside)
            result = ops.where(inside, ops.masked(mine, body, 0, dtype), result)
        return result if result is not None else ops.constant(0, dtype)

    return Pointwise(size, dtype, inner)


#: a part with more ops than this is stored before a select over parts reads it
_PART_OPS = 24


def _computed_once(ctx: LoweringContext, x: IRNode) -> IRNode:
    """``x``, stored first where its body is costly (a transcendental op, or more than
    ``_PART_OPS`` ops). For the parts of a select over positions (``cat``,
    ``select_scatter``): inlined, every part's body was computed at every position and
    the select kept one. The loop of a recurrence writing ``out[:, t]`` per step (HF
    RWKV's CPU attention) computed all 16 steps' exps for each element: O(T^2)."""
    if not isinstance(x, Pointwise | View) or (
        isinstance(x, View) and as_strided_of_buffer(x) is not None
    ):
        return x
    deps = DepsOps()
    try:
        x.make_loader()(index_symbols("c", len(x.get_size())), deps)
    except Exception:  # a loader that needs more than loads and arithmetic
        return x
    if deps.num_heavy or deps.num_ops > _PART_OPS or deps.num_masked:
        return ctx.realize(x)
    return x


@register_lowering(aten.select_scatter.default)
def _select_scatter(
    ctx: LoweringContext, node: torch.fx.Node, x: IRNode, src: IRNode, dim: int, index: Any
) -> IRNode:
    """``x`` with ``src`` written at ``index`` of ``dim``: a select by position whose
    ``src`` is read only there (masked) and computed once (``_computed_once``)."""
    size, dtype = out_size(node), out_dtype(node)
    dim = normalize_dim(dim, len(size))
    at = _int_or_size(index)
    if isinstance(at, int) and at < 0:
        at += int(size[dim])
    src = _computed_once(ctx, src)
    load_x, load_src = x.make_loader(), src.make_loader()

    def inner(idx: Index, ops: OpsHandler) -> Any:
        hit = ops.eq(ops.index_expr(idx[dim], torch.int64), scalar_value(ops, at, torch.int64))

        def body() -> Any:
            v = load_src([*idx[:dim], *idx[dim + 1 :]], ops)
            return v if src.get_dtype() == dtype else ops.to_dtype(v, dtype)

        old = load_x(idx, ops)
        old = old if x.get_dtype() == dtype else ops.to_dtype(old, dtype)
        return ops.where(hit, ops.masked(hit, body, 0, dtype), old)

    return Pointwise(size, dtype, inner)


@register_lowering(aten.cat.default)
def _cat(ctx: LoweringContext, node: torch.fx.Node, xs: Any, dim: int = 0) -> IRNode:
    size = out_size(node)
    tensors = [
        x for x in xs if not (len(x.get_size()) == 1 and x.get_size()[0] == 0 and len(size) != 1)
    ]
    dim = normalize_dim(dim, len(size))
    if (
        len(tensors) == 1
        and tensors[0].get_size() == size
        and tensors[0].get_dtype() == out_dtype(node)
    ):
        result: IRNode = tensors[0]
        return result
    if len(tensors) > 1:
        tensors = [_computed_once(ctx, x) for x in tensors]
    return cat(tensors, dim, size, out_dtype(node))


@register_lowering(aten.stack.default)
def _stack(ctx: LoweringContext, node: torch.fx.Node, xs: Any, dim: int = 0) -> IRNode:
    size = out_size(node)
    dim = normalize_dim(dim, len(size))
    parts = [_computed_once(ctx, x) for x in xs] if len(xs) > 1 else list(xs)
    return cat([unsqueeze(x, dim) for x in parts], dim, size, out_dtype(node))


@register_lowering(aten.constant_pad_nd.default)
def _pad(
    ctx: LoweringContext, node: torch.fx.Node, x: IRNode, pad: Any, value: Any = 0
) -> Pointwise:
    pads = as_int_list(pad)
    size = out_size(node)
    xsize = x.get_size()
    dtype = out_dtype(node)
    load = x.make_loader()
    left = [0] * len(size)
    for k in range(len(pads) // 2):
        left[len(size) - 1 - k] = pads[2 * k]

    def inner(idx: Index, ops: OpsHandler) -> Any:
        src = [i - lo for i, lo in zip(idx, left)]
        mask: Any = None
        for d, lo in enumerate(left):
            if lo == 0 and provably(sympy.sympify(size[d]) <= xsize[d]):
                continue
            i = ops.index_expr(src[d], torch.int64)
            ok = ops.logical_and(
                ops.ge(i, ops.constant(0, torch.int64)),
                ops.lt(i, scalar_value(ops, xsize[d], torch.int64)),
            )
            mask = ok if mask is None else ops.logical_and(mask, ok)
        if mask is None:
            return load(src, ops)
        return ops.where(
            mask, ops.masked(mask, lambda: load(src, ops), value, dtype), ops.constant(value, dtype)
        )

    return Pointwise(size, dtype, inner)


def _wrap_index(ops: OpsHandler, value: Any, size: Size) -> sympy.Expr:
    return ops.indirect_indexing(value, size)


@register_lowering(aten.gather.default)
def _gather(
    ctx: LoweringContext,
    node: torch.fx.Node,
    x: IRNode,
    dim: int,
    index: IRNode,
    *,
    sparse_grad: bool = False,
) -> Pointwise:
    dim = normalize_dim(dim, max(len(x.get_size()), 1))
    load_x, load_i = x.make_loader(), index.make_loader()
    xsize = x.get_size()

    def inner(idx: Index, ops: OpsHandler) -> Any:
        src = list(idx)
        if xsize:
            src[dim] = _wrap_index(ops, load_i(idx, ops), xsize[dim])
        return load_x(src, ops)

    return Pointwise(out_size(node), x.get_dtype(), inner)


@register_lowering(aten.index_select.default)
def _index_select(
    ctx: LoweringContext, node: torch.fx.Node, x: IRNode, dim: int, index: IRNode
) -> Pointwise:
    dim = normalize_dim(dim, max(len(x.get_size()), 1))
    load_x, load_i = x.make_loader(), index.make_loader()
    xsize = x.get_size()

    def inner(idx: Index, ops: OpsHandler) -> Any:
        src = list(idx)
        if xsize:
            pos = [idx[dim]] if index.get_size() else []
            src[dim] = _wrap_index(ops, load_i(pos, ops), xsize[dim])
        return load_x(src, ops)

    return Pointwise(out_size(node), x.get_dtype(), inner)


@register_lowering(aten.embedding.default)
def _embedding(
    ctx: LoweringContext, node: torch.fx.Node, weight: IRNode, indices: IRNode, *args: Any
) -> Pointwise:
    load_w, load_i = weight.make_loader(), indices.make_loader()
    nidx = len(indices.get_size())
    rows = weight.get_size()[0]

    def inner(idx: Index, ops: OpsHandler) -> Any:
        row = _wrap_index(ops, load_i(idx[:nidx], ops), rows)
        return load_w([row, idx[nidx]], ops)

    return Pointwise(out_size(node), weight.get_dtype(), inner)


@register_lowering(aten.index.Tensor)
def _index(ctx: LoweringContext, node: torch.fx.Node, x: IRNode, indices: Any) -> Any:
    positions = [k for k, t in enumerate(indices) if t is not None]
    if not positions or any(
        t.get_dtype() in (torch.bool, torch.uint8) for t in indices if t is not None
    ):
        return ctx.fallback(node, "boolean-mask indexing has a data-dependent size")
    xsize = x.get_size()
    size = out_size(node)
    tensors = [indices[k] for k in positions]
    bshape = _broadcast_shapes([t.get_size() for t in tensors])
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    first = positions[0] if adjacent else 0
    loaders = [broadcast_loader(t, bshape) for t in tensors]
    load_x = x.make_loader()
    rest_dims = [d for d in range(len(xsize)) if d not in positions]

    def inner(idx: Index, ops: OpsHandler) -> Any:
        b_idx = list(idx[first : first + len(bshape)])
        others = list(idx[:first]) + list(idx[first + len(bshape) :])
        src: list[Any] = [None] * len(xsize)
        for k, d in enumerate(positions):
            src[d] = _wrap_index(ops, loaders[k](b_idx, ops), xsize[d])
        for d, i in zip(rest_dims, others):
            src[d] = i
        return load_x(src, ops)

    del size
    return Pointwise(out_size(node), x.get_dtype(), inner)


def _broadcast_shapes(shapes: Sequence[Sequence[Size]]) -> list[Size]:
    """torch.broadcast_shapes for int or symbolic sizes (a symbolic size is never 1)."""
    ndim = max((len(s) for s in shapes), default=0)
    out: list[Size] = [1] * ndim
    for shape in shapes:
        for k, size in enumerate(shape):
            pos = ndim - len(shape) + k
            if size != 1:
                out[pos] = size
    return out
