"""What the scheduler hands a code generator: the loop plan of one kernel.

A ``KernelPlan`` is backend-neutral. It says which computed buffers one kernel
computes (``SchedNode``s, in order), its loop structure — an outer iteration
space, then a sequence of inner ``Loop``s (a reduction's range, or the extra
dims of a pointwise node that iterates more than the outer space) — which
buffers it writes to memory, reads from memory, or keeps in iteration-local
storage, and the loops after merging adjacent dims (``outer_loops`` and each
``Loop.ranges``, see ``loops.py``). Code generators read all of this; they
never work the loop structure out again from the nodes.

``plan_kernel`` is the legality check fusion asks for every candidate group:
it returns the plan, or a reason string when the nodes cannot share a kernel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy

from .index import affine_coefficients, index_symbols
from .ir import ComputedBuffer, ExternKernel, MultiOutput, Reduction
from .loops import MergedLoops
from .ops_handler import DepsOps
from .sizes import Size, SizeHints, is_size_symbol, is_static, size_symbols


@dataclass(eq=False)
class SchedNode:
    """One computed buffer as the scheduler sees it (size-1 dims dropped)."""

    order: int
    buffer: ComputedBuffer
    sizes: tuple[Size, ...]
    rsizes: tuple[Size, ...]
    reads: frozenset[str]

    @property
    def name(self) -> str:
        return self.buffer.name

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.buffer.data, Reduction)

    def full_index(self, syms: Sequence[sympy.Expr]) -> list[sympy.Expr]:
        """Index over the buffer's size given symbols for its non-1 (outer) dims."""
        it = iter(syms)
        return [sympy.Integer(0) if s == 1 else next(it) for s in self.buffer.data.get_size()]

    def reduction_index(self, syms: Sequence[sympy.Expr]) -> list[sympy.Expr]:
        data = self.buffer.data
        assert isinstance(data, Reduction)
        it = iter(syms)
        return [sympy.Integer(0) if s == 1 else next(it) for s in data.reduction_ranges]

    def symbols(self, n_outer: int) -> tuple[list[sympy.Symbol], list[sympy.Symbol]]:
        """(outer, inner) loop symbols when the first ``n_outer`` dims are the kernel's outer loops."""
        outer = index_symbols("x", n_outer)
        n_inner = len(self.rsizes) if self.is_reduction else len(self.sizes) - n_outer
        return outer, index_symbols("r", n_inner)

    @functools.cache  # noqa: B019 - nodes live for one compile
    def accesses(self, n_outer: int) -> tuple[tuple[tuple[str, sympy.Expr], ...], sympy.Expr]:
        """(loads, store index) with this node's loops split after ``n_outer`` dims."""
        outer, inner = self.symbols(n_outer)
        deps = DepsOps()
        data = self.buffer.data
        if isinstance(data, Reduction):
            data.inner_fn(self.full_index(outer), self.reduction_index(inner), deps)
            store = self.buffer.layout.index(self.full_index(outer))
        else:
            idx = self.full_index(list(outer) + list(inner))
            data.inner_fn(idx, deps)
            store = self.buffer.layout.index(idx)
        return tuple(deps.loads), store

    @functools.cache  # noqa: B019 - nodes live for one compile
    def value_exprs(self, n_outer: int) -> tuple[sympy.Basic, ...]:
        """The expressions this node's body computes with besides its load and store
        indices (``index_expr(s0)``: a mean's divisor over a symbolic size)."""
        outer, inner = self.symbols(n_outer)
        deps = DepsOps()
        data = self.buffer.data
        if isinstance(data, Reduction):
            data.inner_fn(self.full_index(outer), self.reduction_index(inner), deps)
        else:
            data.inner_fn(self.full_index(list(outer) + list(inner)), deps)
        return tuple(deps.exprs)


