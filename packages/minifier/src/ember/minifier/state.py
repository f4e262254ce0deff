"""The minifier's state: a graph plus one example value per placeholder, and its edits.

A `State` is never mutated: every edit copies the graph and returns a new `State`.
The one edit everything else is built from is `remove_nodes`: delete a set of
nodes, turning the values that kept nodes still read into new graph inputs whose
example values are computed by running the current graph eagerly.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from ember.minifier.errors import GraphEditError, InputMismatch

COMPUTE_OPS = frozenset({"call_function", "call_method", "call_module"})


@dataclass(frozen=True, slots=True)
class State:
    """A graph and its example inputs, aligned with the graph's placeholders in order."""

    gm: fx.GraphModule
    inputs: tuple[Any, ...]
    _values: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        n = len(placeholders(self.gm.graph))
        if n != len(self.inputs):
            raise InputMismatch(n, len(self.inputs))

    @property
    def size(self) -> int:
        """Number of compute nodes (call_function, call_method, call_module)."""
        return len(compute_nodes(self.gm.graph))

    def values(self) -> dict[str, Any]:
        """Eager value of every node, by node name (computed once per state)."""
        if not self._values:
            self._values.update(eager_node_values(self.gm, self.inputs))
        return self._values


def placeholders(graph: fx.Graph) -> list[fx.Node]:
    return [n for n in graph.nodes if n.op == "placeholder"]


def compute_nodes(graph: fx.Graph) -> list[fx.Node]:
    return [n for n in graph.nodes if n.op in COMPUTE_OPS]


def output_node(graph: fx.Graph) -> fx.Node:
    node: fx.Node
    for node in reversed(graph.nodes):
        if node.op == "output":
            return node
    raise GraphEditError("output", "the graph has no output node")


def output_values(graph: fx.Graph) -> list[Any]:
    """The graph's outputs as a flat list (single output, tuple or list)."""
    out = output_node(graph).args[0]
    if isinstance(out, (tuple, list)):
        return list(out)
    return [out]


class _Recorder(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm, garbage_collect_values=False)
        self.seen: dict[str, Any] = {}

    def run_node(self, n: fx.Node) -> Any:
        value = super().run_node(n)
        self.seen[n.name] = value
        return value


def eager_node_values(gm: fx.GraphModule, inputs: Sequence[Any]) -> dict[str, Any]:
    """Run ``gm`` eagerly on ``inputs`` and return every node's value by name."""
    rec = _Recorder(gm)
    with torch.no_grad():
        rec.run(*inputs)
    return rec.seen


def run_eager(gm: fx.GraphModule, inputs: Sequence[Any]) -> Any:
    """Run ``gm`` eagerly (no autograd) and return its result."""
    with torch.no_grad():
        return fx.Interpreter(gm).run(*inputs)


def copy_graph(gm: fx.GraphModule) -> tuple[fx.Graph, dict[fx.Node, fx.Node]]:
    """A copy of ``gm.graph`` and the old-node -> new-node map."""
    g = fx.Graph(owning_module=gm)  # DCE's purity check looks up call_module targets
    env: dict[fx.Node, fx.Node] = {}
    out = g.graph_copy(gm.graph, env)
    g.output(out)
    return g, env


def fresh_module(gm: fx.GraphModule) -> fx.GraphModule:
    """A module with its own copy of the graph (tensors and submodules shared).

    Backends may rewrite the graph they are given; this keeps the state intact
    without copying weights.
    """
    graph, _ = copy_graph(gm)
    return fx.GraphModule(gm, graph, class_name=type(gm).__name__)


def detach_attributes(gm: fx.GraphModule) -> None:
    """Make every tensor attribute a leaf (unpickling can revive views of parameters)."""
    for mod in gm.modules():
        for name, buf in list(mod._buffers.items()):
            if buf is not None and not buf.is_leaf:
                mod._buffers[name] = buf.detach()
        for name, value in list(vars(mod).items()):
            if isinstance(value, torch.Tensor) and not value.is_leaf:
                setattr(mod, name, value.detach())


def build(gm: fx.GraphModule, graph: fx.Graph, inputs: Sequence[Any]) -> State:
    """A new state whose module shares ``gm``'s submodules and attributes."""
    graph.lint()
    new = fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    return State(new, tuple(inputs))


