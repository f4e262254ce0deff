"""Max pooling as generated code: each output element reads its window directly.

ATen's CPU ``max_pool2d_with_indices`` (what a traced ``F.max_pool2d`` becomes) is a
scalar loop: on SqueezeNet's pools (2x64x31x31, 3x3, stride 2, ceil mode) it takes
~0.9 ms per call, more than every kernel of the rest of the network together. Here the
window is unrolled (``kernel_size`` is static): the values and the indices are two
pointwise values, so an inference graph that never reads the indices computes none, and
the values fuse with what follows (a ReLU, a concatenation).

Eager's rule, kept exactly: the first valid element of the window is taken, then an
element replaces the current one where it is larger or NaN (so ties keep the first,
and a NaN wins); the index is ``h * W + w`` in the input plane.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import sympy
import torch

from ..index import index_symbols
from ..ir import Buffer, Index, IRNode, Pointwise, ReinterpretView
from ..ops_handler import DepsOps, OpsHandler
from ..sizes import Size, as_sizes, provably
from . import LoweringContext, as_int_list, register_lowering, scalar_value

aten = torch.ops.aten

#: windows (kernel_size elements) unrolled into the kernel; larger ones call ATen
MAX_WINDOW = 64


def _pair(value: Any, default: list[int]) -> list[int]:
    got = as_int_list(value) if value is not None else []
    if not got:
        return list(default)
    return got * 2 if len(got) == 1 else got


#: ops of a computed input's body (a load and a ReLU: 3) above which it is stored first
CHEAP_OPS = 4


def _costly(x: IRNode) -> bool:
    """Whether ``x`` is a computed value whose body costs more than reading a buffer."""
    if isinstance(x, (Buffer, ReinterpretView)):
        return False
    deps = DepsOps()
    x.make_loader()(index_symbols("p", len(x.get_size())), deps)
    return deps.num_ops > CHEAP_OPS or len({name for name, _ in deps.loads}) > 1


@register_lowering(aten.max_pool2d_with_indices.default)
def _max_pool2d_with_indices(
    ctx: LoweringContext,
    node: torch.fx.Node,
    x: IRNode,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> tuple[IRNode, IRNode]:
    kernel = _pair(kernel_size, [])
    strides = _pair(stride, kernel)
    pads = _pair(padding, [0, 0])
    dils = _pair(dilation, [1, 1])
    values, _ = node.meta["val"]
    if not x.get_dtype().is_floating_point:
        return ctx.fallback(node, "max_pool2d of an integer tensor")  # type: ignore[no-any-return]
    if len(kernel) != 2 or kernel[0] * kernel[1] > MAX_WINDOW:
        return ctx.fallback(node, f"max_pool2d window over {MAX_WINDOW} elements")  # type: ignore[no-any-return]
    # symbolic output sizes: a window offset that cannot be proved inside is masked
    out_h, out_w = as_sizes(values.shape[-2:])
    size: tuple[Size, ...] = (*x.get_size()[:-2], out_h, out_w)
    if kernel[0] * kernel[1] > 1 and _costly(x):
        # every output reads kernel_size elements: a computed input (a batch norm) is
        # stored once rather than recomputed per read (shufflenet's stem: 9x its BN)
        x = ctx.realize(x)
    height, width = x.get_size()[-2:]
    dtype = x.get_dtype()
    load = x.make_loader()
    lead = len(size) - 2

    def checks(out: Size, k: int, s: int, p: int, d: int, extent: Size) -> tuple[bool, bool]:
        """Whether offset ``k`` of the window can fall before 0 / at or past ``extent``."""
        first, last = -p + k * d, (out - 1) * s - p + k * d
        return first < 0, not provably(sympy.sympify(last) < sympy.sympify(extent))

    def elements(idx: Index, ops: OpsHandler) -> Iterator[tuple[list[Any], Any]]:
        """Each window element's input index and validity (``None``: always valid)."""
        oh, ow = idx[lead], idx[lead + 1]
        for kh in range(kernel[0]):
            low_h, high_h = checks(out_h, kh, strides[0], pads[0], dils[0], height)
            ih = oh * strides[0] - pads[0] + kh * dils[0]
            for kw in range(kernel[1]):
                low_w, high_w = checks(out_w, kw, strides[1], pads[1], dils[1], width)
                iw = ow * strides[1] - pads[1] + kw * dils[1]
                valid: Any = None
                for pos, low, high, extent in ((ih, low_h, high_h, height),
                                               (iw, low_w, high_w, width)):
                    i = ops.index_expr(pos, torch.int64) if (low or high) else None
                    if low:
                        ok = ops.ge(i, ops.constant(0, torch.int64))
                        valid = ok if valid is None else ops.logical_and(valid, ok)
                    if high:
                        ok = ops.lt(i, scalar_value(ops, extent, torch.int64))
                        valid = ok if valid is None else ops.logical_and(valid, ok)
                yield [*idx[:lead], ih, iw], valid

    def read(src: list[Any], valid: Any, ops: OpsHandler) -> Any:
        """The element at ``src``; -inf where it lies in the padding."""
        if valid is None:
            return load(src, ops)
        return ops.masked(valid, lambda: load(src, ops), -math.inf, dtype)

    def index_fn(idx: Index, ops: OpsHandler) -> Any:
        """Eager's index: the first valid element, then any larger or NaN one."""
        best: Any = None
        best_index: Any = None
        seen: Any = None  # a valid element was taken already (None: certainly)
        for src, valid in elements(idx, ops):
            value = read(src, valid, ops)
            flat = ops.index_expr(src[-2] * width + src[-1], torch.int64)
            if best is None:
                best, best_index, seen = value, flat, valid
                continue
            take = ops.logical_or(ops.gt(value, best), ops.isnan(value))
            if seen is not None:  # the first valid element is taken whatever its value
                take = ops.logical_or(take, ops.logical_not(seen))
            if valid is not None:
                take = ops.logical_and(take, valid)
            best = ops.where(take, value, best)
            best_index = ops.where(take, flat, best_index)
            if seen is not None:
                seen = ops.logical_or(seen, valid) if valid is not None else None
        return best_index

    def value_fn(idx: Index, ops: OpsHandler) -> Any:
        # the value alone: a NaN-propagating maximum over the window (equal to the
        # select chain's value, which only the indices need), one vector op per element
        best: Any = None
        for src, valid in elements(idx, ops):
            value = read(src, valid, ops)
            best = value if best is None else ops.maximum(best, value)
        return best

    return Pointwise(size, dtype, value_fn), Pointwise(size, torch.int64, index_fn)
