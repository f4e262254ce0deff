"""Rolling the translator back to just before a failing instruction.

Before each top-level instruction the translator takes a :class:`Snapshot`
(value stack, locals, pending side effects, grad mode, graph tail, iterator
positions); when the instruction raises ``Unsupported``, :func:`restore`
puts everything back so the frame can be split there. A change made in
place to a list or dict tracker cannot be undone: ``restore`` raises
``Unsupported`` and the caller traces the frame again, stopping before the
instruction (``RestartAnalysis``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .errors import Unsupported
from .variables.base import VariableTracker
from .variables.lists import ListIteratorVariable

if TYPE_CHECKING:
    from .translator_core import TranslatorCore


@dataclass
class Snapshot:
    stack: list[VariableTracker]
    locals: dict[str, VariableTracker]
    kw_names: tuple[str, ...]
    last_node: Any
    attrs: dict[Any, Any]
    globals: dict[str, Any]
    mutations: int
    grad_enabled: bool
    cells: dict[str, Any]
    iterators: list[tuple[ListIteratorVariable, int]] = field(default_factory=list)


def take_snapshot(tx: TranslatorCore) -> Snapshot:
    nodes = tx.output.graph.nodes
    last = next(iter(reversed(nodes)), None) if len(nodes) else None
    return Snapshot(
        list(tx.stack),
        dict(tx.symbolic_locals),
        tx.kw_names,
        last,
        dict(tx.output.side_effects.attrs),
        dict(tx.output.side_effects.globals),
        tx.output.mutations,
        torch.is_grad_enabled(),
        dict(tx.output.side_effects.cells),
        [
            (v, v.index)
            for v in [*tx.stack, *tx.symbolic_locals.values()]
            if isinstance(v, ListIteratorVariable)
        ],
    )


def restore(tx: TranslatorCore, snap: Snapshot) -> None:
    """Undo a partly-executed instruction (graph nodes, stack, effects)."""
    if tx.output.mutations != snap.mutations:
        raise Unsupported("cannot split the graph here: a container was mutated by the failing call")
    graph: torch.fx.Graph = tx.output.graph
    for node in reversed(list(graph.nodes)):
        if node is snap.last_node:
            break
        if node.op == "placeholder":
            continue
        graph.erase_node(node)
    alive = set(graph.nodes)
    tx.output.attrs = {k: v for k, v in tx.output.attrs.items() if v.node in alive}
    tx.stack[:] = snap.stack
    tx.symbolic_locals.clear()
    tx.symbolic_locals.update(snap.locals)
    tx.kw_names = snap.kw_names
    tx.output.side_effects.attrs = dict(snap.attrs)
    tx.output.side_effects.cells = dict(snap.cells)
    for it, index in snap.iterators:
        it.index = index
    tx.output.side_effects.globals = dict(snap.globals)
    torch._C._set_grad_enabled(snap.grad_enabled)
