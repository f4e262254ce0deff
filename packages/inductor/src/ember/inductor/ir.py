"""Loop-level IR: what an ATen graph becomes before scheduling.

Every tensor value is an ``IRNode`` with a size, a dtype and a *loader*: a
function ``loader(index, ops)`` that produces the element at ``index`` by
calling the ops handler. Nodes are either virtual (``Pointwise``, ``View``:
their loader is inlined into whoever reads them) or realized (``Buffer``
subclasses: they own memory and their loader is a single ``ops.load``).
``Reduction`` is always realized into a ``ComputedBuffer``.

The IR knows nothing about C++ or Triton; codegen runs the same loaders
under different handlers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from .index import contiguous_strides, linear_index
from .ops_handler import OpsHandler
from .sizes import Size, as_sizes, product, provably

Index = Sequence[sympy.Expr]
Loader = Callable[[Index, OpsHandler], Any]
ReductionFn = Callable[[Index, Index, OpsHandler], Any]

#: ``welford_m2``: the sum of squared deviations from the mean (variance's numerator),
#: emitted by the lowering only for backends that compute it in one pass (Welford).
REDUCTION_TYPES = ("sum", "prod", "max", "min", "argmax", "argmin", "any", "all", "welford_m2")


@dataclass(frozen=True, slots=True)
class Layout:
    """Strided placement of a buffer's elements (offset in elements)."""

    size: tuple[Size, ...]
    stride: tuple[Size, ...]
    dtype: torch.dtype
    offset: Size = 0

    @staticmethod
    def contiguous(size: Sequence[Size], dtype: torch.dtype) -> Layout:
        size = as_sizes(size)
        return Layout(size, contiguous_strides(size), dtype)

    def index(self, idx: Index) -> sympy.Expr:
        return linear_index(idx, self.stride, self.offset)

    def is_contiguous(self) -> bool:
        return self.offset == 0 and all(
            a == b or s == 1
            for a, b, s in zip(self.stride, contiguous_strides(self.size), self.size)
        )

    def storage_numel(self) -> Size:
        if any(s == 0 for s in self.size):
            return 0
        total = self.offset + 1 + sum((s - 1) * st for s, st in zip(self.size, self.stride))
        return total if isinstance(total, int) else as_sizes([sympy.expand(total)])[0]


class IRNode:
    """A tensor value during lowering."""

    def get_size(self) -> tuple[Size, ...]:
        raise NotImplementedError

    def get_dtype(self) -> torch.dtype:
        raise NotImplementedError

    def make_loader(self) -> Loader:
        raise NotImplementedError

    def numel(self) -> Size:
        return product(self.get_size())


@dataclass(frozen=True, eq=False)
class Pointwise(IRNode):
    size: tuple[Size, ...]
    dtype: torch.dtype
    inner_fn: Loader

    def get_size(self) -> tuple[Size, ...]:
        return self.size

    def get_dtype(self) -> torch.dtype:
        return self.dtype

    def make_loader(self) -> Loader:
        return self.inner_fn


@dataclass(frozen=True, eq=False)
class Reduction(IRNode):
    """``size`` outer elements, each reducing ``reduction_ranges`` values of ``src_dtype``."""

    size: tuple[Size, ...]
    dtype: torch.dtype
    src_dtype: torch.dtype
    reduction_ranges: tuple[Size, ...]
    reduction_type: str
    inner_fn: ReductionFn

    def get_size(self) -> tuple[Size, ...]:
        return self.size

    def get_dtype(self) -> torch.dtype:
        return self.dtype

    def make_loader(self) -> Loader:
        raise TypeError("a Reduction must be realized before it is read")


@dataclass(frozen=True, eq=False)
class View(IRNode):
    """``base`` read through ``reindex``: maps this node's index to the base's index."""

    base: IRNode
    size: tuple[Size, ...]
    reindex: Callable[[Index], Index]

    def get_size(self) -> tuple[Size, ...]:
        return self.size

    def get_dtype(self) -> torch.dtype:
        return self.base.get_dtype()

    def make_loader(self) -> Loader:
        inner = self.base.make_loader()
        reindex = self.reindex

        def load(idx: Index, ops: OpsHandler) -> Any:
            return inner(reindex(idx), ops)

        return load


