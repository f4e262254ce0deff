"""The lowering registry: one function per ATen op, from fx arguments to IR nodes.

A lowering receives the ``LoweringContext`` (the graph being lowered, passed
explicitly), the fx node (for its fake-tensor metadata) and the op's arguments
with every tensor replaced by its ``IRNode``. Ops without a lowering are
decomposed when a decomposition is known, and otherwise called from the
wrapper as ATen extern kernels.

The tables fill when their modules (``creation``, ``pointwise``, ``reduction``,
``views``) are imported; ``graph.py`` imports them, so importing ember.inductor
registers every lowering.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import sympy
import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from ..ir import Buffer, Index, IRNode, Loader, Pointwise, ReinterpretView
from ..limits import SUPPORTED_DTYPES as SUPPORTED_DTYPES
from ..lowering_registry import LOWERINGS as LOWERINGS
from ..lowering_registry import LoweringFn as LoweringFn
from ..lowering_registry import find_lowering as find_lowering
from ..lowering_registry import register_lowering as register_lowering
from ..ops_handler import OpsHandler
from ..sizes import Size, SizeHints, as_size, as_sizes

aten = torch.ops.aten


class LoweringContext(Protocol):
    """What lowerings may ask of the graph being lowered (implemented by ``GraphLowering``)."""

    #: the backend computes ``welford_m2`` reductions (variance in one pass over the input)
    welford: bool
    #: each size symbol's value for the inputs at hand (heuristics only)
    hints: SizeHints

    def realize(
        self, node: IRNode, stride: tuple[Size, ...] | None = None
    ) -> Buffer | ReinterpretView: ...

    def fallback(self, fx_node: torch.fx.Node, reason: str) -> Any: ...


def meta_of(fx_node: torch.fx.Node) -> Any:
    return fx_node.meta["val"]


def out_size(fx_node: torch.fx.Node) -> tuple[Size, ...]:
    return as_sizes(meta_of(fx_node).shape)


def out_dtype(fx_node: torch.fx.Node) -> torch.dtype:
    dtype: torch.dtype = meta_of(fx_node).dtype
    return dtype


def _dummy(x: IRNode | bool | int | float | sympy.Expr) -> Any:
    if isinstance(x, IRNode):
        return torch.empty([1] * len(x.get_size()), dtype=x.get_dtype(), device="meta")
    if isinstance(x, sympy.Basic):  # a symbolic size used as a scalar
        return 1 if x.is_integer else 1.0
    return x


def promote(
    inputs: Sequence[IRNode | bool | int | float],
    kind: ELEMENTWISE_TYPE_PROMOTION_KIND = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT,
) -> torch.dtype:
    """The dtype torch computes an elementwise op in (type promotion rules)."""
    compute, _ = elementwise_dtypes(*[_dummy(x) for x in inputs], type_promotion_kind=kind)
    return compute


def broadcast_loader(x: IRNode, size: Sequence[int]) -> Loader:
    """Loader of ``x`` indexed by an index over the (broadcast) ``size``."""
    inner = x.make_loader()
    xsize = x.get_size()
    lead = len(size) - len(xsize)

    def load(idx: Index, ops: OpsHandler) -> Any:
        sub = [
            sympy.Integer(0) if xs == 1 and size[lead + k] != 1 else idx[lead + k]
            for k, xs in enumerate(xsize)
        ]
        return inner(sub, ops)

    return load


def value_loader(x: IRNode | bool | int | float, size: Sequence[int], dtype: torch.dtype) -> Loader:
    """Loader casting ``x`` (tensor or Python scalar) to ``dtype``, broadcast to ``size``."""
    if isinstance(x, IRNode):
        load = broadcast_loader(x, size)
        if x.get_dtype() == dtype:
            return load
        return lambda idx, ops: ops.to_dtype(load(idx, ops), dtype)
    value = x
    if isinstance(value, sympy.Basic):  # a symbolic size: computed in the kernel
        return lambda idx, ops: ops.index_expr(value, dtype)
    return lambda idx, ops: ops.constant(value, dtype)


def make_pointwise(
    fx_node: torch.fx.Node,
    inputs: Sequence[IRNode | bool | int | float],
    fn: Callable[..., Any],
    *,
    compute_dtype: torch.dtype,
) -> Pointwise:
    """A Pointwise over the node's output size computing ``fn(ops, *values)``."""
    size = out_size(fx_node)
    result = out_dtype(fx_node)
    loaders = [value_loader(x, size, compute_dtype) for x in inputs]

    def inner(idx: Index, ops: OpsHandler) -> Any:
        value = fn(ops, *[load(idx, ops) for load in loaders])
        return value if result == compute_dtype else ops.to_dtype(value, result)

    return Pointwise(size, result, inner)


def as_int_list(value: Any) -> list[Size]:
    """Sizes or dims given as one value or a sequence: ints, or expressions of sizes."""
    if isinstance(value, (int, sympy.Basic)):
        return [as_size(value)]
    return [as_size(v) for v in value]


def scalar_value(ops: OpsHandler, value: Any, dtype: torch.dtype) -> Any:
    """A Python number, or a symbolic size computed in the kernel, as a value of ``dtype``."""
    if isinstance(value, sympy.Basic):
        return ops.index_expr(value, dtype)
    return ops.constant(value, dtype)


def normalize_dim(dim: int, ndim: int) -> int:
    if ndim == 0:
        if dim not in (0, -1):
            raise IndexError(f"dim {dim} out of range for a 0-d tensor")
        return 0
    if not -ndim <= dim < ndim:
        raise IndexError(f"dim {dim} out of range for {ndim} dims")
    return dim % ndim