def _as_input_value(node: fx.Node, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (bool, int, float)):
        return value
    raise GraphEditError(node.name, f"its value is a {type(value).__name__}, not a tensor or number")


def new_placeholder(graph: fx.Graph, name: str, like: fx.Node) -> fx.Node:
    """A new placeholder after the existing ones, carrying ``like``'s metadata."""
    phs = placeholders(graph)
    if phs:
        ctx = graph.inserting_after(phs[-1])
    else:
        ctx = graph.inserting_before(next(iter(graph.nodes)))
    with ctx:
        ph = graph.placeholder(name)
    ph.meta = dict(like.meta)
    return ph


def _set_outputs(graph: fx.Graph, outs: list[Any]) -> None:
    out = output_node(graph)
    old = out.args[0]
    if isinstance(old, (tuple, list)) or len(outs) != 1:
        out.args = (tuple(outs) if not isinstance(old, list) else list(outs),)
    else:
        out.args = (outs[0],)


def normalize(graph: fx.Graph, inputs: list[Any]) -> list[Any]:
    """Dead-code-eliminate ``graph`` and drop unused placeholders (and their inputs)."""
    graph.eliminate_dead_code()
    kept: list[Any] = []
    for p, value in zip(placeholders(graph), inputs, strict=True):
        if p.users:
            kept.append(value)
        else:
            graph.erase_node(p)
    return kept


def remove_nodes(state: State, names: Iterable[str]) -> State | None:
    """Delete the named compute nodes.

    Values of deleted nodes that kept nodes still read become new inputs (their
    example values come from eager); tuple-valued nodes are cut at their
    ``getitem`` users instead. Deleted nodes leave the outputs; if no output
    would remain, kept nodes that lost their last user become the outputs.
    Returns ``None`` when the edit is impossible or removes nothing.
    """
    doomed = set(names)
    if not doomed:
        return None
    values = state.values()
    graph, env = copy_graph(state.gm)
    by_name = {n.name: n for n in graph.nodes}
    inputs = list(state.inputs)
    # A tuple-valued node read by kept getitems: cut at the getitems instead.
    for name in list(doomed):
        node = by_name[name]
        if isinstance(values.get(name), (tuple, list)):
            for user in node.users:
                if user.name in doomed:
                    continue
                if user.op == "call_function" and user.target is operator.getitem:
                    doomed.add(user.name)
                elif user.op != "output":
                    return None
    orphans: set[fx.Node] = set()
    outs = output_values(graph)
    new_outs = [o for o in outs if not (isinstance(o, fx.Node) and o.name in doomed)]
    try:
        for node in list(graph.nodes):
            if node.name not in doomed:
                continue
            kept_users = [u for u in node.users if u.name not in doomed and u.op != "output"]
            for arg in node.all_input_nodes:
                if arg.name not in doomed and arg.op in COMPUTE_OPS:
                    orphans.add(arg)
            if not kept_users:
                continue
            value = _as_input_value(node, values[node.name])
            ph = new_placeholder(graph, f"cut_{node.name}", node)
            for u in kept_users:
                u.replace_input_with(node, ph)
            inputs.append(value)
    except GraphEditError:
        return None
    if not new_outs:
        new_outs = [o for o in compute_nodes(graph) if o in orphans]
        new_outs = [o for o in new_outs if all(u.name in doomed or u.op == "output" for u in o.users)]
        if not new_outs:
            return None
    _set_outputs(graph, new_outs)
    for node in reversed(list(graph.nodes)):
        if node.name in doomed:
            graph.erase_node(node)
    # placeholders were appended in graph order but inputs in append order: realign
    inputs = _realign(graph, state, inputs, env)
    inputs = normalize(graph, inputs)
    if not compute_nodes(graph):
        return None
    return build(state.gm, graph, inputs)


def _realign(
    graph: fx.Graph, state: State, inputs: list[Any], env: dict[fx.Node, fx.Node]
) -> list[Any]:
    """Inputs in the new graph's placeholder order (old inputs first, then cut values)."""
    old = placeholders(state.gm.graph)
    by_new: dict[str, Any] = {env[p].name: v for p, v in zip(old, state.inputs, strict=True)}
    cut = [p for p in placeholders(graph) if p.name not in by_new]
    by_new.update({p.name: v for p, v in zip(cut, inputs[len(old):], strict=True)})
    return [by_new[p.name] for p in placeholders(graph)]