@dataclass(eq=False)
class Loop:
    """One inner loop nest of a kernel (``inner == ()``: statements once per outer index)."""

    inner: tuple[Size, ...]
    nodes: list[SchedNode] = field(default_factory=list)
    #: ``inner`` after merging dims (set by ``lay_out_loops``): sizes, symbols and the
    #: rewrite of index expressions already rewritten by the kernel's ``outer_loops``.
    ranges: MergedLoops | None = None

    @property
    def has_reduction(self) -> bool:
        return any(n.is_reduction for n in self.nodes)

    @property
    def symbols(self) -> list[sympy.Symbol]:
        """The inner loops' symbols before merging (``r0, r1, ...``)."""
        return index_symbols("r", len(self.inner))

    def merged(self) -> MergedLoops:
        assert self.ranges is not None, "lay_out_loops has not run on this plan"
        return self.ranges

    def rewrite(self, outer: MergedLoops) -> Callable[[sympy.Expr], sympy.Expr]:
        """Index expression over the original symbols -> over the merged outer and inner loops."""
        inner = self.merged()
        return lambda e: inner.rewrite(outer.rewrite(e))


@dataclass(eq=False)
class KernelPlan:
    name: str
    outer: tuple[Size, ...]
    nodes: list[SchedNode]
    loops: list[Loop]
    #: Buffers the kernel writes to memory (the rest stay in registers).
    stores: list[str] = field(default_factory=list)
    #: Buffers read from memory (produced elsewhere).
    loads: list[str] = field(default_factory=list)
    #: Buffers written and read back only within one outer iteration of this kernel
    #: (softmax's ``exp(x - max)``): name -> elements per outer iteration. A backend keeps
    #: them in iteration-local storage (a stack array in C++) instead of a graph buffer.
    private: dict[str, int] = field(default_factory=dict)
    #: ``outer`` after merging dims (set by ``lay_out_loops``).
    outer_loops: MergedLoops | None = None
    #: values of the size symbols for the inputs compiled with (heuristics only)
    hints: SizeHints = field(default_factory=SizeHints)
    #: Stored buffers computed into a graph input's memory (``inplace.py``): buffer -> input.
    #: Where the kernel also loads that input, the two pointers are the same memory.
    inplace: dict[str, str] = field(default_factory=dict)
    #: Stored buffers computed into the memory of a buffer this kernel reads for the last
    #: time (``memory_plan``, which sets it): buffer -> that buffer; same memory, as above.
    in_place_of: dict[str, str] = field(default_factory=dict)

    def size_symbols(self) -> set[sympy.Symbol]:
        """The size symbols anywhere in this plan's loops or accesses (kernel arguments)."""
        n_outer = len(self.outer)
        exprs: list[Any] = [*self.outer, *(s for loop in self.loops for s in loop.inner)]
        for n in self.nodes:
            loads, store = n.accesses(n_outer)
            exprs.extend(e for _, e in loads)
            exprs.append(store)
            exprs.extend(n.value_exprs(n_outer))
            exprs.extend(n.buffer.layout.size)
        return {s for s in size_symbols(exprs) if is_size_symbol(s)}

    @property
    def is_pointwise(self) -> bool:
        return all(not loop.inner and not loop.has_reduction for loop in self.loops)

    @property
    def outer_symbols(self) -> list[sympy.Symbol]:
        """The outer loops' symbols before merging (``x0, x1, ...``)."""
        return index_symbols("x", len(self.outer))

    def merged_outer(self) -> MergedLoops:
        assert self.outer_loops is not None, "lay_out_loops has not run on this plan"
        return self.outer_loops

    @property
    def args(self) -> list[str]:
        """The buffers a kernel call passes: what it reads, then what it writes."""
        return [*self.loads, *self.stores]


@dataclass(eq=False)
class ExternCall:
    kernel: ExternKernel
    outputs: list[MultiOutput]


Step = KernelPlan | ExternCall


