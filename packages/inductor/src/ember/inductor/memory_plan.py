"""Memory planning: when each buffer is allocated, reused and freed. Backend-neutral.

Input: the scheduled steps (kernels and extern calls, in order) and the lowered
graph. Output: per step, the buffers to allocate before it (a fresh allocation,
or a view of a dead buffer of the same dtype and byte size) and the buffers to
drop after it. The wrapper only prints this plan, with the backend's own
allocation call; it decides nothing.

A buffer dies after the last step that reads or writes it. A dead buffer a
kernel allocated goes to a pool keyed by (bytes, dtype) instead of being freed,
so a later kernel output of the same size takes its memory. Constants and
outputs never die; neither does memory an extern call may return a view of (its
schema says the result aliases an argument). A graph input dies too: the
wrapper drops its name after its last use, which frees it where the caller
handed the inputs over (``ember.ir.boxed``: a training backward's saved values,
ADR 0063); its memory never enters the pool (someone else may hold it). An
input a kernel computes an update into stays (the wrapper reads its address).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import torch

from .graph import LoweredGraph
from .ir import Layout
from .kernel_plan import ExternCall, KernelPlan, Step


@dataclass(frozen=True, slots=True)
class Allocation:
    """Memory for buffer ``name`` before a kernel writes it."""

    name: str
    layout: Layout
    #: a dead buffer whose memory this one takes (same dtype and byte size), or None
    reuses: str | None = None
    #: the graph input this buffer is computed into (``inplace.py``): no memory of its own
    into_input: str | None = None


@dataclass
class StepMemory:
    allocate: list[Allocation] = field(default_factory=list)
    #: buffers dropped after the step (dead, and not kept in the reuse pool)
    free: list[str] = field(default_factory=list)


def _itemsize(dtype: torch.dtype) -> int:
    return dtype.itemsize


def _pool_key(layout: Layout) -> tuple[int, torch.dtype]:
    return layout.storage_numel() * _itemsize(layout.dtype), layout.dtype


def plan_memory(graph: LoweredGraph, steps: list[Step]) -> list[StepMemory]:
    """One ``StepMemory`` per step of ``steps``."""
    layouts: dict[str, Layout] = {b.name: b.layout for b in graph.buffers}
    layouts.update({b.name: b.layout for b in graph.inputs})
    multi_names = {m.name for s in steps if isinstance(s, ExternCall) for m in s.outputs}
    last_use = _last_uses(steps)
    outputs = {o.name for o in graph.outputs if o.kind != "const"}
    inputs = {b.name for b in graph.inputs}
    # an input a kernel writes its new value into is read by name up to the call's end
    updated = {i for s in steps if isinstance(s, KernelPlan) for i in s.inplace.values()}
    keep = outputs | updated | set(graph.constants)
    pinned = _aliased_by_externs(steps)
    pool: dict[tuple[int, torch.dtype], list[str]] = {}
    # kernel stores still to come that could take a pooled buffer, by pool key: a dead
    # buffer no later store can take is freed at once (held in the pool to the end of the
    # call, it only raised the peak: densenet121's concatenations, every size once)
    to_come = collections.Counter(
        _pool_key(layouts[name])
        for step in steps if isinstance(step, KernelPlan)
        for name in step.stores if name not in step.inplace and name not in outputs
    )
    allocated: set[str] = set()
    plan: list[StepMemory] = []
    for i, step in enumerate(steps):
        mem = StepMemory()
        if isinstance(step, KernelPlan):
            for name in step.stores:
                lay = layouts[name]
                if name in step.inplace:
                    mem.allocate.append(Allocation(name, lay, into_input=step.inplace[name]))
                    allocated.add(name)
                    continue
                key = _pool_key(lay)
                free = pool.get(key)
                reuses = None
                if name not in outputs:
                    to_come[key] -= 1
                    reuses = free.pop() if free else None
                mem.allocate.append(Allocation(name, lay, reuses))
                allocated.add(name)
        for name in sorted(n for n, s in last_use.items() if s == i and n not in keep):
            dead = layouts.get(name)
            if (
                dead is not None and name in allocated and name not in pinned
                and name not in inputs
                and len(pool.get(_pool_key(dead), ())) < to_come[_pool_key(dead)]
            ):
                pool.setdefault(_pool_key(dead), []).append(name)
            elif name in layouts or name in multi_names:
                mem.free.append(name)
        plan.append(mem)
    return plan


def _aliased_by_externs(steps: list[Step]) -> set[str]:
    """Buffers an extern op may return a view of: their memory must never be reused."""
    pinned: set[str] = set()
    for step in steps:
        if not isinstance(step, ExternCall):
            continue
        schema = getattr(step.kernel.op, "_schema", None)
        if schema is not None and not any(r.alias_info is not None for r in schema.returns):
            continue
        pinned.update(step.kernel.buffer_args())
    return pinned


def _last_uses(steps: list[Step]) -> dict[str, int]:
    last: dict[str, int] = {}
    for i, step in enumerate(steps):
        if isinstance(step, KernelPlan):
            for name in step.args:
                last[name] = i
        else:
            for name in step.kernel.buffer_args():
                last[name] = i
            last[step.kernel.name] = i
            for m in step.outputs:
                last.setdefault(m.name, i)
    return last
