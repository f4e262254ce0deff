"""The ``Backend`` protocol: what a code generator provides to the rest of ember.inductor.

Lowering, scheduling, fusion and memory planning are backend-neutral; a
backend turns each ``KernelPlan`` into kernel source, builds and loads those
sources (compiling in parallel, caching on disk), and supplies the few lines
of the Python wrapper that differ per device: how a kernel is called and how
a buffer is allocated. ``codegen/registry.py`` maps device types to backends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from ..ir import Layout
    from ..kernel_plan import KernelPlan


@dataclass(frozen=True)
class KernelSource:
    """One generated kernel: its source, the buffers its call passes (in order),
    backend-specific launch data that must survive the graph cache (JSON values), and
    the size symbols it takes after the buffers (``s0``: its loops or indexing depend
    on a dynamic size; the wrapper passes each one's value)."""

    source: str
    args: list[str]
    meta: dict[str, Any] = field(default_factory=dict)
    sizes: list[str] = field(default_factory=list)


@dataclass
class BuildStats:
    """Build units compiled now and loaded from the on-disk cache."""

    compiled: int = 0
    cached: int = 0


class Backend(Protocol):
    """A code generator for one kind of device."""

    #: Short name (``"cpp"``, ``"triton"``).
    name: str
    #: File suffix of its kernel sources in debug output (``"cpp"``, ``"py"``).
    suffix: str
    #: How messages name its lowering (``"dtype float16 has no C++ lowering"``).
    label: str
    #: Element types its kernels read and write; ops on other dtypes stay ATen calls.
    dtypes: frozenset[torch.dtype]
    #: Largest iteration-local buffer (bytes) its kernels keep (``KernelPlan.private``).
    private_bytes: int
    #: Its kernels compute ``welford_m2`` reductions (variance in one pass over the input);
    #: the lowering emits them only for such a backend.
    welford: bool
    #: Its loops vectorize a math-library call (erf, tanh, log) only over inputs read with
    #: unit stride: gcc 12 leaves a loop scalar that reads a strided input and calls a
    #: libmvec function. The lowering then stores such a value before a permuting view.
    vector_calls_need_unit_stride: bool
    #: Its kernels take size symbols as arguments (``KernelSource.sizes``), so graphs
    #: with symbolic sizes compile (ADR 0021); otherwise such graphs run eagerly.
    symbolic_sizes: bool

    def generate(self, plan: KernelPlan, dtypes: Mapping[str, torch.dtype]) -> KernelSource:
        """Kernel source for ``plan``; ``dtypes`` maps every buffer name to its dtype."""
        ...

    def build(
        self, kernels: Mapping[str, KernelSource], stats: BuildStats
    ) -> dict[str, Callable[..., Any]]:
        """Compile (or load from the cache) and load every kernel; name -> callable."""
        ...

    def call(self, name: str, kernel: KernelSource) -> str:
        """The wrapper statement calling kernel ``name`` with its argument buffers."""
        ...

    def allocate(self, layout: Layout) -> str:
        """The wrapper expression allocating an uninitialized buffer of ``layout``."""
        ...

    def extern_name(self, op_name: str) -> str | None:
        """A ``namespace()`` name the wrapper calls instead of ATen op ``op_name``
        (``"aten::mm"``), or None: the op is called as it is."""
        ...

    def namespace(self) -> dict[str, Any]:
        """Names the wrapper lines above refer to, besides the loaded kernels."""
        ...
