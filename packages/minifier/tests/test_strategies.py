"""Each strategy alone: smaller, still failing, and computing what eager computes."""

from __future__ import annotations

from typing import Any

import minifier_planted as planted
import torch
import torch.fx as fx

from ember.minifier import State
from ember.minifier.state import compute_nodes, eager_node_values, placeholders, run_eager
from ember.minifier.strategies import (
    STRATEGIES,
    consolidate_inputs,
    cut_at_node,
    delta_debug,
    drop_unused_inputs,
    eliminate_dead_code,
    lift_constants,
    remove_outputs,
    truncate_suffix,
)

aten = torch.ops.aten


def _has(target: Any) -> Any:
    return lambda s: target in [n.target for n in compute_nodes(s.gm.graph)]


def _small() -> State:
    gm, inputs = planted.small_graph()
    return State(gm, tuple(inputs))


def test_strategy_names_are_unique_and_ordered() -> None:
    names = [s.name for s in STRATEGIES]
    assert len(set(names)) == len(names) and names[0] == "truncate_suffix"


def test_truncate_suffix_keeps_a_failing_prefix() -> None:
    state = _small()
    out = truncate_suffix(state, _has(aten.sigmoid.default))
    assert out is not None and out.size < state.size
    assert [n.target for n in compute_nodes(out.gm.graph)][-1] is aten.sigmoid.default
    values = eager_node_values(state.gm, state.inputs)
    got = run_eager(out.gm, out.inputs)
    torch.testing.assert_close(got[-1] if isinstance(got, (tuple, list)) else got, values["sigmoid"])


def test_delta_debug_reaches_a_single_node() -> None:
    out = delta_debug(_small(), _has(aten.cos.default))
    assert out is not None
    assert [n.target for n in compute_nodes(out.gm.graph)] == [aten.cos.default]


def test_cut_at_node_isolates_one_node() -> None:
    out = cut_at_node(_small(), _has(aten.relu.default))
    assert out is not None and [n.target for n in compute_nodes(out.gm.graph)] == [aten.relu.default]


def test_nothing_to_do_returns_none() -> None:
    state = _small()
    never = lambda s: False  # noqa: E731
    for strategy in STRATEGIES:
        assert strategy(state, never) is None, strategy.name


def _two_outputs_and_dead_code() -> State:
    graph = fx.Graph()
    x, y = graph.placeholder("x"), graph.placeholder("y")
    a = graph.call_function(aten.sin.default, (x,))
    b = graph.call_function(aten.cos.default, (y,))
    graph.call_function(aten.exp.default, (x,))  # dead
    graph.output((a, b))
    return State(fx.GraphModule(torch.nn.Module(), graph), (torch.randn(3), torch.randn(3)))


def test_remove_outputs_and_dead_code() -> None:
    state = _two_outputs_and_dead_code()
    out = eliminate_dead_code(state, lambda s: True)
    assert out is not None and aten.exp.default not in [n.target for n in out.gm.graph.nodes]
    out = remove_outputs(out, _has(aten.cos.default))
    assert out is not None
    assert [n.target for n in compute_nodes(out.gm.graph)] == [aten.cos.default]
    # the unused input went with the output
    assert len(placeholders(out.gm.graph)) == len(out.inputs) == 1


def test_input_consolidation_and_dropping() -> None:
    graph = fx.Graph()
    x, y = graph.placeholder("x"), graph.placeholder("y")
    graph.placeholder("z")  # never read
    graph.output(graph.call_function(aten.add.Tensor, (x, y)))
    t = torch.randn(4)
    state = State(fx.GraphModule(torch.nn.Module(), graph), (t, t.clone(), torch.randn(2)))
    merged = consolidate_inputs(state, lambda s: True)
    assert merged is not None and len(merged.inputs) == 2
    torch.testing.assert_close(run_eager(merged.gm, merged.inputs), t + t)
    dropped = drop_unused_inputs(merged, lambda s: True)
    assert dropped is not None and len(dropped.inputs) == 1


def test_lift_constants_moves_weights_to_inputs() -> None:
    gm, inputs = planted.cnn_graph()
    state = State(gm, tuple(inputs))
    out = lift_constants(state, lambda s: True)
    assert out is not None
    assert not [n for n in out.gm.graph.nodes if n.op == "get_attr"]
    assert len(out.inputs) > 100
    torch.testing.assert_close(run_eager(out.gm, out.inputs), gm(*inputs))
