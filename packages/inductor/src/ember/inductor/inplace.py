"""In-place input updates: a graph output that is an input's new value is computed into it.

The frontend names such outputs on the graph (``ember.ir.updates``: an
optimizer step returns each parameter's next value, and the caller would copy
it into the parameter). Writing the value straight into the input saves a
buffer, the copy and its memory traffic. It is legal when nothing reads the
input's old value after the write:

- the output is a kernel's buffer (not an input, constant or extern result) with
  the input's layout, returned once, and the input itself is not returned;
- the input is dense and static (no two elements share memory), and no extern
  call reads it or the output (an ATen op may return a view of its argument);
- every kernel node that reads the input was created before the writer, and the
  writer reads it only where it stores (``p.add_(g)``, not ``x.copy_(x.flip(0))``).

The scheduler then orders the writer after every reader (:func:`add_update_deps`)
and rejects a fused kernel in which a reader would see the new value
(:func:`update_conflict`). Everything here is backend-neutral; the C++ backend
only drops ``__restrict__`` on the two pointers of one kernel that share memory.
"""

from __future__ import annotations

import sympy
import torch.fx

from ember.ir.updates import input_updates_of

from .graph import LoweredGraph
from .ir import ComputedBuffer, ExternKernel, Layout
from .kernel_plan import ExternCall, KernelPlan, SchedNode
from .sizes import is_static


def candidate_updates(graph: LoweredGraph, gm: torch.fx.GraphModule) -> dict[str, str]:
    """Output buffer -> input name, for the updates named on ``gm`` that the lowered graph
    allows (the first three rules of the module docstring)."""
    pairs = input_updates_of(gm)
    if not pairs:
        return {}
    computed = {b.name: b for b in graph.buffers if isinstance(b, ComputedBuffer)}
    inputs = {b.name: b for b in graph.inputs}
    returned: dict[str, int] = {}
    for o in graph.outputs:
        if o.kind in ("buffer", "view"):
            returned[o.name] = returned.get(o.name, 0) + 1
    extern_args: set[str] = set()
    for b in graph.buffers:
        if isinstance(b, ExternKernel):
            extern_args.update(b.buffer_args())
            extern_args.update(b.mutated)
    out: dict[str, str] = {}
    for k, i in pairs:
        if k >= len(graph.outputs):
            continue
        spec, inp = graph.outputs[k], inputs.get(f"arg{i}")
        buf = computed.get(spec.name) if spec.kind == "buffer" else None
        if buf is None or inp is None or spec.name in out:
            continue
        lay = inp.layout
        if (
            buf.layout != lay
            or returned.get(buf.name) != 1
            or inp.name in returned
            or not dense(lay)
            or buf.name in extern_args
            or inp.name in extern_args
        ):
            continue
        out[buf.name] = inp.name
    return out


def ordered_updates(
    items: list[SchedNode | ExternCall], candidates: dict[str, str]
) -> dict[str, str]:
    """The candidates whose readers all come before the writer, which reads the input only
    where it stores."""
    nodes = {it.name: it for it in items if isinstance(it, SchedNode)}
    out: dict[str, str] = {}
    for name, inp in candidates.items():
        writer = nodes.get(name)
        if writer is None:
            continue
        late = any(
            isinstance(it, SchedNode) and inp in it.reads and it.order > writer.order
            for it in items
        )
        if late or not _reads_only_at_store(writer, writer, inp, len(writer.sizes)):
            continue
        out[name] = inp
    return out


def add_update_deps(
    items: list[SchedNode | ExternCall], deps: list[set[int]], updates: dict[str, str]
) -> None:
    """Each writer runs after every other node reading the input it overwrites."""
    if not updates:
        return
    index = {it.name: i for i, it in enumerate(items) if isinstance(it, SchedNode)}
    for name, inp in updates.items():
        w = index[name]
        for i, it in enumerate(items):
            if i != w and isinstance(it, SchedNode) and inp in it.reads:
                deps[w].add(i)


def update_conflict(nodes: list[SchedNode], plan: KernelPlan, updates: dict[str, str]) -> str | None:
    """Why ``nodes`` cannot share a kernel given the in-place updates (None: they can)."""
    if not updates:
        return None
    n_outer = len(plan.outer)
    for w in nodes:
        inp = updates.get(w.name)
        if inp is None:
            continue
        for r in nodes:
            if r is w or inp not in r.reads:
                continue
            if not plan.is_pointwise or not _reads_only_at_store(r, w, inp, n_outer):
                return f"{r.name} reads {inp}, which {w.name} overwrites in place"
    return None


def dense(lay: Layout) -> bool:
    """Static, and every element at its own address with no gaps (a permutation of
    contiguous strides): writing one element changes no other."""
    if not is_static((*lay.size, *lay.stride, lay.offset)):
        return False
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(lay.size, lay.stride) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _reads_only_at_store(reader: SchedNode, writer: SchedNode, inp: str, n_outer: int) -> bool:
    loads, _ = reader.accesses(n_outer)
    _, store = writer.accesses(n_outer)
    return all(sympy.expand(e - store) == 0 for name, e in loads if name == inp)


__all__ = [
    "add_update_deps",
    "candidate_updates",
    "dense",
    "ordered_updates",
    "update_conflict",
]