@dataclass(frozen=True, eq=False)
class Buffer(IRNode):
    """Realized storage named ``name`` in the generated wrapper."""

    name: str
    layout: Layout

    def get_size(self) -> tuple[Size, ...]:
        return self.layout.size

    def get_dtype(self) -> torch.dtype:
        return self.layout.dtype

    def make_loader(self) -> Loader:
        name, layout = self.name, self.layout

        def load(idx: Index, ops: OpsHandler) -> Any:
            return ops.load(name, layout.index(idx))

        return load


@dataclass(frozen=True, eq=False)
class InputBuffer(Buffer):
    """A graph input (placeholder) or a constant attribute of the module."""


@dataclass(frozen=True, eq=False)
class ComputedBuffer(Buffer):
    """Memory filled by a generated kernel computing ``data``."""

    data: Pointwise | Reduction = field(kw_only=True)


@dataclass(frozen=True, eq=False)
class ExternKernel(Buffer):
    """Memory produced by calling an ATen op from the wrapper.

    ``args``/``kwargs`` hold IR nodes (realized first) and plain Python values.
    A multi-output op has ``layout`` of its first tensor output and ``outputs``
    listing the ``MultiOutput`` buffers that index into its result.
    """

    op: Any = field(kw_only=True)
    args: tuple[Any, ...] = field(kw_only=True)
    kwargs: dict[str, Any] = field(kw_only=True)
    reason: str = field(kw_only=True)
    mutated: tuple[str, ...] = field(kw_only=True, default=())
    tuple_result: bool = field(kw_only=True, default=False)

    def buffer_args(self) -> list[str]:
        """Names of the buffers among ``args``/``kwargs`` (a strided view names its base)."""
        from torch.utils._pytree import tree_flatten

        names: list[str] = []
        for a in tree_flatten((self.args, self.kwargs))[0]:
            if isinstance(a, ReinterpretView):
                names.append(a.base.name)
            elif isinstance(a, Buffer):
                names.append(a.name)
        return names


@dataclass(frozen=True, eq=False)
class MultiOutput(Buffer):
    """Element ``index`` of a tuple returned by an extern kernel."""

    source: ExternKernel = field(kw_only=True)
    path: int = field(kw_only=True)


@dataclass(frozen=True, eq=False)
class ReinterpretView(IRNode):
    """A strided window onto a realized buffer (no copy)."""

    base: Buffer
    layout: Layout

    def get_size(self) -> tuple[Size, ...]:
        return self.layout.size

    def get_dtype(self) -> torch.dtype:
        return self.layout.dtype

    def make_loader(self) -> Loader:
        name, layout = self.base.name, self.layout

        def load(idx: Index, ops: OpsHandler) -> Any:
            return ops.load(name, layout.index(idx))

        return load


def as_strided_of_buffer(node: IRNode) -> ReinterpretView | None:
    """If ``node`` reads a buffer through affine index math, the equivalent strided view."""
    from .index import affine_coefficients, index_symbols, simplify_index

    if isinstance(node, ReinterpretView):
        return node
    if isinstance(node, Buffer):
        return ReinterpretView(node, node.layout)
    if not isinstance(node, View):
        return None
    root: IRNode = node
    while isinstance(root, View):
        root = root.base
    if isinstance(root, ReinterpretView):
        base, base_layout = root.base, root.layout
    elif isinstance(root, Buffer):
        base, base_layout = root, root.layout
    else:
        return None
    size = node.get_size()
    syms = index_symbols("v", len(size))
    seen: list[tuple[str, sympy.Expr]] = []

    class _Capture:
        def load(self, name: str, index: sympy.Expr) -> str:
            seen.append((name, index))
            return "v"

    node.make_loader()(syms, _Capture())  # type: ignore[arg-type]
    if len(seen) != 1 or seen[0][0] != base.name:
        return None
    fit = affine_coefficients(
        simplify_index(seen[0][1], {s: n for s, n in zip(syms, size)}), syms
    )
    if fit is None:
        return None
    coeffs, offset = fit
    if not provably(sympy.sympify(offset) >= 0) or not all(
        provably(sympy.sympify(c) >= 0) for c in coeffs.values()
    ):
        return None
    stride = tuple(coeffs[s] for s in syms)
    del base_layout
    return ReinterpretView(base, Layout(size, stride, base.layout.dtype, offset))
