"""Fusion: greedily put each computed buffer into the best legal kernel.

Legality is ``kernel_plan.plan_kernel`` plus a cycle check; preference is
``score`` (memory traffic saved: vertical fusion first, then siblings that
read the same inputs). Every rejection is logged under ``perf_hints``.
"""

from __future__ import annotations

from .inplace import update_conflict
from .kernel_plan import ExternCall, SchedNode, plan_kernel
from .logs import perf_hints
from .options import InductorOptions


def score(group: list[SchedNode], node: SchedNode) -> tuple[int, int, int]:
    """(is vertical, shared reads, proximity): higher is better."""
    names = {n.name for n in group}
    vertical = len(node.reads & names)
    shared = len(node.reads & frozenset().union(*(n.reads for n in group)))
    return (1 if vertical else 0, vertical + shared, max(n.order for n in group))


def fuse(
    items: list[SchedNode | ExternCall],
    deps: list[set[int]],
    options: InductorOptions,
    updates: dict[str, str] | None = None,
) -> list[list[int]]:
    """Groups of item indices; an extern call is always alone. ``updates``: buffers
    computed into an input's memory (``inplace.py``), which constrain what may share a kernel."""
    users: list[set[int]] = [set() for _ in items]
    for i, ds in enumerate(deps):
        for d in ds:
            users[d].add(i)
    group_of: dict[int, int] = {}
    groups: list[list[int]] = []
    for i, item in enumerate(items):
        if not isinstance(item, SchedNode):
            group_of[i] = len(groups)
            groups.append([i])
            continue
        candidates: set[int] = {group_of[d] for d in deps[i] if isinstance(items[d], SchedNode)}
        for g, members in enumerate(groups):
            first = items[members[0]]
            if (
                isinstance(first, SchedNode)
                and g not in candidates
                and item.reads & frozenset().union(*(items[m].reads for m in members))  # type: ignore[union-attr]
            ):
                candidates.add(g)
        ranked = sorted(
            candidates,
            key=lambda g: score([items[m] for m in groups[g]], item),  # type: ignore[misc]
            reverse=True,
        )
        placed = False
        for g in ranked:
            members = groups[g]
            nodes: list[SchedNode] = [items[m] for m in members] + [item]  # type: ignore[assignment]
            plan = plan_kernel(nodes, options.max_fusion_size)
            if not isinstance(plan, str):
                plan = update_conflict(nodes, plan, updates or {}) or plan
            if isinstance(plan, str):
                log_rejection(",".join(n.name for n in nodes[:-1]), item.name, plan)
                continue
            if _creates_cycle(set(members), deps[i], users, group_of, groups):
                log_rejection(
                    ",".join(n.name for n in nodes[:-1]), item.name, "would create a cycle"
                )
                continue
            members.append(i)
            group_of[i] = g
            placed = True
            break
        if not placed:
            group_of[i] = len(groups)
            groups.append([i])
    return groups


def log_rejection(a: str, b: str, reason: str) -> None:
    perf_hints.debug("not fusing %s into %s: %s", b, a, reason)


def _creates_cycle(members: set[int], node_deps: set[int], users: list[set[int]],
                   group_of: dict[int, int], groups: list[list[int]]) -> bool:
    """True if one of the node's inputs outside the group is computed after the group.

    The walk is over kernels, not single nodes: a kernel runs as a whole, so once the
    walk reaches one member of another kernel, every user of every member of that kernel
    runs after the group too. A walk over nodes alone misses a cycle through a kernel
    whose one member reads the group while another member computes the node's input
    (the "cycle between fused kernels" of CLIP's backward).
    """
    outside = node_deps - members
    if not outside:
        return False
    targets = {group_of[d] for d in outside if d in group_of}
    seen: set[int] = set()
    expanded: set[int] = set()
    stack = [u for m in members for u in users[m] if u not in members]
    while stack:
        x = stack.pop()
        if x in seen or x in members:
            continue
        if x in outside:
            return True
        seen.add(x)
        h = group_of.get(x)
        if h is None:  # not placed yet: only its own users follow it
            stack.extend(users[x])
            continue
        if h in targets:
            return True
        if h not in expanded:
            expanded.add(h)
            stack.extend(u for m in groups[h] for u in users[m])
    return False
