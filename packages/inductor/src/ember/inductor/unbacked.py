"""Graphs with sizes that depend on data (unbacked symbols, ADR 0046): compile around them.

ember.inductor's kernels and wrapper bind every size from the graph's inputs (ADR 0021);
a size such as ``u0``, the number of True values of a mask, exists only once the op
making it (``aten.index.Tensor`` with a mask, ``nonzero``, ``masked_select``) has run.
A graph with such sizes is cut, in graph order, into runs of ops: a run touching an
unbacked size (in its value, its arguments or its inputs' values) runs through ATen as
traced; a run without one is compiled as a graph of its own, whose inputs are the values
earlier runs made. Runs too short to be worth a compile (:data:`MIN_OPS`) stay in ATen.
For a model whose loss keeps the masked positions (ELECTRA), the encoder's forward and
backward are compiled and the loss around the mask runs through ATen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from ember.ir.shapes import ShapeEnv

from .fx_util import attr_value

#: a run of fewer ops without unbacked sizes runs through ATen with its neighbours
MIN_OPS = 4


def unbacked_in(value: Any) -> set[str]:
    """Names of the unbacked symbols in ``value`` (tensors' sizes and strides, symbolic
    numbers, nested in lists and tuples)."""
    found: set[str] = set()
    for leaf in pytree.tree_leaves(value):
        parts = (*leaf.shape, *leaf.stride()) if isinstance(leaf, torch.Tensor) else (leaf,)
        for s in parts:
            node = getattr(s, "node", None)
            env = getattr(node, "env", None)
            if isinstance(s, (torch.SymInt, torch.SymFloat, torch.SymBool)) and isinstance(env, ShapeEnv):
                found.update(str(x) for x in node.expr.free_symbols if x in env.unbacked)  # type: ignore[union-attr]
    return found


def unbacked_symbols(gm: torch.fx.GraphModule) -> list[str]:
    """The unbacked symbols of ``gm``'s values and arguments, by name."""
    found: set[str] = set()
    for n in gm.graph.nodes:
        found |= unbacked_in((n.args, n.kwargs, n.meta.get("val")))
    return sorted(found)


def _touches_unbacked(node: torch.fx.Node) -> bool:
    inputs = [i.meta.get("val") for i in node.all_input_nodes]
    return bool(unbacked_in((node.args, node.kwargs, node.meta.get("val"), inputs)))


@dataclass
class Run:
    """Consecutive ops of the graph, compiled or run through ATen."""

    nodes: list[torch.fx.Node]
    compiled: bool
    inputs: list[torch.fx.Node]
    outputs: list[torch.fx.Node]
    fn: Callable[..., Any] | None = None


def _runs(gm: torch.fx.GraphModule) -> list[Run]:
    ops = [n for n in gm.graph.nodes if n.op == "call_function"]
    groups: list[tuple[bool, list[torch.fx.Node]]] = []
    for n in ops:
        static = not _touches_unbacked(n)
        if groups and groups[-1][0] == static:
            groups[-1][1].append(n)
        else:
            groups.append((static, [n]))
    merged: list[tuple[bool, list[torch.fx.Node]]] = []
    for static, nodes in groups:
        static = static and len(nodes) >= MIN_OPS
        if merged and merged[-1][0] == static:
            merged[-1][1].extend(nodes)
        else:
            merged.append((static, list(nodes)))
    runs = []
    for static, nodes in merged:
        members = set(nodes)
        inputs: list[torch.fx.Node] = []
        for n in nodes:
            for i in n.all_input_nodes:
                if i not in members and i.op != "get_attr" and i not in inputs:
                    inputs.append(i)
        outputs = [n for n in nodes if any(u not in members for u in n.users)]
        runs.append(Run(nodes, static, inputs, outputs))
    return runs


def _subgraph(gm: torch.fx.GraphModule, run: Run) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for i in run.inputs:
        ph = graph.placeholder(i.name)
        ph.meta["val"] = i.meta.get("val")
        env[i] = ph

    def lookup(x: torch.fx.Node) -> torch.fx.Node:
        if x not in env and x.op == "get_attr":
            env[x] = graph.get_attr(x.target)  # type: ignore[arg-type]
            env[x].meta.update(x.meta)
        return env[x]

    for n in run.nodes:
        env[n] = graph.node_copy(n, lookup)
    graph.output(tuple(env[n] for n in run.outputs))
    sub = torch.fx.GraphModule(gm, graph)
    return sub


class SplitGraph:
    """What ``compile_graph`` returns for a graph with unbacked sizes: its runs in order,
    the ones without such sizes compiled."""

    def __init__(self, gm: torch.fx.GraphModule, runs: list[Run], report: Any) -> None:
        self.gm = gm
        self.runs = runs
        self.report = report
        self._placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self._output = next(n for n in gm.graph.nodes if n.op == "output")
        # constants the graph returns as they are (``torch.tensor([...])`` returned): no run
        # makes them
        self._constants: dict[torch.fx.Node, Any] = {
            n: attr_value(gm, str(n.target)) for n in gm.graph.nodes if n.op == "get_attr"}
        # each value is dropped after the last run reading it (intermediates freed as a
        # compiled graph frees them); the graph's outputs are kept
        last: dict[torch.fx.Node, int] = {}
        for k, run in enumerate(runs):
            for i in run.inputs:
                last[i] = k
        kept = set(self._output.all_input_nodes)
        self._free: list[list[torch.fx.Node]] = [[] for _ in runs]
        for node, k in last.items():
            if node not in kept:
                self._free[k].append(node)

    def __call__(self, *args: Any) -> Any:
        if len(args) == 1 and isinstance(args[0], list):
            args = tuple(args[0])
        env: dict[torch.fx.Node, Any] = dict(zip(self._placeholders, args, strict=True))
        env.update(self._constants)
        for run, free in zip(self.runs, self._free, strict=True):
            assert run.fn is not None
            outs = run.fn(*[env[i] for i in run.inputs])
            env.update(zip(run.outputs, outs, strict=True))
            del outs
            for node in free:
                env.pop(node, None)
        return pytree.tree_map(
            lambda x: env[x] if isinstance(x, torch.fx.Node) else x, self._output.args[0]
        )


def split_compile(
    gm: torch.fx.GraphModule, compile_run: Callable[[torch.fx.GraphModule, list[Any]], Any],
) -> tuple[list[Run], int] | None:
    """``gm`` cut into runs, each with its callable (``compile_run`` for the runs without
    unbacked sizes, the traced ops otherwise), and how many were compiled; None when no run
    is worth compiling."""
    runs = _runs(gm)
    if not any(r.compiled for r in runs):
        return None
    for run in runs:
        sub = _subgraph(gm, run)
        if run.compiled:
            run.fn = compile_run(sub, [i.meta.get("val") for i in run.inputs])
        else:
            run.fn = sub
    return runs, sum(1 for r in runs if r.compiled)


__all__ = ["MIN_OPS", "Run", "SplitGraph", "split_compile", "unbacked_in", "unbacked_symbols"]
