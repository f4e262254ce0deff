"""Graph edits: cutting nodes into inputs keeps the computation equal to eager."""

from __future__ import annotations

import operator

import pytest
import torch
from minifier_planted import cnn_graph, small_graph

from ember.minifier import InputMismatch, State
from ember.minifier.state import compute_nodes, eager_node_values, remove_nodes, run_eager

aten = torch.ops.aten


def test_cut_values_are_eager_values() -> None:
    gm, inputs = small_graph()
    state = State(gm, tuple(inputs))
    names = [n.name for n in compute_nodes(gm.graph)]
    # remove everything upstream of the sigmoid: mm, add, relu, sum_1
    cut = remove_nodes(state, names[:4])
    assert cut is not None
    targets = [n.target for n in compute_nodes(cut.gm.graph)]
    assert aten.mm.default not in targets and aten.sigmoid.default in targets
    # the cut graph computes exactly what the original computes
    torch.testing.assert_close(run_eager(cut.gm, cut.inputs), gm(*inputs))


def test_removing_consumers_keeps_the_graph_observable() -> None:
    gm, inputs = small_graph()
    state = State(gm, tuple(inputs))
    names = [n.name for n in compute_nodes(gm.graph)]
    cut = remove_nodes(state, names[5:])  # mul and everything after it
    assert cut is not None
    outs = cut.gm(*cut.inputs)
    values = eager_node_values(gm, inputs)
    # the sigmoid lost its only user, so it became the output
    torch.testing.assert_close(outs if isinstance(outs, torch.Tensor) else outs[0], values["sigmoid"])


def test_tuple_valued_nodes_are_cut_at_their_getitems() -> None:
    gm, inputs = cnn_graph()
    state = State(gm, tuple(inputs))
    bn = next(n for n in compute_nodes(gm.graph) if n.target is aten.native_batch_norm.default)
    cut = remove_nodes(state, [bn.name])
    assert cut is not None
    assert all(n.name != bn.name for n in cut.gm.graph.nodes)
    assert not any(
        n.target is operator.getitem and n.args[0].name == bn.name for n in compute_nodes(cut.gm.graph)
    )
    torch.testing.assert_close(run_eager(cut.gm, cut.inputs), gm(*inputs))


def test_state_checks_input_count() -> None:
    gm, inputs = small_graph()
    with pytest.raises(InputMismatch, match="2 placeholders but 1 inputs"):
        State(gm, (inputs[0],))
