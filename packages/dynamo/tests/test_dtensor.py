"""DTensor captured as itself (ADR 0069), in one process (a gloo group of one rank).

The two-process tensor-parallel training tests are in ``integration_tests/test_tp.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

import ember.dynamo
from ember.dynamo.testing import CompileCounter

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
        ember.dynamo.reset()


def scaled_sum(x: torch.Tensor) -> torch.Tensor:
    return (x * 2 + 1).sum(0)


def test_dtensor_input_is_one_graph_over_dtensors(mesh: Any) -> None:
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    counter = CompileCounter()
    compiled = ember.dynamo.compile(scaled_sum, backend=counter, fullgraph=True)
    x = distribute_tensor(torch.arange(8.0).reshape(4, 2), mesh, [Shard(0)])
    got = compiled(x)
    want = scaled_sum(x)
    assert isinstance(got, DTensor) and got.placements == want.placements
    torch.testing.assert_close(got.full_tensor(), want.full_tensor())
    assert counter.frame_count == 1
    example = [n for n in counter.graphs[0].graph.nodes if n.op == "placeholder"][0].meta["example_value"]
    assert isinstance(example, DTensor)  # a fake DTensor: the graph is over DTensors


def test_changed_placements_recompile_with_the_failed_guard_named(
    mesh: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    counter = CompileCounter()
    compiled = ember.dynamo.compile(scaled_sum, backend=counter, fullgraph=True)
    full = torch.arange(8.0).reshape(4, 2)
    compiled(distribute_tensor(full, mesh, [Shard(0)]))
    compiled(distribute_tensor(full + 1, mesh, [Shard(0)]))
    assert counter.frame_count == 1
    with caplog.at_level(logging.INFO, logger="ember.recompiles"):
        got = compiled(distribute_tensor(full, mesh, [Replicate()]))
    assert counter.frame_count == 2
    assert "L['x'].placements[0]" in caplog.text
    torch.testing.assert_close(got.full_tensor(), scaled_sum(full))
    ember.dynamo.reset()
    compiled = ember.dynamo.compile(scaled_sum, backend=counter, fullgraph=True)
    compiled(distribute_tensor(full, mesh, [Shard(0)]))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ember.recompiles"):
        compiled(distribute_tensor(full, mesh, [Shard(1)]))
    assert counter.frame_count == 4
    assert "L['x'].placements[0].dim was 1, the graph assumed 0" in caplog.text


def test_parallelized_module_trains_like_eager_in_one_graph(mesh: Any) -> None:
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    def model() -> nn.Module:
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
        return parallelize_module(m, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})

    reference, net = model(), model()
    counter = CompileCounter()
    compiled = ember.dynamo.compile(net, backend=counter, fullgraph=True)
    opt_ref = torch.optim.SGD(reference.parameters(), lr=0.1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    for _ in range(2):
        x = torch.randn(4, 8, generator=gen)
        for fn, o in ((reference, opt_ref), (compiled, opt)):
            fn(x).pow(2).mean().backward()
            o.step()
            o.zero_grad()
    assert counter.frame_count == 1
    for a, b in zip(reference.parameters(), net.parameters(), strict=True):
        torch.testing.assert_close(a.full_tensor(), b.full_tensor(), rtol=0, atol=0)
    # the parallel styles' hooks are nodes with the module and mesh bound into them
    targets = [str(getattr(n.target, "__name__", n.target)) for n in counter.graphs[0].graph.nodes]
    assert [t for t in targets if t.startswith("bound_")] == [
        "bound_ColwiseParallel__prepare_input_fn", "bound_ColwiseParallel__prepare_output_fn",
        "bound_RowwiseParallel__prepare_input_fn", "bound_RowwiseParallel__prepare_output_fn",
    ]


def test_dtensor_graph_is_not_stored_for_other_processes(mesh: Any) -> None:
    from torch.distributed.tensor import Shard, distribute_tensor

    from ember.dynamo.output_graph import OutputGraph

    x = distribute_tensor(torch.ones(4, 2), mesh, [Shard(0)])
    out = OutputGraph({})
    var = out.add_input(x, ember.ir.Local("x"))
    out.graph.output((var.node,))
    reason = out._unstorable(torch.fx.GraphModule(out.root, out.graph), list(out.inputs.values()))
    assert "DTensor" in reason


class Redistributing(nn.Module):
    """A forward using DTensor's API itself: its input made a DTensor sharded on the
    batch, gathered (``redistribute`` to the module's ``[Replicate()]``), scaled by a
    replicated parameter, and returned as a local tensor."""

    def __init__(self, mesh: Any) -> None:
        from torch.distributed.tensor import Replicate, distribute_tensor

        super().__init__()
        self.mesh = mesh
        self.scale = nn.Parameter(distribute_tensor(torch.linspace(0.5, 2.0, 4), mesh, [Replicate()]))
        self.gathered = [Replicate()]  # placements kept on the module: guarded by value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.distributed.tensor import DTensor, Shard

        d = DTensor.from_local(x, self.mesh, [Shard(0)], run_check=False)
        assert d.placements[0] == Shard(0)
        full = d.redistribute(d.device_mesh, self.gathered)
        return (full * self.scale).relu().to_local()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_dtensor_api_in_user_code_is_captured(mesh: Any, backend: str) -> None:
    torch.manual_seed(0)
    reference, net = Redistributing(mesh), Redistributing(mesh)
    counter = CompileCounter()
    inner = ember.dynamo.backends.lookup_backend(backend)

    def counted(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        counter(gm, example_inputs)
        return inner(gm, example_inputs)

    compiled = ember.dynamo.compile(net, backend=counted, fullgraph=True)
    x = torch.randn(3, 4)
    got, want = compiled(x), reference(x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(net.scale.grad.full_tensor(), reference.scale.grad.full_tensor())
    assert counter.frame_count == 1
    compiled(x)
    assert counter.frame_count == 1
    from torch.distributed.tensor import Shard

    net.gathered[0] = Shard(1)  # another placement in the module's list: a new graph
    reference.gathered[0] = Shard(1)
    torch.testing.assert_close(compiled(x), reference(x), rtol=0, atol=0)
    assert counter.frame_count == 2
