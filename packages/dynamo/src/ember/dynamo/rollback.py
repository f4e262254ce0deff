"""Rolling the translator back to just before a failing instruction.

Trackers are immutable and everything that changes in place (list and dict
items, cells, iterator positions, grad-mode blocks, pending side effects,
the root frame's locals and cells) is written through the capture's
:class:`~ember.dynamo.mutable.Trail`. So the checkpoint taken before each
top-level instruction is small: a mark in the trail, the value stack's
references, pending keyword names, the graph's last node and the grad mode.
When the instruction raises ``Unsupported``, :func:`restore` undoes the
trail to the mark and drops the graph nodes the instruction added; the frame
can then be split right there, even when the failing call had already
mutated a container.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .variables.base import VariableTracker

if TYPE_CHECKING:
    from .translator_core import TranslatorCore


@dataclass(frozen=True, slots=True)
class Checkpoint:
    mark: int
    stack: tuple[VariableTracker, ...]
    kw_names: tuple[str, ...]
    last_node: Any
    grad_enabled: bool


def checkpoint(tx: TranslatorCore) -> Checkpoint:
    """The state before the instruction about to run (nothing older is ever undone)."""
    trail = tx.output.trail
    trail.forget()
    nodes = tx.output.graph.nodes
    last = next(iter(reversed(nodes)), None) if len(nodes) else None
    return Checkpoint(trail.mark(), tuple(tx.stack), tx.kw_names, last, torch.is_grad_enabled())


def restore(tx: TranslatorCore, cp: Checkpoint) -> None:
    """Undo a partly executed instruction: in-place changes, graph nodes, stack."""
    tx.output.trail.undo(cp.mark)
    graph: torch.fx.Graph = tx.output.graph
    for node in reversed(list(graph.nodes)):
        if node is cp.last_node:
            break
        if node.op == "placeholder":
            continue
        graph.erase_node(node)
    alive = set(graph.nodes)
    tx.output.attrs = {k: v for k, v in tx.output.attrs.items() if v.node in alive}
    tx.stack[:] = cp.stack
    tx.kw_names = cp.kw_names
    torch._C._set_grad_enabled(cp.grad_enabled)
