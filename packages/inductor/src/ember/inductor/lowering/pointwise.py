"""Elementwise ATen ops, type promotion as torch does it.

An ATen op computed by one ``ops.<name>`` is registered from its row of ``op_table.OPS``
(the one table to add an elementwise op to); ops that need more (``add``'s ``alpha``,
``div``'s rounding modes, ``pow``'s small exponents, ``where``, ``clamp``, ``gelu``, ...)
have their lowering below.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as Kind

from ..ir import IRNode, Pointwise
from ..op_table import OPS, Op
from ..ops_handler import OpsHandler
from . import LoweringContext, make_pointwise, meta_of, out_dtype, promote, register_lowering

aten = torch.ops.aten


def _register(
    op: Any, fn: Callable[..., Any], kind: Kind = Kind.DEFAULT, *, bool_out: bool = False
) -> None:
    def lower(ctx: LoweringContext, node: torch.fx.Node, *args: Any, **kwargs: Any) -> Pointwise:
        inputs = list(args)
        compute = promote(inputs, Kind.DEFAULT if bool_out else kind)
        return make_pointwise(node, inputs, fn, compute_dtype=compute)

    register_lowering(op)(lower)


def _unary(name: str) -> Callable[..., Any]:
    return lambda ops, x: getattr(ops, name)(x)


def _binary(name: str) -> Callable[..., Any]:
    return lambda ops, a, b: getattr(ops, name)(a, b)


def _lower_rounding(ctx: LoweringContext, node: torch.fx.Node, x: IRNode, name: str) -> Pointwise:
    if not x.get_dtype().is_floating_point:
        return make_pointwise(node, [x], lambda ops, v: v, compute_dtype=x.get_dtype())
    return make_pointwise(node, [x], _unary(name), compute_dtype=x.get_dtype())


_KINDS = {
    "default": Kind.DEFAULT,
    "int_to_float": Kind.INT_TO_FLOAT,
    "complex_to_float": Kind.COMPLEX_TO_FLOAT,
}


def _register_table_op(op: Op) -> None:
    """The ATen ops ``op`` (a row of ``op_table.OPS``) lowers directly, on its overloads."""
    targets = [
        getattr(getattr(aten, packet), ov)
        for packet in op.aten
        for ov in op.overloads
        if hasattr(getattr(aten, packet), ov)
    ]
    for target in targets:
        if op.lower == "rounding":
            register_lowering(target)(lambda ctx, node, x, _n=op.name: _lower_rounding(ctx, node, x, _n))
        else:
            fn = _unary(op.name) if op.arity == 1 else _binary(op.name)
            if op.lower == "bool":
                _register(target, fn, bool_out=True)
            else:
                assert op.lower is not None
                _register(target, fn, _KINDS[op.lower])


for _row in OPS:
    if _row.lower is not None:
        _register_table_op(_row)


def _with_alpha(name: str) -> Callable[..., Any]:
    def lower(  # alpha: keyword-only in the .Tensor overloads, positional in the .Scalar ones
        ctx: LoweringContext, node: torch.fx.Node, a: Any, b: Any, alpha: Any = 1
    ) -> Pointwise:
        compute = promote([a, b])
        if alpha == 1:
            return make_pointwise(node, [a, b], _binary(name), compute_dtype=compute)

        def fn(ops: OpsHandler, x: Any, y: Any) -> Any:
            return getattr(ops, name)(x, ops.mul(y, ops.constant(alpha, compute)))

        return make_pointwise(node, [a, b], fn, compute_dtype=compute)

    return lower


for _op, _name in {aten.add: "add", aten.sub: "sub"}.items():
    register_lowering(_op.Tensor, _op.Scalar)(_with_alpha(_name))
register_lowering(aten.rsub.Tensor, aten.rsub.Scalar)(
    lambda ctx, node, a, b, alpha=1: _with_alpha("sub")(ctx, node, b, a, alpha=alpha)
)


@register_lowering(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div(
    ctx: LoweringContext, node: torch.fx.Node, a: Any, b: Any, *, rounding_mode: str | None = None
) -> Pointwise:
    if rounding_mode is None:
        return make_pointwise(
            node, [a, b], _binary("truediv"), compute_dtype=promote([a, b], Kind.INT_TO_FLOAT)
        )
    compute = promote([a, b])
    if rounding_mode == "floor":
        return make_pointwise(node, [a, b], _binary("floordiv"), compute_dtype=compute)
    if compute.is_floating_point:
        return make_pointwise(
            node, [a, b], lambda ops, x, y: ops.trunc(ops.truediv(x, y)), compute_dtype=compute
        )
    # Integer truncation division: C++ '/' truncates toward zero already.
    return make_pointwise(node, [a, b], lambda ops, x, y: ops.truediv(x, y), compute_dtype=compute)


@register_lowering(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def _pow(ctx: LoweringContext, node: torch.fx.Node, a: Any, b: Any) -> Pointwise:
    compute = out_dtype(node)
    if not isinstance(b, IRNode) and compute.is_floating_point:
        # ATen's CPU kernel special-cases these exponents the same way; a libm pow call
        # would also keep the loop from vectorizing (GELU's tanh form has x ** 3).
        if b == 2:
            return make_pointwise(node, [a], lambda ops, x: ops.mul(x, x), compute_dtype=compute)
        if b == 3:
            return make_pointwise(
                node, [a], lambda ops, x: ops.mul(ops.mul(x, x), x), compute_dtype=compute
            )
        if b == -1:
            return make_pointwise(node, [a], lambda ops, x: ops.reciprocal(x), compute_dtype=compute)
        if b == 0.5:
            return make_pointwise(node, [a], lambda ops, x: ops.sqrt(x), compute_dtype=compute)
        if b == 1:
            return make_pointwise(node, [a], lambda ops, x: x, compute_dtype=compute)
    if not compute.is_floating_point and compute != torch.bool:
        # Integer powers: exact repeated multiplication is what torch does; leave it to ATen.
        return ctx.fallback(node, "integer pow")  # type: ignore[no-any-return]
    return make_pointwise(node, [a, b], _binary("pow"), compute_dtype=compute)


@register_lowering(
    aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar
)
def _where(ctx: LoweringContext, node: torch.fx.Node, cond: Any, a: Any, b: Any) -> Pointwise:
    compute = out_dtype(node)
    return make_pointwise(
        node,
        [cond, a, b],
        lambda ops, c, x, y: ops.where(ops.to_dtype(c, torch.bool), x, y),
        compute_dtype=compute,
    )


@register_lowering(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(
    ctx: LoweringContext, node: torch.fx.Node, x: Any, mask: Any, value: Any
) -> Pointwise:
    compute = out_dtype(node)
    return make_pointwise(
        node,
        [mask, value, x],
        lambda ops, m, v, y: ops.where(ops.to_dtype(m, torch.bool), v, y),
        compute_dtype=compute,
    )


@register_lowering(aten.clamp.default, aten.clamp.Tensor)
def _clamp(
    ctx: LoweringContext, node: torch.fx.Node, x: Any, lo: Any = None, hi: Any = None
) -> Pointwise:
    compute = out_dtype(node)
    inputs = [x] + [v for v in (lo, hi) if v is not None]

    def fn(ops: OpsHandler, v: Any, *bounds: Any) -> Any:
        k = 0
        if lo is not None:
            v = ops.maximum(v, bounds[k])
            k += 1
        if hi is not None:
            v = ops.minimum(v, bounds[k])
        return v

    return make_pointwise(node, inputs, fn, compute_dtype=compute)


register_lowering(aten.clamp_min.default, aten.clamp_min.Tensor)(
    lambda ctx, node, x, lo: _clamp(ctx, node, x, lo, None)
)
register_lowering(aten.clamp_max.default, aten.clamp_max.Tensor)(
    lambda ctx, node, x, hi: _clamp(ctx, node, x, None, hi)
)


@register_lowering(aten.gelu.default)
def _gelu(
    ctx: LoweringContext, node: torch.fx.Node, x: Any, *, approximate: str = "none"
) -> Pointwise:
    compute = out_dtype(node)

    def exact(ops: OpsHandler, v: Any) -> Any:
        c = ops.constant(math.sqrt(0.5), compute)
        half = ops.constant(0.5, compute)
        one = ops.constant(1.0, compute)
        return ops.mul(ops.mul(v, half), ops.add(one, ops.erf(ops.mul(v, c))))

    def tanh(ops: OpsHandler, v: Any) -> Any:
        k = ops.constant(math.sqrt(2.0 / math.pi), compute)
        cub = ops.mul(ops.mul(ops.mul(v, v), v), ops.constant(0.044715, compute))
        inner = ops.mul(k, ops.add(v, cub))
        one = ops.constant(1.0, compute)
        return ops.mul(ops.mul(v, ops.constant(0.5, compute)), ops.add(one, ops.tanh(inner)))

    return make_pointwise(
        node, [x], tanh if approximate == "tanh" else exact, compute_dtype=compute
    )


@register_lowering(aten.silu.default)
def _silu(ctx: LoweringContext, node: torch.fx.Node, x: Any) -> Pointwise:
    return make_pointwise(
        node, [x], lambda ops, v: ops.mul(v, ops.sigmoid(v)), compute_dtype=out_dtype(node)
    )


@register_lowering(aten._to_copy.default)
def _to_copy(ctx: LoweringContext, node: torch.fx.Node, x: Any, **kwargs: Any) -> Any:
    val = meta_of(node)
    if not isinstance(x, IRNode) or val.device.type != "cpu":
        return ctx.fallback(node, "_to_copy changing device")
    copied = make_pointwise(node, [x], lambda ops, v: v, compute_dtype=val.dtype)
    if kwargs.get("memory_format") in (None, torch.preserve_format, torch.contiguous_format):
        return copied
    return _in_memory_format(ctx, node, copied, "_to_copy")


@register_lowering(aten.clone.default, aten.copy.default, aten.lift_fresh_copy.default)
def _clone(ctx: LoweringContext, node: torch.fx.Node, x: Any, *rest: Any, **kwargs: Any) -> Any:
    src = rest[0] if node.target is aten.copy.default else x
    copied = make_pointwise(node, [src], lambda ops, v: v, compute_dtype=out_dtype(node))
    if kwargs.get("memory_format") in (None, torch.preserve_format, torch.contiguous_format):
        return copied
    return _in_memory_format(ctx, node, copied, "clone")


def _in_memory_format(ctx: LoweringContext, node: torch.fx.Node, value: Pointwise, op: str) -> Any:
    """``value`` (a copy to another memory format: ``x.contiguous(memory_format=
    torch.channels_last)``, ``x.to(memory_format=...)``) stored in the traced layout by the
    kernel computing it, fused with whatever produces ``x`` (an upsample, a norm), instead
    of an ATen call copying a buffer ember wrote contiguous."""
    val = meta_of(node)
    stride = tuple(val.stride())
    if not all(isinstance(v, int) for v in (*val.shape, *stride)):
        return ctx.fallback(node, f"{op} to a memory format, with symbolic sizes")
    return ctx.realize(value, stride)


@register_lowering(aten.alias.default, aten.detach.default)
def _alias(ctx: LoweringContext, node: torch.fx.Node, x: Any) -> Any:
    return x
