"""Horizontal fusion: independent pointwise kernels over the same loops become one kernel.

Runs after ``fusion.fuse`` (vertical fusion and siblings that share reads). What is
left are kernels that share no data, such as an optimizer step's per-parameter
updates (``p``, ``exp_avg`` and ``exp_avg_sq`` of one parameter are one kernel, each
parameter another) or the scalar bookkeeping beside them (each ``step += 1``). Such
kernels are merged when they are pointwise over the same outer loops, so a step of
many same-shaped parameters is one loop, not one call per parameter.

Merging two kernels is legal when neither reaches the other through the
dependency graph. The check is by *level* (the longest dependency chain from
the graph's inputs to a kernel): a dependency always goes to a lower level, so
kernels of one level never depend on each other, and a merged kernel keeps its
level, so the levels stay valid as merges happen, in one pass and linear time.
"""

from __future__ import annotations

from collections.abc import Hashable

from .kernel_plan import ExternCall, KernelPlan, SchedNode, plan_kernel
from .logs import perf_hints


def _levels(groups: list[list[int]], deps: list[set[int]]) -> list[int]:
    """Longest dependency chain below each group (a group of inputs-only readers is 0)."""
    group_of = {i: g for g, members in enumerate(groups) for i in members}
    gdeps = [
        {group_of[d] for i in members for d in deps[i]} - {g} for g, members in enumerate(groups)
    ]
    level: dict[int, int] = {}
    for start in range(len(groups)):
        stack = [start]
        while stack:  # iterative post-order: a deep chain must not hit the recursion limit
            g = stack[-1]
            if g in level:
                stack.pop()
                continue
            todo = [d for d in gdeps[g] if d not in level]
            if todo:
                stack.extend(todo)
                continue
            level[g] = 1 + max((level[d] for d in gdeps[g]), default=-1)
            stack.pop()
    return [level[g] for g in range(len(groups))]


def _pointwise_key(
    items: list[SchedNode | ExternCall], members: list[int], max_size: int
) -> Hashable | None:
    """The outer loop sizes of a pointwise kernel made of ``members``; None for anything else."""
    nodes = [items[i] for i in members]
    if not all(isinstance(n, SchedNode) for n in nodes):
        return None
    plan = plan_kernel(nodes, max_size)  # type: ignore[arg-type]
    if not isinstance(plan, KernelPlan) or not plan.is_pointwise:
        return None
    return tuple(str(s) for s in plan.outer)


def fuse_horizontal(
    items: list[SchedNode | ExternCall],
    groups: list[list[int]],
    deps: list[set[int]],
    max_size: int,
) -> list[list[int]]:
    """``groups`` with independent pointwise groups of equal outer loops merged (up to
    ``max_size`` nodes per kernel)."""
    levels = _levels(groups, deps)
    open_bucket: dict[tuple[int, Hashable], list[int]] = {}
    merged: list[list[int]] = []
    for g in sorted(range(len(groups)), key=lambda g: min(groups[g])):
        members = groups[g]
        key = _pointwise_key(items, members, max_size)
        if key is None:
            merged.append(list(members))
            continue
        slot = (levels[g], key)
        bucket = open_bucket.get(slot)
        if bucket is not None and len(bucket) + len(members) <= max_size:
            nodes = [items[i] for i in sorted(bucket + members)]
            plan = plan_kernel(nodes, max_size)  # type: ignore[arg-type]
            if isinstance(plan, KernelPlan):
                bucket.extend(members)
                continue
            perf_hints.debug("not fusing %s horizontally: %s", members, plan)
        bucket = list(members)
        open_bucket[slot] = bucket
        merged.append(bucket)
    return [sorted(m) for m in merged]


__all__ = ["fuse_horizontal"]
