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
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import sympy
import torch

from .graph import LoweredGraph
from .inplace import dense
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
    #: ``reuses`` is a buffer this very kernel reads for the last time, only where it
    #: stores this one (:func:`_dying_operand`): the kernel computes in place
    in_place: bool = False


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
    # kernels computing a store in place of a buffer they read for the last time (decided
    # first: a store computed in place takes nothing from the pool)
    taken: set[str] = set()
    # a buffer computed into an input is that input's memory: never another value's
    into_inputs = {b for s in steps if isinstance(s, KernelPlan) for b in s.inplace}
    held = keep | inputs | pinned | multi_names | into_inputs
    for i, step in enumerate(steps):
        if not isinstance(step, KernelPlan):
            continue
        step.in_place_of = {}
        for name in step.stores:
            # a graph output too: the memory of a value nobody else holds is the caller's
            # to keep (a tied embedding's two gradients added into the first's buffer)
            if name in step.inplace:
                continue
            dying = _dying_operand(step, name, layouts, taken, functools.partial(
                _dies_at, i, last_use, held))
            if dying is not None:
                # the kernel aliases the two pointers (``KernelPlan.in_place_of``)
                step.in_place_of[name] = dying
                taken.add(dying)
    pool: dict[tuple[int, torch.dtype], list[str]] = {}
    # kernel stores still to come that could take a pooled buffer, by pool key: a dead
    # buffer no later store can take is freed at once (held in the pool to the end of the
    # call, it only raised the peak: densenet121's concatenations, every size once)
    to_come = collections.Counter(
        _pool_key(layouts[name])
        for step in steps if isinstance(step, KernelPlan)
        for name in step.stores
        if name not in step.inplace and name not in step.in_place_of and name not in outputs
    )
    allocated: set[str] = set()
    plan: list[StepMemory] = []
    for i, step in enumerate(steps):
        mem = StepMemory()
        if isinstance(step, KernelPlan):
            for name in step.stores:
                lay = layouts[name]
                if name in step.in_place_of:
                    mem.allocate.append(Allocation(name, lay, step.in_place_of[name], in_place=True))
                    allocated.add(name)
                    continue
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
        for name in sorted(n for n, s in last_use.items()
                           if s == i and n not in keep and n not in taken):
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


def _dies_at(i: int, last_use: dict[str, int], held: set[str], name: str) -> bool:
    """Whether buffer ``name``'s last use is step ``i`` and nothing else holds it."""
    return last_use.get(name) == i and name not in held


def _dying_operand(
    step: KernelPlan, name: str, layouts: dict[str, Layout], taken: set[str],
    dies_here: Callable[[str], bool],
) -> str | None:
    """A buffer pointwise kernel ``step`` may compute its store ``name`` into, or None.

    Eager's in-place ops without the user asking (``grad * mask`` written over ``grad``):
    a buffer the kernel reads for the last time (``dies_here``: not an input, output,
    constant, nor memory an extern may alias) of ``name``'s bytes and dtype, read by this
    kernel only at the address ``name`` stores to in the same iteration (the index
    expressions are equal; ``name``'s layout is dense, so no two iterations store to one
    address), and only by nodes that run before the writer or by the writer itself, so
    every element is read before it is overwritten. Each such buffer is taken once."""
    if not step.is_pointwise:
        return None
    order = [n for loop in step.loops for n in loop.nodes]
    at = next((k for k, n in enumerate(order) if n.name == name), None)
    if at is None:
        return None
    n_outer = len(step.outer)
    _, store = order[at].accesses(n_outer)
    lay = layouts[name]
    if not dense(lay) or lay.offset != 0:
        return None
    for cand in step.loads:
        other = layouts.get(cand)
        if (cand in taken or other is None or _pool_key(other) != _pool_key(lay)
                or other.offset != 0 or not dies_here(cand)):
            continue
        readers = [k for k, n in enumerate(order) if cand in n.reads]
        if any(k > at for k in readers):
            continue
        if all(sympy.expand(e - store) == 0
               for k in readers for b, e in order[k].accesses(n_outer)[0] if b == cand):
            return cand
    return None


def _aliased_by_externs(steps: list[Step]) -> set[str]:
    """Buffers an extern op may return a view of, and what it returns then (an in-place
    op's result is its input: ``x.mul_(2)`` returns graph input ``x``): their memory must
    never be reused."""
    pinned: set[str] = set()
    for step in steps:
        if not isinstance(step, ExternCall):
            continue
        schema = getattr(step.kernel.op, "_schema", None)
        if schema is not None and not any(r.alias_info is not None for r in schema.returns):
            continue
        pinned.update(step.kernel.buffer_args())
        pinned.add(step.kernel.name)
        pinned.update(m.name for m in step.outputs)
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
