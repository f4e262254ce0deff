"""Hypothesis-generated FX graphs (torch and ATen level) survive the IR round trip."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from ember.ir import dumps, from_fx, loads, to_fx

N = 4  # every value is N x N, so transposes and keepdim reductions compose
aten = torch.ops.aten

# (op, target, arity, extra-args strategy) per dialect
Builder = Callable[[torch.fx.Graph, list[torch.fx.Node], Any], torch.fx.Node]

finite = st.floats(min_value=-3, max_value=3, allow_nan=False, width=32)
scalars = st.one_of(finite, st.integers(-3, 3), st.sampled_from([math.inf, -math.inf, 0.5]))


def _torch_ops() -> list[tuple[Builder, st.SearchStrategy[Any]]]:
    def fn(target: object) -> Builder:
        return lambda g, xs, _: g.call_function(target, (xs[0],))

    def binary(target: object) -> Builder:
        return lambda g, xs, _: g.call_function(target, (xs[0], xs[1]))

    return [
        (fn(torch.sin), st.none()),
        (fn(torch.tanh), st.none()),
        (fn(torch.nn.functional.relu), st.none()),
        (lambda g, xs, _: g.call_method("exp", (g.call_function(torch.clamp, (xs[0],), {"max": 2.0}),)), st.none()),
        (binary(operator.add), st.none()),
        (binary(operator.mul), st.none()),
        (binary(torch.maximum), st.none()),
        (lambda g, xs, a: g.call_function(torch.sub, (xs[0], xs[1]), {"alpha": a}), finite),
        (lambda g, xs, s: g.call_function(operator.mul, (xs[0], s)), scalars),
        (
            lambda g, xs, d: g.call_function(operator.add, (xs[0], g.call_method("sum", (xs[0],), {"dim": d, "keepdim": True}))),
            st.sampled_from([0, 1, -1, (0, 1)]),
        ),
        (lambda g, xs, _: g.call_method("transpose", (xs[0], 0, 1)), st.none()),
        (lambda g, xs, s: g.call_function(operator.getitem, (xs[0], (Ellipsis, s))), st.sampled_from([slice(0, N), slice(None, None, 1), slice(-N, None)])),
        (
            lambda g, xs, _: g.call_method(
                "to", (g.call_method("softmax", (xs[0],), {"dim": -1, "dtype": torch.float64}), torch.float32)
            ),
            st.none(),
        ),
        (lambda g, xs, _: g.call_function(torch.where, (g.call_function(operator.gt, (xs[0], 0)), xs[0], xs[1])), st.none()),
        (lambda g, xs, _: g.get_attr("weight"), st.none()),
        (lambda g, xs, _: g.call_function(torch.matmul, (xs[0], g.get_attr("weight"))), st.none()),
    ]


def _aten_ops() -> list[tuple[Builder, st.SearchStrategy[Any]]]:
    return [
        (lambda g, xs, _: g.call_function(aten.sin.default, (xs[0],)), st.none()),
        (lambda g, xs, _: g.call_function(aten.relu.default, (xs[0],)), st.none()),
        (lambda g, xs, _: g.call_function(aten.add.Tensor, (xs[0], xs[1])), st.none()),
        (lambda g, xs, a: g.call_function(aten.add.Tensor, (xs[0], xs[1]), {"alpha": a}), finite),
        (lambda g, xs, s: g.call_function(aten.mul.Scalar, (xs[0], s)), scalars),
        (
            lambda g, xs, d: g.call_function(aten.sub.Tensor, (xs[0], g.call_function(aten.sum.dim_IntList, (xs[0], [d], True)))),
            st.sampled_from([0, 1]),
        ),
        (lambda g, xs, _: g.call_function(aten.t.default, (xs[0],)), st.none()),
        (lambda g, xs, b: g.call_function(aten.clamp.default, (xs[0], b, None)), finite),
        (lambda g, xs, _: g.call_function(aten.mm.default, (xs[0], xs[1])), st.none()),
        (lambda g, xs, _: g.call_function(aten._to_copy.default, (xs[0],), {"dtype": torch.float64}), st.none()),
        (
            lambda g, xs, _: g.call_function(
                aten.mul.Tensor, (xs[0], g.call_function(operator.getitem, (g.call_function(aten.max.dim, (xs[0], 1, True)), 0)))
            ),
            st.none(),
        ),
    ]


@st.composite
def graphs(draw: st.DrawFn, dialect: str) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    ops = _torch_ops() if dialect == "torch" else _aten_ops()
    g = torch.fx.Graph()
    n_inputs = draw(st.integers(1, 3))
    values = [g.placeholder(f"in{i}") for i in range(n_inputs)]
    for _ in range(draw(st.integers(1, 8))):
        build, extra = draw(st.sampled_from(ops))
        picks = [draw(st.sampled_from(values)) for _ in range(2)]
        if dialect == "aten" and picks[0].meta.get("f64") != picks[1].meta.get("f64"):
            picks[1] = picks[0]
        node = build(g, picks, draw(extra))
        node.meta["f64"] = dialect == "aten" and (node.target is aten._to_copy.default or picks[0].meta.get("f64", False))
        values.append(node)
    outs = draw(st.lists(st.sampled_from(values[n_inputs:]), min_size=1, max_size=3))
    g.output(tuple(outs))
    root = nn.Module()
    root.weight = nn.Parameter(torch.randn(N, N))
    inputs = [torch.randn(N, N) for _ in range(n_inputs)]
    return torch.fx.GraphModule(root, g), inputs


def _same(expected: object, got: object) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        torch.testing.assert_close(got, expected, equal_nan=True)
    else:
        assert isinstance(got, (tuple, list)) and isinstance(expected, (tuple, list))
        assert len(got) == len(expected)
        for e, o in zip(expected, got):
            _same(e, o)


def _check(gm: torch.fx.GraphModule, inputs: list[torch.Tensor], dialect: str) -> None:
    ir = from_fx(gm, inputs)
    assert ir.dialect == dialect or (dialect == "aten" and ir.dialect == "torch" and not any(
        "::" in n.target for n in ir.nodes if n.op == "call_function"
    ))
    text = dumps(ir)
    back = loads(text)
    assert back == ir
    rebuilt = to_fx(back.with_tensors(ir.tensors))
    _same(gm(*inputs), rebuilt(*inputs))
    assert dumps(from_fx(rebuilt)) == text, "from_fx(to_fx(ir)) must give the same IR text"


def _settings(n: int) -> settings:
    return settings(max_examples=n, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


Case = tuple[torch.fx.GraphModule, list[torch.Tensor]]


@_settings(12)
@given(graphs("torch"))
def test_random_torch_level_graphs(case: Case) -> None:
    _check(*case, "torch")


@_settings(25)
@given(graphs("aten"))
def test_random_aten_level_graphs(case: Case) -> None:
    _check(*case, "aten")


@pytest.mark.slow
@_settings(300)
@given(st.sampled_from(["torch", "aten"]).flatmap(lambda d: st.tuples(st.just(d), graphs(d))))
def test_many_random_graphs(case: tuple[str, Case]) -> None:
    dialect, (gm, inputs) = case
    _check(gm, inputs, dialect)
