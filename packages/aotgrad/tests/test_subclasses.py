"""DTensor graph inputs desugared into their local tensors (``subclasses.py``, ADR 0069), in
one process: a gloo group of one rank, a 1-d mesh of it.

The two-process tensor-parallel tests are in ``integration_tests/test_tp.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.fx as fx

from ember.aotgrad import aot_autograd, aot_inference
from ember.aotgrad.api import nop_compiler
from ember.aotgrad.errors import TraceError
from ember.aotgrad.subclasses import desugar, has_subclass_inputs

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo is not built"
)


@pytest.fixture
def mesh() -> Iterator[Any]:
    from torch.distributed.device_mesh import init_device_mesh

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def with_examples(gm: fx.GraphModule, *args: Any) -> fx.GraphModule:
    """``gm`` with each node's value on ``args`` as its ``example_value`` (what a frontend
    records)."""

    class Recorder(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            value = super().run_node(n)
            n.meta["example_value"] = value
            return value

    Recorder(gm).run(*args)
    return gm


def gathered_product(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import Replicate

    return torch.relu(x.redistribute(x.device_mesh, [Replicate()]) * w)


def inputs(mesh: Any) -> tuple[Any, Any]:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    x = distribute_tensor(torch.randn(4, 3), mesh, [Shard(0)])
    w = distribute_tensor(torch.randn(4, 3), mesh, [Replicate()]).requires_grad_()
    return x, w


def test_the_desugared_graph_takes_local_tensors_and_wraps_them(mesh: Any) -> None:
    x, w = inputs(mesh)
    gm = with_examples(fx.symbolic_trace(gathered_product), x, w)
    assert has_subclass_inputs(gm, [x, w])
    plan = desugar(gm, [x, w])
    assert plan.dtensor_inputs == (0, 1)
    assert all(type(t) is torch.Tensor for t in plan.example_inputs)
    assert [t.requires_grad for t in plan.example_inputs] == [False, True]
    assert plan.outputs[0] is not None and plan.outputs[0].placements == w.placements
    local = plan.gm(*plan.example_inputs)[0]
    torch.testing.assert_close(local, gathered_product(x, w).to_local())


@pytest.mark.parametrize("grad", [True, False])
def test_traced_over_local_tensors_gradients_arrive_as_dtensors(mesh: Any, grad: bool) -> None:
    """(On one rank DTensor skips the all-gather; the collectives as nodes are checked on
    two processes by ``integration_tests/test_tp.py``.)"""
    from torch.distributed.tensor import DTensor

    x, w = inputs(mesh)
    gm = with_examples(fx.symbolic_trace(gathered_product), x, w)
    graphs: list[fx.GraphModule] = []

    def compiler(g: fx.GraphModule, example_inputs: list[Any]) -> Any:
        graphs.append(g)
        return nop_compiler(g, example_inputs)

    with torch.set_grad_enabled(grad):
        run = aot_autograd(compiler)(gm, [x, w]) if grad else aot_inference(gm, [x, w], compiler)
        got = run(x, w)[0]
    want = gathered_product(x, w)
    assert isinstance(got, DTensor) and got.placements == want.placements
    torch.testing.assert_close(got.full_tensor(), want.full_tensor())
    for g in graphs:  # ATen over local tensors only
        assert all(type(n.meta.get("val")) is not DTensor for n in g.graph.nodes)
    if grad:
        assert len(graphs) == 2  # a forward and a backward
        got.sum().backward()
        w_ref = w.detach().requires_grad_()
        gathered_product(x, w_ref).sum().backward()
        assert isinstance(w.grad, DTensor) and w.grad.placements == w.placements
        torch.testing.assert_close(w.grad.full_tensor(), w_ref.grad.full_tensor())


def test_another_wrapper_subclass_is_refused(mesh: Any) -> None:
    from torch.testing._internal.two_tensor import TwoTensor

    t = TwoTensor(torch.ones(2), torch.ones(2))
    gm = fx.symbolic_trace(lambda a: a + 1)
    with pytest.raises(TraceError, match="desugars DTensor only"):
        desugar(gm, [t])


def test_a_graph_that_cannot_be_desugared_runs_eagerly_with_the_reason_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    from torch.testing._internal.two_tensor import TwoTensor

    t = TwoTensor(torch.ones(2), torch.full((2,), 2.0))
    gm = fx.symbolic_trace(lambda a: a + 1)
    with caplog.at_level(logging.WARNING):
        run = aot_autograd(nop_compiler)(gm, [t])
    assert "desugars DTensor only" in caplog.text and "running it eagerly" in caplog.text
    out = run(t)
    assert isinstance(out, TwoTensor)
    torch.testing.assert_close(out.a, torch.full((2,), 2.0))
