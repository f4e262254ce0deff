"""Scheduling: which buffers are computed by which kernel, and in what order.

Backend-neutral. Input: the realized buffers of a ``LoweredGraph``. Output: a
list of ``KernelPlan`` and extern calls in execution order, with each kernel's
loop structure (an outer iteration space, then a sequence of inner loops),
which of its buffers stay in registers, and when every buffer dies.

Legality lives in ``plan_kernel`` (it returns a reason string when nodes
cannot share a kernel); preference lives in ``fusion.score``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import sympy

from .graph import LoweredGraph
from .index import affine_coefficients, index_symbols
from .ir import Buffer, ComputedBuffer, ExternKernel, Index, MultiOutput, Reduction, ReinterpretView
from .logs import perf_hints
from .ops_handler import DepsOps
from .options import InductorOptions


@dataclass(eq=False)
class SchedNode:
    """One computed buffer as the scheduler sees it (size-1 dims dropped)."""

    order: int
    buffer: ComputedBuffer
    sizes: tuple[int, ...]
    rsizes: tuple[int, ...]
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


@dataclass(eq=False)
class Loop:
    """One inner loop nest of a kernel (``inner == ()``: statements once per outer index)."""

    inner: tuple[int, ...]
    nodes: list[SchedNode] = field(default_factory=list)

    @property
    def has_reduction(self) -> bool:
        return any(n.is_reduction for n in self.nodes)


@dataclass(eq=False)
class KernelPlan:
    name: str
    outer: tuple[int, ...]
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

    @property
    def is_pointwise(self) -> bool:
        return all(not loop.inner and not loop.has_reduction for loop in self.loops)


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
    inner_of: dict[str, tuple[int, ...]] = {}
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


def _elide_locals(plan: KernelPlan, external_readers: set[str], outputs: set[str]) -> None:
    """Decide which buffers of ``plan`` must be stored; the rest live in registers."""
    n_outer = len(plan.outer)
    loop_of = {n.name: loop for loop in plan.loops for n in loop.nodes}
    in_kernel = {n.name: n for n in plan.nodes}
    must_store: set[str] = set()
    reads: set[str] = set()
    for n in plan.nodes:
        loads, _ = n.accesses(n_outer)
        for name, _expr in loads:
            if name in in_kernel:
                p = in_kernel[name]
                if (
                    not p.is_reduction
                    and loop_of[name].inner
                    and loop_of[name] is not loop_of[n.name]
                ):
                    must_store.add(name)
            else:
                reads.add(name)
    private = must_store - external_readers - outputs
    plan.private = {}
    for name in sorted(private):
        numel = _private_numel(in_kernel[name], n_outer, loop_of[name].inner)
        if numel is not None:
            plan.private[name] = numel
    plan.stores = [
        n.name
        for n in plan.nodes
        if n.name not in plan.private
        and (n.name in must_store or n.name in external_readers or n.name in outputs)
    ]
    plan.loads = sorted(reads)


#: Largest iteration-local buffer (bytes) a kernel may keep instead of a graph buffer.
PRIVATE_BYTES = 64 * 1024


def _private_numel(node: SchedNode, n_outer: int, inner: tuple[int, ...]) -> int | None:
    """Elements per outer iteration if ``node``'s store offsets within one iteration are
    ``0 <= offset < numel(inner)`` (see :func:`private_offset`); None otherwise."""
    numel = 1
    for s in inner:
        numel *= s
    if numel * node.buffer.layout.dtype.itemsize > PRIVATE_BYTES:
        return None
    _, inner_syms = node.symbols(n_outer)
    _, store = node.accesses(n_outer)
    fit = affine_coefficients(private_offset(store, inner_syms), inner_syms)
    if fit is None or fit[1] != 0 or any(c < 0 for c in fit[0].values()):
        return None
    top = sum(c * (size - 1) for c, size in zip((fit[0][s] for s in inner_syms), inner))
    return numel if top < numel else None


def private_offset(index: sympy.Expr, inner_syms: Sequence[sympy.Symbol]) -> sympy.Expr:
    """``index`` relative to the start of its outer iteration (inner symbols at 0)."""
    return sympy.expand(index - index.xreplace({s: 0 for s in inner_syms}))


def schedule(graph: LoweredGraph, options: InductorOptions) -> list[Step]:
    """Fuse computed buffers into kernels and order kernels and extern calls."""
    from .fusion import fuse

    items: list[SchedNode | ExternCall] = []
    multi: dict[str, list[MultiOutput]] = {}
    for buf in graph.buffers:
        if isinstance(buf, MultiOutput):
            multi.setdefault(buf.source.name, []).append(buf)
    owner: dict[str, int] = {}
    for buf in graph.buffers:
        if isinstance(buf, ComputedBuffer):
            items.append(make_sched_node(len(items), buf))
        elif isinstance(buf, ExternKernel):
            items.append(ExternCall(buf, multi.get(buf.name, [])))
        else:
            continue
        owner[buf.name] = len(items) - 1
        for m in multi.get(buf.name, []):
            owner[m.name] = len(items) - 1
    deps = _dependencies(items, owner)
    groups = fuse(items, deps, options)
    outputs = {o.name for o in graph.outputs if o.kind in ("buffer", "view")}
    readers: dict[str, set[int]] = {}
    for gi, members in enumerate(groups):
        for i in members:
            for name in _reads(items[i]):
                readers.setdefault(name, set()).add(gi)
    steps: list[Step] = []
    for gi, members in enumerate(_order_groups(groups, deps)):
        first = items[members[0]]
        if isinstance(first, ExternCall):
            steps.append(first)
            continue
        nodes = [items[i] for i in members]
        plan = plan_kernel(nodes, options.max_fusion_size)  # type: ignore[arg-type]
        assert isinstance(plan, KernelPlan), plan
        plan.name = f"kernel{sum(isinstance(s, KernelPlan) for s in steps)}"
        member_set = set(members)
        external = {
            n.name
            for n in plan.nodes
            if any(g_members_other(groups, g, member_set) for g in readers.get(n.name, ()))
        }
        _elide_locals(plan, external, outputs)
        steps.append(plan)
        del gi
    return steps


def g_members_other(groups: list[list[int]], g: int, members: set[int]) -> bool:
    return not set(groups[g]) <= members


def _reads(item: SchedNode | ExternCall) -> set[str]:
    if isinstance(item, SchedNode):
        return set(item.reads)
    names: set[str] = set()
    from torch.utils._pytree import tree_flatten

    for a in tree_flatten((item.kernel.args, item.kernel.kwargs))[0]:
        if isinstance(a, ReinterpretView):
            names.add(a.base.name)
        elif isinstance(a, Buffer):
            names.add(a.name)
    return names


def _dependencies(items: list[SchedNode | ExternCall], owner: dict[str, int]) -> list[set[int]]:
    """Item -> items it must follow (reads after writes, and ordering around mutations)."""
    deps: list[set[int]] = [set() for _ in items]
    readers_since_write: dict[str, set[int]] = {}
    last_mutation: dict[str, int] = {}
    for i, item in enumerate(items):
        for name in _reads(item):
            if name in owner and owner[name] != i:
                deps[i].add(owner[name])
            if name in last_mutation and last_mutation[name] != i:
                deps[i].add(last_mutation[name])
            readers_since_write.setdefault(name, set()).add(i)
        if isinstance(item, ExternCall):
            for name in item.kernel.mutated:
                deps[i] |= {r for r in readers_since_write.get(name, set()) if r != i}
                last_mutation[name] = i
                readers_since_write[name] = set()
    return deps


def _order_groups(groups: list[list[int]], deps: list[set[int]]) -> list[list[int]]:
    """Topological order of groups, earliest-created first (frees buffers early)."""
    group_of = {i: g for g, members in enumerate(groups) for i in members}
    gdeps = [
        {group_of[d] for i in members for d in deps[i]} - {g} for g, members in enumerate(groups)
    ]
    done: set[int] = set()
    order: list[list[int]] = []
    pending = sorted(range(len(groups)), key=lambda g: min(groups[g]))
    while pending:
        for g in pending:
            if gdeps[g] <= done:
                break
        else:  # pragma: no cover - fusion never creates cycles
            raise RuntimeError("cycle between fused kernels")
        pending.remove(g)
        done.add(g)
        order.append(sorted(groups[g]))
    return order


def log_rejection(a: str, b: str, reason: str) -> None:
    perf_hints.debug("not fusing %s into %s: %s", b, a, reason)


def iteration_symbols(plan: KernelPlan) -> tuple[list[sympy.Symbol], dict[int, list[sympy.Symbol]]]:
    outer = index_symbols("x", len(plan.outer))
    inner = {k: index_symbols("r", len(loop.inner)) for k, loop in enumerate(plan.loops)}
    return outer, inner


__all__ = [
    "ExternCall",
    "Index",
    "KernelPlan",
    "Loop",
    "SchedNode",
    "Step",
    "plan_kernel",
    "schedule",
]
