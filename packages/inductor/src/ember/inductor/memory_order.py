"""The memory order of a computed value that nothing outside the graph sees.

Eager's elementwise ops (TensorIterator) give their result the memory order of their
inputs: a SiLU of a channels-last activation is channels-last. A pointwise value ember
stores for its own kernels (read by several kernels, or fused into a reduction's kernel)
used to be stored contiguous whatever its inputs' order, so a channels-last network
(ADR 0056) wrote its squeeze-excite activations with stride ``H*W`` and read them back
transposed. :func:`input_order_strides` gives such a value the order of the first input
it reads at full rank, as eager would, where that input's own memory is in another
order than its logical one (a channels-last activation). A permuted view of memory stored
in its logical order is not followed: Whisper's ``gelu(conv(x)).permute(0, 2, 1) + pos``
(the start of the residual stream) was stored in the convolution's order, and every layer
norm and residual add after it then read and wrote it with stride 32 (their kernels
35 us where 5 do). Values the graph returns are copied to eager's strides anyway
(``graph._output``), so this never changes what a caller sees.
"""

from __future__ import annotations

from collections.abc import Callable

from .index import affine_coefficients, index_symbols, simplify_index
from .ir import IRNode
from .ops_handler import DepsOps


def input_order_strides(
    node: IRNode, stored_in_order: Callable[[str], bool] = lambda name: False
) -> tuple[int, ...] | None:
    """Dense strides of ``node``'s size in the memory order of the first load that reads
    every dim of size above 1 with a positive integer stride, where that order is not
    the logical one; ``None`` (contiguous) otherwise, and for symbolic sizes. A load of a
    buffer that ``stored_in_order`` (its memory is in its own logical order: only a view
    permutes it) says nothing."""
    size = node.get_size()
    if len(size) < 2 or not all(isinstance(s, int) for s in size):
        return None
    dims = [i for i, s in enumerate(size) if s != 1]
    if len(dims) < 2:
        return None
    syms = index_symbols("m", len(size))
    deps = DepsOps()
    try:
        node.make_loader()(syms, deps)
    except Exception:  # a loader that needs more than loads and arithmetic: keep contiguous
        return None
    ranges = dict(zip(syms, size))
    for name, index in deps.loads:
        if stored_in_order(name):
            continue
        fit = affine_coefficients(simplify_index(index, ranges), syms)
        if fit is None:
            continue
        coeffs = [fit[0].get(syms[i], 0) for i in dims]
        if not all(isinstance(c, int) and c > 0 for c in coeffs):
            continue  # a broadcast (0), flipped (<0) or symbolic read says nothing
        order = sorted(range(len(dims)), key=lambda k: -int(coeffs[k]))  # stable on ties
        if order == list(range(len(dims))):
            return None
        return _dense(tuple(int(s) for s in size), [dims[k] for k in order])
    return None


def _dense(size: tuple[int, ...], outer_to_inner: list[int]) -> tuple[int, ...]:
    """Dense strides with the dims of ``outer_to_inner`` in that order (outermost first);
    a size-1 dim gets the stride of the dim after it, as eager's layouts do."""
    stride = [0] * len(size)
    running = 1
    for d in reversed(outer_to_inner):
        stride[d] = running
        running *= size[d]
    following = 1
    for d in reversed(range(len(size))):
        if size[d] == 1:
            stride[d] = following
        else:
            following = stride[d] * size[d]
    return tuple(stride)


__all__ = ["input_order_strides"]
