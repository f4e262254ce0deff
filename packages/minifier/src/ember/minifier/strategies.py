"""Minification strategies: named pure functions ``(State, still_fails) -> State | None``.

A strategy proposes smaller candidate states, asks ``still_fails`` about each,
and returns the smallest candidate that still fails, or ``None`` when it found
nothing. It never mutates its input; ``still_fails`` is its only effect (the
driver's oracle, which counts checks, logs and enforces the time budget).
Strategies are deterministic: candidates are tried in graph order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx

from ember.minifier.state import (
    COMPUTE_OPS,
    State,
    build,
    compute_nodes,
    copy_graph,
    new_placeholder,
    normalize,
    output_node,
    output_values,
    placeholders,
    remove_nodes,
)

Oracle = Callable[[State], bool]


@dataclass(frozen=True, slots=True)
class Strategy:
    """A named strategy; ``fn`` returns a smaller failing state or ``None``."""

    name: str
    fn: Callable[[State, Oracle], State | None]

    def __call__(self, state: State, still_fails: Oracle) -> State | None:
        return self.fn(state, still_fails)


def _with_outputs(state: State, keep: list[fx.Node]) -> State | None:
    """``state`` with outputs replaced by ``keep`` (names from the state's graph), then DCE."""
    graph, env = copy_graph(state.gm)
    outs = [env[n] for n in keep]
    if not outs:
        return None
    out = output_node(graph)
    old = out.args[0]
    if isinstance(old, (tuple, list)) or len(outs) != 1:
        out.args = (tuple(outs),)
    else:
        out.args = (outs[0],)
    inputs = normalize(graph, list(state.inputs))
    if not compute_nodes(graph):
        return None
    return build(state.gm, graph, inputs)


def truncate_suffix(state: State, still_fails: Oracle) -> State | None:
    """Keep the shortest prefix of compute nodes that still fails.

    The prefix's outputs are its tensor values that later nodes (or the old
    outputs) read. Searches by halving steps: O(log n) checks.
    """
    nodes = compute_nodes(state.gm.graph)
    values = state.values()
    best: State | None = None
    keep = len(nodes)
    step = keep // 2
    while step >= 1:
        k = keep - step
        cand = _prefix(state, nodes, k, values) if k >= 1 else None
        if cand is not None and cand.size < state.size and still_fails(cand):
            best, keep = cand, k
        else:
            step //= 2
    return best


def _prefix(state: State, nodes: list[fx.Node], k: int, values: dict[str, Any]) -> State | None:
    prefix = set(nodes[:k])
    frontier: list[fx.Node] = []
    outs = {o for o in output_values(state.gm.graph) if isinstance(o, fx.Node)}
    for n in nodes[:k]:
        later = any(u not in prefix and u.op != "output" for u in n.users)
        if (later or n in outs) and isinstance(values.get(n.name), torch.Tensor):
            frontier.append(n)
    return _with_outputs(state, frontier)


def remove_outputs(state: State, still_fails: Oracle) -> State | None:
    """Drop graph outputs in halving chunks (then their dead producers)."""
    best: State | None = None
    cur = state
    outs = [o for o in output_values(cur.gm.graph) if isinstance(o, fx.Node)]
    step = max(1, len(outs) // 2)
    while len(outs) > 1:
        i = 0
        changed = False
        while i < len(outs) and len(outs) > 1:
            keep = outs[:i] + outs[i + step:]
            cand = _with_outputs(cur, keep) if keep else None
            if cand is not None and still_fails(cand):
                best = cur = cand
                outs = [o for o in output_values(cur.gm.graph) if isinstance(o, fx.Node)]
                changed = True
            else:
                i += step
        if step == 1 and not changed:
            break
        step = max(1, step // 2)
    return best


def eliminate_dead_code(state: State, still_fails: Oracle) -> State | None:
    """Remove nodes nothing reads and placeholders nothing uses."""
    graph, _ = copy_graph(state.gm)
    inputs = normalize(graph, list(state.inputs))
    before = len(state.gm.graph.nodes)
    if len(graph.nodes) == before or not compute_nodes(graph):
        return None
    cand = build(state.gm, graph, inputs)
    return cand if still_fails(cand) else None


def delta_debug(state: State, still_fails: Oracle) -> State | None:
    """Remove ranges of compute nodes at halving granularity (ddmin), down to single nodes.

    Removed values that kept nodes read become inputs with eager example values,
    so removing a range upstream of the culprit cuts the graph there. A full pass
    at granularity 1 that removes nothing leaves the graph 1-minimal.
    """
    best: State | None = None
    cur = state
    step = max(1, cur.size // 2)
    while True:
        i = 0
        changed = False
        while i < cur.size:
            names = [n.name for n in compute_nodes(cur.gm.graph)[i:i + step]]
            cand = remove_nodes(cur, names)
            if cand is not None and cand.size < cur.size and still_fails(cand):
                best = cur = cand
                changed = True
            else:
                i += step
        if step == 1:
            if not changed:
                return best
        else:
            step = max(1, min(step // 2, cur.size // 2))


def cut_at_node(state: State, still_fails: Oracle) -> State | None:
    """Try each compute node alone: its inputs become graph inputs, it becomes the output."""
    for node in reversed(compute_nodes(state.gm.graph)):
        others = [n.name for n in compute_nodes(state.gm.graph) if n is not node]
        if not others:
            return None
        cand = remove_nodes(state, others)
        if cand is not None and cand.size < state.size and still_fails(cand):
            return cand
    return None


def drop_unused_inputs(state: State, still_fails: Oracle) -> State | None:
    """Remove placeholders no node reads."""
    graph, _ = copy_graph(state.gm)
    unused = [p for p in placeholders(graph) if not p.users]
    if not unused:
        return None
    inputs = [v for p, v in zip(placeholders(graph), state.inputs, strict=True) if p.users]
    for p in unused:
        graph.erase_node(p)
    cand = build(state.gm, graph, inputs)
    return cand if still_fails(cand) else None


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return (
            a.dtype == b.dtype
            and a.shape == b.shape
            and a.stride() == b.stride()
            and a.device == b.device
            and bool(torch.equal(a, b))
        )
    return False


def consolidate_inputs(state: State, still_fails: Oracle) -> State | None:
    """Merge placeholders whose example tensors are identical (same metadata and data)."""
    graph, _ = copy_graph(state.gm)
    phs = placeholders(graph)
    keep_inputs: list[Any] = []
    kept: list[tuple[fx.Node, Any]] = []
    merged = False
    for p, v in zip(phs, state.inputs, strict=True):
        twin = next((q for q, w in kept if _same_value(v, w)), None)
        if twin is None:
            kept.append((p, v))
            keep_inputs.append(v)
            continue
        p.replace_all_uses_with(twin)
        graph.erase_node(p)
        merged = True
    if not merged:
        return None
    cand = build(state.gm, graph, keep_inputs)
    return cand if still_fails(cand) else None


def lift_constants(state: State, still_fails: Oracle) -> State | None:
    """Shrink constants out of the graph: tensor ``get_attr`` nodes become inputs.

    The graph file then holds no weights, and the constant's data travels with the
    inputs, where the repro writer can replace it by a seed.
    """
    graph, _ = copy_graph(state.gm)
    values = state.values()
    inputs = list(state.inputs)
    lifted = False
    for node in list(graph.nodes):
        if node.op != "get_attr" or not isinstance(values.get(node.name), torch.Tensor):
            continue
        ph = new_placeholder(graph, f"const_{node.name}", node)
        node.replace_all_uses_with(ph)
        graph.erase_node(node)
        inputs.append(values[node.name].detach().clone())
        lifted = True
    if not lifted:
        return None
    old = placeholders(state.gm.graph)
    by_name = {p.name: v for p, v in zip(old, state.inputs, strict=True)}
    new_phs = placeholders(graph)
    fresh = iter(inputs[len(old):])
    ordered = [by_name[p.name] if p.name in by_name else next(fresh) for p in new_phs]
    cand = build(state.gm, graph, ordered)
    return cand if still_fails(cand) else None


STRATEGIES: tuple[Strategy, ...] = (
    Strategy("truncate_suffix", truncate_suffix),
    Strategy("eliminate_dead_code", eliminate_dead_code),
    Strategy("lift_constants", lift_constants),
    Strategy("remove_outputs", remove_outputs),
    Strategy("delta_debug", delta_debug),
    Strategy("cut_at_node", cut_at_node),
    Strategy("consolidate_inputs", consolidate_inputs),
    Strategy("drop_unused_inputs", drop_unused_inputs),
)
"""The default strategies, in the order the driver runs them until none makes progress.

Truncation comes first: it needs only O(log n) checks and every check after it is
on a smaller graph."""

__all__ = ["COMPUTE_OPS", "STRATEGIES", "Oracle", "Strategy"]
