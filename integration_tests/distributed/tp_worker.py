"""Two gloo processes on one machine: eager tensor parallelism beside ember-compiled (issue 35).

Run by ``integration_tests/test_tp.py`` as a script:
``python tp_worker.py BACKEND PORT OUT.json [adam] [gather] [fsdp] [sizes] [sp]``. Each rank builds the
same GPT-style MLP blocks and parallelizes them with
``torch.distributed.tensor.parallel.parallelize_module`` on a 1-d mesh of the two
ranks (``ColwiseParallel`` for the up projection, ``RowwiseParallel`` for the down
projection: the parameters become DTensors sharded across the ranks, the hooks make
the activations DTensors and all-reduce the block's output). It trains the model
twice from the same weights on the same batches: once eagerly and once compiled by
``ember.dynamo.compile(model, fullgraph=True, backend=...)`` (ADR 0069: one graph over
DTensors, desugared by ember.aotgrad into one over local tensors whose collectives
are ``_c10d_functional`` nodes). Rank 0 writes both runs' losses, the largest
difference of the full (all-gathered) parameters, the graphs each rank compiled
(dynamo graphs, aotgrad forward and backward graphs) and the collectives in them.

``adam``: Adam instead of SGD. ``gather``: the model's own forward starts from each
rank's half of the batch, made a DTensor and all-gathered with DTensor's API
(``Gathering``). ``fsdp``: four processes, a 2x2 mesh, each block tensor-parallel on
one dimension and FSDP2-sharded on the other (``fsdp_tp``); compiled without
``fullgraph`` (FSDP2's hooks run eagerly at graph breaks, each block is a frame).
``sizes``: after training, batches of three other sizes (``other_sizes``). ``sp``:
sequence parallelism as well (``parallel(..., sequence=True)``), each rank given its half
of every sequence. Guards on placements and meshes are tested in one
process (``packages/dynamo/tests/test_dtensor.py``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from training import finish, full_params, train

STEPS = 4
WIDTH = 16


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, 4 * WIDTH)
        self.down = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Gathering(nn.Module):
    """``Net`` behind a forward that uses DTensor's API itself: each rank's own half of
    the batch becomes a DTensor sharded on the batch (``DTensor.from_local``), gathered
    (``redistribute`` to ``Replicate()``: an all-gather) and taken back as a local tensor."""

    def __init__(self, mesh: Any) -> None:
        super().__init__()
        self.mesh = mesh
        self.net = Net()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.distributed.tensor import DTensor, Replicate, Shard

        shards = DTensor.from_local(x, self.mesh, [Shard(0)], run_check=False)
        whole = shards.redistribute(self.mesh, [Replicate()]).to_local()
        out: torch.Tensor = self.net(whole)
        return out


def fsdp_tp(mesh: Any) -> nn.Module:
    """``Net`` on a 2x2 mesh (``dp`` x ``tp``): each block tensor-parallel on ``tp``, then
    every block and the root ``fully_shard``-ed on ``dp`` (FSDP2 + TP, torchtitan's 2-d)."""
    from torch.distributed.fsdp import fully_shard

    net = parallel(mesh["tp"])
    assert isinstance(net, Net)
    for block in net.blocks:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(net, mesh=mesh["dp"])
    return net


def parallel(mesh: Any, gather: bool = False, sequence: bool = False) -> nn.Module:
    """``Net`` with each block tensor-parallel; ``sequence``: sequence parallelism too
    (torchtitan's plan: the norm ``SequenceParallel``, activations sharded on the sequence
    dimension between blocks, all-gathered before ``up`` and reduce-scattered after ``down``)."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    torch.manual_seed(0)
    model: nn.Module = Gathering(mesh) if gather else Net()
    net = model.net if isinstance(model, Gathering) else model
    for block in net.blocks:
        plan: dict[str, Any] = {"up": ColwiseParallel(), "down": RowwiseParallel()}
        if sequence:
            plan = {"norm": SequenceParallel(), "up": ColwiseParallel(input_layouts=Shard(1)),
                    "down": RowwiseParallel(output_layouts=Shard(1))}
        parallelize_module(block, mesh, plan)
    return model


class GraphCounter:
    """An ember backend counting dynamo graphs, aotgrad's forward and backward graphs,
    and the collective ops in them, around the ``BACKEND`` graph compiler."""

    def __init__(self, backend: str) -> None:
        from ember.aotgrad.api import aot_autograd, nop_compiler
        from ember.aotgrad.partition import min_cut_rematerialization_partition

        self.backend = backend
        self.frames = 0
        self.forward = 0
        self.backward = 0
        #: per aotgrad graph ("forward"/"backward"): the collective ops it calls
        self.collectives: dict[str, list[str]] = {"forward": [], "backward": []}
        if backend in ("eager", "aot_eager"):
            inner: Any = nop_compiler
        elif backend == "inductor":
            from ember.inductor.compile_fx import compile_graph

            inner = compile_graph
        else:
            raise ValueError(backend)

        def counted(kind: str) -> Any:
            def compiler(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
                setattr(self, kind, getattr(self, kind) + 1)
                self.collectives[kind] += [
                    str(n.target) for n in gm.graph.nodes
                    if n.op == "call_function" and "_c10d_functional" in str(n.target)
                ]
                return inner(gm, example_inputs)

            return compiler

        self.aot = aot_autograd(counted("forward"), counted("backward"),
                                min_cut_rematerialization_partition)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.frames += 1
        if self.backend == "eager":
            return gm.forward
        return self.aot(gm, example_inputs)


def batches(steps: int, rank: int | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every rank's batches: the same on every rank (tensor parallelism); with ``rank``,
    each rank's own half of the inputs (``Gathering`` gathers them) and all targets."""
    gen = torch.Generator().manual_seed(100)
    data = [(torch.randn(8, WIDTH, generator=gen), torch.randn(8, 1, generator=gen)) for _ in range(steps)]
    if rank is None:
        return data
    return [(x.chunk(2)[rank], y) for x, y in data]


def optimizer(net: nn.Module, adam: bool) -> torch.optim.Optimizer:
    if adam:
        return torch.optim.Adam(net.parameters(), lr=1e-2)
    return torch.optim.SGD(net.parameters(), lr=5e-2)


def other_sizes(reference: nn.Module, compiled: Any) -> list[float]:
    """Batches of other sizes after training: the output's and the input gradient's largest
    difference from eager (a new size recompiles once into a graph with a symbolic batch
    size; the DTensor parameters keep static sizes)."""
    diffs = []
    for n in (6, 5, 7):
        x = torch.randn(n, WIDTH, generator=torch.Generator().manual_seed(n), requires_grad=True)
        got = compiled(x)
        got.sum().backward()
        got_grad, x.grad = x.grad, None
        want = reference(x)
        want.sum().backward()
        diffs.append(max((got - want).abs().max().item(), (got_grad - x.grad).abs().max().item()))
    return diffs


def run(rank: int, world: int, argv: list[str], port: int, out: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh

    import ember.dynamo

    backend = argv[0]
    adam, gather, fsdp, sequence = "adam" in argv, "gather" in argv, "fsdp" in argv, "sp" in argv
    result: dict[str, Any] = {}
    try:
        if fsdp:  # FSDP2's hooks are graph breaks (ADR 0057): each block is its own frame
            mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
            reference, net = fsdp_tp(mesh), fsdp_tp(mesh)
        else:
            mesh = init_device_mesh("cpu", (world,))
            reference, net = parallel(mesh, gather, sequence), parallel(mesh, gather, sequence)
        counter = GraphCounter(backend)
        compiled = ember.dynamo.compile(net, backend=counter, fullgraph=not fsdp)
        data = batches(STEPS, rank if gather else None)
        if sequence:  # each rank its half of every sequence: (2, 8, WIDTH) -> (2, 4, WIDTH)
            data = [(x.reshape(2, 4, WIDTH).repeat(1, 2, 1).chunk(2, dim=1)[rank],
                     y.reshape(2, 4, 1).repeat(1, 2, 1).chunk(2, dim=1)[rank]) for x, y in data]
        if fsdp:  # each data-parallel rank its own half of every batch
            dp = mesh["dp"].get_local_rank()
            data = [(x.chunk(2)[dp], y.chunk(2)[dp]) for x, y in data]
        result["eager_losses"] = train(reference, optimizer(reference, adam), data)
        result["compiled_losses"] = train(compiled, optimizer(net, adam), data)
        result["max_param_diff"] = max(
            (a - b).abs().max().item() for a, b in zip(full_params(reference), full_params(net), strict=True)
        )
        result["sharded_params"] = sum(1 for p in net.parameters() if hasattr(p, "placements"))
        if "sizes" in argv:
            result["other_sizes"] = other_sizes(reference, compiled)
        counts = torch.tensor([counter.frames, counter.forward, counter.backward])
        gathered = [torch.zeros_like(counts) for _ in range(world)]
        dist.all_gather(gathered, counts)
        result["graphs_per_rank"] = [g.tolist() for g in gathered]
        result["collectives"] = counter.collectives
    finally:
        finish(rank, out, result)


if __name__ == "__main__":
    port, out = int(sys.argv[2]), sys.argv[3]
    world = 4 if "fsdp" in sys.argv[4:] else 2
    mp.spawn(run, args=(world, sys.argv[1:2] + sys.argv[4:], port, out), nprocs=world)
