"""Planted bugs inside 200+-node ATen graphs of real models shrink to <= 3 compute nodes.

Each case records start/final node counts and time (printed with ``-s``). The CNN
sigmoid case runs by default; the others are marked slow (tracing the models with
make_fx is most of their cost on a loaded 2-core machine).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import minifier_planted as planted
import pytest
import torch
import torch.fx as fx

from ember.minifier import (
    BackendError,
    Failure,
    Inaccuracy,
    MinifyResult,
    NoFailureReproduced,
    State,
    minify,
)
from ember.minifier.state import compute_nodes

aten = torch.ops.aten

GRAPHS = {"transformer": planted.transformer_graph, "cnn": planted.cnn_graph}


def _targets(gm: fx.GraphModule) -> list[Any]:
    return [n.target for n in compute_nodes(gm.graph)]


def _run(graph: str, failure: Failure) -> MinifyResult:
    gm, inputs = GRAPHS[graph]()
    assert len(compute_nodes(gm.graph)) >= 200
    t0 = time.monotonic()
    result = minify(gm, inputs, failure, time_budget=60.0, progress=False)
    took = time.monotonic() - t0
    print(f"\n{graph}: {result.failure.describe()}: {result.start_nodes} -> {result.final_nodes} "
          f"compute nodes in {took:.2f}s ({result.checks} checks)")
    assert took < 60.0 and not result.budget_exhausted
    assert result.start_nodes >= 200
    assert 1 <= result.final_nodes <= 3
    # the minimal graph still fails, checked independently of the driver
    assert result.failure.check(State(result.gm, result.inputs)).failed
    return result


def _culprit(targets: list[Any]) -> Callable[[MinifyResult], None]:
    def check(result: MinifyResult) -> None:
        got = _targets(result.gm)
        for t in targets:
            assert t in got, f"{t} missing from minimal graph {got}"

    return check


CASES = [
    pytest.param("cnn", BackendError(planted.raises_on_sigmoid), [aten.sigmoid.default], id="cnn-sigmoid"),
    pytest.param("transformer", BackendError(planted.raises_on_sigmoid), [aten.sigmoid.default],
                 id="transformer-sigmoid", marks=pytest.mark.slow),
    pytest.param("cnn", Inaccuracy(planted.inaccurate_mul), [aten.mul.Tensor], id="cnn-mul",
                 marks=pytest.mark.slow),
    pytest.param("transformer", Inaccuracy(planted.inaccurate_mul), [aten.mul.Tensor],
                 id="transformer-mul", marks=pytest.mark.slow),
    pytest.param("cnn", BackendError(planted.fails_on_add_relu),
                 [aten.add.Tensor, aten.relu.default], id="cnn-add-relu", marks=pytest.mark.slow),
    pytest.param("transformer", BackendError(planted.fails_on_gelu_mul),
                 [aten.gelu.default, aten.mul.Tensor], id="transformer-gelu-mul",
                 marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("graph", "failure", "culprits"), CASES)
def test_planted_bug_is_isolated(graph: str, failure: Failure, culprits: list[Any]) -> None:
    result = _run(graph, failure)
    _culprit(culprits)(result)
    if len(culprits) == 2:  # adjacency: the producer feeds the consumer directly
        first, second = (n for n in compute_nodes(result.gm.graph) if n.target in culprits)
        assert first in second.all_input_nodes


def test_healthy_backend_reproduces_nothing() -> None:
    gm, inputs = planted.cnn_graph()
    with pytest.raises(NoFailureReproduced, match="no failure reproduced with backend 'healthy'"):
        minify(gm, inputs, BackendError(planted.healthy), progress=False)
    with pytest.raises(NoFailureReproduced, match="outputs match eager within tolerance"):
        minify(gm, inputs, Inaccuracy(planted.accurate_float64), progress=False)


def test_does_not_drift_to_another_bug() -> None:
    # two_bugs raises on gelu first; the minifier must keep chasing the gelu error,
    # never settle for the sigmoid one that smaller graphs would also show
    gm, inputs = planted.small_graph()
    gm = _with_gelu(gm)
    result = minify(gm, inputs, BackendError(planted.two_bugs), progress=False)
    assert result.failure.signature is not None
    assert result.failure.signature.exc_type == "builtins.ValueError"
    assert _targets(result.gm) == [aten.gelu.default]


def _with_gelu(gm: fx.GraphModule) -> fx.GraphModule:
    """small_graph with a gelu applied to its output (so both bugs are present)."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    out = graph.graph_copy(gm.graph, env)
    assert isinstance(out, fx.Node)
    graph.output(graph.call_function(aten.gelu.default, (out,)))
    return fx.GraphModule(gm, graph)


def test_user_predicate_and_determinism() -> None:
    gm, inputs = planted.small_graph()

    def has_tanh(g: fx.GraphModule, xs: list[Any]) -> bool:
        return aten.tanh.default in _targets(g)

    a = minify(gm, inputs, has_tanh, progress=False)
    b = minify(gm, inputs, has_tanh, progress=False)
    assert _targets(a.gm) == [aten.tanh.default]
    assert a.gm.code == b.gm.code
    assert all(torch.equal(x, y) for x, y in zip(a.inputs, b.inputs, strict=True))


def test_progress_lines_name_strategy_and_node_count() -> None:
    gm, inputs = planted.small_graph()
    lines: list[str] = []
    minify(gm, inputs, BackendError(planted.raises_on_sigmoid), progress=lines.append)
    assert lines[0].startswith("reproduced: backend 'raises_on_sigmoid' raises builtins.NotImplementedError")
    assert any(line.startswith("delta_debug: ") and "compute nodes" in line for line in lines)
    assert lines[-1].startswith("minified 11 -> 1 compute nodes")


def test_time_budget_returns_the_smallest_failing_graph_so_far() -> None:
    gm, inputs = planted.small_graph()
    lines: list[str] = []
    result = minify(gm, inputs, BackendError(planted.raises_on_sigmoid), time_budget=0.0,
                    progress=lines.append)
    assert result.budget_exhausted
    assert any("time budget" in line for line in lines)
    assert result.failure.check(State(result.gm, result.inputs)).failed


def test_graph_ir_in_graph_ir_out() -> None:
    import ember.ir as ir

    gm, inputs = planted.small_graph()
    graph = ir.from_fx(gm, inputs)
    result = minify(graph, inputs, BackendError(planted.raises_on_sigmoid), progress=False)
    assert isinstance(result.graph, ir.GraphIR)
    back = ir.to_fx(ir.loads(ir.dumps(result.graph)))
    assert _targets(back) == [aten.sigmoid.default]
    assert BackendError(planted.raises_on_sigmoid).check(State(back, result.inputs)).failed
