"""ember.ir's ATen recorder and decomposition table, on their own (ember.aotgrad's tracer and
ember.inductor's recorders are subclasses; their tests cover the hooks they fill)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ember.ir import (
    AtenRecorder,
    LazyDecompTable,
    UnrecordedTensor,
    core_aten_decompositions,
    core_aten_table,
    is_random,
    mutation_decompositions,
    with_required,
)

aten = torch.ops.aten


def _record(fn: Any, *shapes: tuple[int, ...], recorder: AtenRecorder | None = None) -> AtenRecorder:
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    rec = recorder or AtenRecorder()
    with mode:
        inputs = [torch.empty(s) for s in shapes]
    for i, x in enumerate(inputs):
        rec.bind(x, rec.graph.placeholder(f"x{i}"))
    with mode, rec:
        out = fn(*inputs)
    rec.graph.output(rec.arg(out))
    return rec


def test_records_each_aten_call_with_its_fake_value() -> None:
    rec = _record(lambda x: (x.sin() + 1).sum(-1), (4, 8))
    calls = [n for n in rec.graph.nodes if n.op == "call_function"]
    assert [n.target for n in calls] == [aten.sin.default, aten.add.Tensor, aten.sum.dim_IntList]
    assert tuple(calls[-1].meta["val"].shape) == (4,)
    x = torch.randn(4, 8)
    torch.testing.assert_close(rec.graph_module()(x), (x.sin() + 1).sum(-1))


def test_a_decomposition_replaces_the_op_it_maps() -> None:
    table = {aten.sin.default: lambda x: aten.cos.default(x)}
    rec = _record(lambda x: x.sin(), (3,), recorder=AtenRecorder(decompositions=table))
    assert [n.target for n in rec.graph.nodes if n.op == "call_function"] == [aten.cos.default]


def test_a_tensor_no_recorded_op_made_is_refused_unless_a_subclass_keeps_it() -> None:
    outside = torch.ones(3)
    with pytest.raises(UnrecordedTensor):
        _record(lambda x: x + outside, (3,))

    class Constants(AtenRecorder):  # type: ignore[no-untyped-call]
        def missing(self, value: torch.Tensor) -> torch.fx.Node:
            return self.constant(value, lambda: value)

    rec = _record(lambda x: x + outside, (3,), recorder=Constants())
    assert [n.op for n in rec.graph.nodes].count("get_attr") == 1
    torch.testing.assert_close(rec.graph_module()(torch.zeros(3)), outside)


def test_the_tables_layers() -> None:
    assert core_aten_decompositions().keys() <= core_aten_table().keys()
    assert not any(is_random(op) for op in core_aten_decompositions())
    assert any(is_random(op) for op in core_aten_table())  # the base keeps them; layers drop them
    required = mutation_decompositions()
    assert aten._native_batch_norm_legit.default in required
    mine = {aten.sin.default: torch.cos}
    merged = with_required(mine)
    assert merged[aten.sin.default] is torch.cos and required.keys() <= merged.keys()
    built: list[int] = []
    lazy = LazyDecompTable(lambda: built.append(1) or mine, lambda: "v1")
    layered = with_required(lazy)
    assert isinstance(layered, LazyDecompTable) and "v1" in layered.fingerprint() and not built
    assert layered[aten.sin.default] is torch.cos and built == [1]
