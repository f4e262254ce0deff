"""Scheduling: which buffers are computed by which kernel, and in what order.

Backend-neutral. Input: the realized buffers of a ``LoweredGraph``. Output: a
list of ``KernelPlan`` (``kernel_plan.py``) and extern calls in execution
order, each plan with its loop structure (an outer iteration space, then a
sequence of inner loops, both also merged: ``lay_out_loops``), which of its
buffers stay in registers or in iteration-local storage, and what it reads and
writes. When buffers are allocated and freed is ``memory_plan.py``'s job.

Legality lives in ``kernel_plan.plan_kernel`` (it returns a reason string when
nodes cannot share a kernel); preference lives in ``fusion.score``.
"""

from __future__ import annotations

import sympy

from .fusion import fuse
from .graph import LoweredGraph
from .horizontal import fuse_horizontal
from .index import affine_coefficients
from .inplace import add_update_deps, ordered_updates
from .ir import ComputedBuffer, ExternKernel, MultiOutput
from .kernel_plan import (
    ExternCall,
    KernelPlan,
    SchedNode,
    Step,
    make_sched_node,
    plan_kernel,
    private_numel,
)
from .limits import PRIVATE_BYTES
from .loops import MergedLoops, merge_loops
from .options import InductorOptions
from .sizes import as_size


def _elide_locals(
    plan: KernelPlan, external_readers: set[str], outputs: set[str], private_bytes: int
) -> None:
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
        numel = private_numel(in_kernel[name], n_outer, loop_of[name].inner, private_bytes)
        if numel is not None:
            plan.private[name] = numel
    plan.stores = [
        n.name
        for n in plan.nodes
        if n.name not in plan.private
        and (n.name in must_store or n.name in external_readers or n.name in outputs)
    ]
    plan.loads = sorted(reads)


def schedule(
    graph: LoweredGraph,
    options: InductorOptions,
    private_bytes: int = PRIVATE_BYTES,
    updates: dict[str, str] | None = None,
) -> list[Step]:
    """Fuse computed buffers into kernels and order kernels and extern calls.

    ``private_bytes``: the largest iteration-local buffer the code generator can keep
    (0: it keeps none, every such buffer is a graph buffer). ``updates``: output buffer ->
    the input it may be computed into (``inplace.candidate_updates``); the ones the
    schedule allows end up in the writing kernel's ``KernelPlan.inplace``.
    """
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
    inplace = ordered_updates(items, updates or {})
    add_update_deps(items, deps, inplace)
    groups = fuse(items, deps, options, inplace)
    if options.horizontal_fusion:
        groups = fuse_horizontal(items, groups, deps, options.max_fusion_size)
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
        plan.hints = graph.hints
        plan.inplace = {n.name: inplace[n.name] for n in plan.nodes if n.name in inplace}
        member_set = set(members)
        external = {
            n.name
            for n in plan.nodes
            if any(g_members_other(groups, g, member_set) for g in readers.get(n.name, ()))
        }
        _elide_locals(plan, external, outputs, private_bytes)
        lay_out_loops(plan)
        steps.append(plan)
        del gi
    return steps


def lay_out_loops(plan: KernelPlan) -> None:
    """Merge the plan's outer dims, then each loop's inner dims, where every access allows.

    Outer dims merge over every load and store of the kernel; a loop's inner dims over
    the loads of its nodes and the stores of its pointwise nodes (a reduction's store
    does not depend on the inner loop), knowing the merged outer ranges.
    """
    outer_syms = plan.outer_symbols
    n_outer = len(plan.outer)
    accesses: list[sympy.Expr] = []
    for n in plan.nodes:
        loads, store = n.accesses(n_outer)
        accesses.extend(e for _, e in loads)
        accesses.append(store)
    if plan.is_pointwise:
        # any loop order computes a pointwise kernel: iterate in its stores' memory order
        # (a channels-last store walks C innermost, not W with stride C)
        perm = _store_order(plan, outer_syms)
        outer = merge_loops(
            [plan.outer[i] for i in perm], [outer_syms[i] for i in perm], accesses
        )
    else:
        outer = merge_loops(plan.outer, outer_syms, accesses)
    plan.outer_loops = outer
    if plan.is_pointwise:  # no inner dims anywhere: indices are rewritten by ``outer`` alone
        for loop in plan.loops:
            loop.ranges = MergedLoops((), (), lambda e: e)
        return
    for loop in plan.loops:
        inner_accesses: list[sympy.Expr] = []
        for n in loop.nodes:
            loads, store = n.accesses(n_outer)
            inner_accesses.extend(outer.rewrite(e) for _, e in loads)
            if not n.is_reduction:
                inner_accesses.append(outer.rewrite(store))
        loop.ranges = merge_loops(loop.inner, loop.symbols, inner_accesses, outer.ranges)


def _store_order(plan: KernelPlan, syms: list[sympy.Symbol]) -> list[int]:
    """The outer dims ordered by the stride every store of ``plan`` gives them (largest
    first), where the stores agree; else the logical order. Symbolic strides compare by
    their values for the inputs at hand (a loop order is a heuristic: any order computes
    a pointwise kernel): a channels-last store of symbolic size walks C innermost too
    (it walked H*W with stride C, gathering: a batch norm 16 -> 91 us at dynamic shapes)."""
    order: list[int] | None = None
    for n in plan.nodes:
        _, store = n.accesses(len(syms))
        fit = affine_coefficients(store, syms)
        if fit is None:
            return list(range(len(syms)))
        try:
            coeffs = [plan.hints.hint(as_size(fit[0].get(s, 0))) for s in syms]
        except (ValueError, TypeError):  # a stride without a value for these inputs
            return list(range(len(syms)))
        mine = sorted(range(len(syms)), key=lambda i: -coeffs[i])  # stable: ties stay
        if order is not None and mine != order:
            return list(range(len(syms)))
        order = mine
    return order if order is not None else list(range(len(syms)))


def g_members_other(groups: list[list[int]], g: int, members: set[int]) -> bool:
    return not set(groups[g]) <= members


def _reads(item: SchedNode | ExternCall) -> set[str]:
    if isinstance(item, SchedNode):
        return set(item.reads)
    return set(item.kernel.buffer_args())


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


__all__ = ["PRIVATE_BYTES", "lay_out_loops", "schedule"]