def make_sched_node(order: int, buf: ComputedBuffer) -> SchedNode:
    data = buf.data
    sizes = tuple(s for s in data.get_size() if s != 1)
    rsizes = (
        tuple(s for s in data.reduction_ranges if s != 1) if isinstance(data, Reduction) else ()
    )
    node = SchedNode(order, buf, sizes, rsizes, frozenset())
    loads, _ = node.accesses(len(sizes))
    node.reads = frozenset(n for n, _ in loads)
    return node


def plan_kernel(nodes: Sequence[SchedNode], max_size: int) -> KernelPlan | str:
    """The loop structure of one kernel computing ``nodes`` (in order), or why it is illegal."""
    if len(nodes) > max_size:
        return f"kernel would have more than {max_size} nodes"
    reductions = [n for n in nodes if n.is_reduction]
    outer = reductions[0].sizes if reductions else nodes[0].sizes
    inner_of: dict[str, tuple[Size, ...]] = {}
    for n in nodes:
        if n.is_reduction:
            if n.sizes != outer:
                return f"{n.name} reduces to {n.sizes}, the kernel's outer loops are {outer}"
            inner_of[n.name] = n.rsizes
        elif n.sizes == outer:
            inner_of[n.name] = ()
        elif reductions and n.sizes[: len(outer)] == outer:
            inner_of[n.name] = n.sizes[len(outer) :]
        else:
            return f"{n.name} iterates {n.sizes}, the kernel iterates {outer}"
    n_outer = len(outer)
    producer = {n.name: n for n in nodes}
    loops: list[Loop] = []
    loop_of: dict[str, Loop] = {}
    for n in nodes:
        loads, _ = n.accesses(n_outer)
        inner = inner_of[n.name]
        needs_new = not loops or loops[-1].inner != inner
        for name, expr in loads:
            p = producer.get(name)
            if p is None:
                continue
            if p.order >= n.order:
                return f"{n.name} reads {name}, which is computed later"
            _, store = p.accesses(n_outer)
            if not p.is_reduction and inner_of[p.name] and inner_of[p.name] != inner:
                return f"{n.name} reads {name} across different inner loops"
            if sympy.expand(expr - store) != 0:
                return f"{n.name} reads {name} at {expr}, it is written at {store}"
            if p.is_reduction and loops and loop_of[p.name] is loops[-1]:
                needs_new = True
        if needs_new:
            loops.append(Loop(inner))
        loops[-1].nodes.append(n)
        loop_of[n.name] = loops[-1]
    return KernelPlan("", outer, list(nodes), loops)


def private_offset(index: sympy.Expr, inner_syms: Sequence[sympy.Symbol]) -> sympy.Expr:
    """``index`` relative to the start of its outer iteration (inner symbols at 0)."""
    return sympy.expand(index - index.xreplace({s: 0 for s in inner_syms}))


def private_numel(node: SchedNode, n_outer: int, inner: tuple[Size, ...], max_bytes: int) -> int | None:
    """Elements per outer iteration if ``node``'s store offsets within one iteration are
    ``0 <= offset < numel(inner)`` (see :func:`private_offset`) and fit ``max_bytes``;
    None otherwise."""
    if not is_static(inner):  # an iteration-local array needs a size known when compiling
        return None
    numel = 1
    for s in inner:
        numel *= s
    if numel * node.buffer.layout.dtype.itemsize > max_bytes:
        return None
    _, inner_syms = node.symbols(n_outer)
    _, store = node.accesses(n_outer)
    fit = affine_coefficients(private_offset(store, inner_syms), inner_syms)
    if fit is None or fit[1] != 0 or not is_static(fit[0].values()) or any(
        c < 0 for c in fit[0].values()
    ):
        return None
    top = sum(c * (size - 1) for c, size in zip((fit[0][s] for s in inner_syms), inner))
    return numel if top < numel else None


__all__ = [
    "ExternCall",
    "KernelPlan",
    "Loop",
    "SchedNode",
    "Step",
    "make_sched_node",
    "plan_kernel",
    "private_numel",
    "private_offset",
]
