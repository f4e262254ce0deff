"""Two gloo processes on one machine: eager FSDP2 beside ember-compiled FSDP2 (issues 18, 35).

Run by ``integration_tests/test_fsdp.py`` as a script:
``python fsdp_worker.py SPELLING BACKEND PORT OUT.json [mp] [ac] [dcp=DIR]``. Each rank
trains the same model twice from the same weights on its own batches, with every
block and the root sharded by ``torch.distributed.fsdp.fully_shard`` (FSDP2, the
torchtitan recipe): once eagerly and once compiled by ember, and rank 0 writes both
runs' losses, the largest parameter difference (of the full, all-gathered parameters),
the forward and backward graphs each rank compiled and the graph-break reasons as
JSON. ``SPELLING`` says how the model is compiled:

- ``whole``: ``ember.dynamo.compile(model)`` of the sharded model. A sharded block's
  FSDP2 hooks (all-gather before forward, reshard after, gradient reduce-scatter from
  autograd hooks) run eagerly at a graph break, and the block's ``forward`` is
  captured as its own frame (ADR 0057).
- ``regions``: ``ember.dynamo.compile(model.blocks)`` after sharding: each block's
  ``forward`` compiled in place, its hooks run by ``Module.__call__`` around it.
- ``per_block``: ``model.blocks[i] = ember.dynamo.compile(block)`` after sharding.
- ``before``: each block compiled first, then sharded (torchtitan's order).

``mp``: ``MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)``.
``ac``: each block's forward under ``torch.utils.checkpoint`` (activation checkpointing
inside the block). ``dcp=DIR``: after the steps, both runs save a distributed
checkpoint (``torch.distributed.checkpoint``), fresh sharded models load it, and
``RESTART_STEPS`` more steps are trained (losses written as ``*_restart_losses``).
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
RESTART_STEPS = 3
WIDTH = 32


class Block(nn.Module):
    def __init__(self, checkpointed: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH)
        self.norm = nn.LayerNorm(WIDTH)
        self.checkpointed = checkpointed

    def inner(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(self.norm(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.checkpointed:
            from torch.utils.checkpoint import checkpoint

            out: torch.Tensor = checkpoint(self.inner, x, use_reentrant=False)
            return out
        return self.inner(x)


class Net(nn.Module):
    def __init__(self, checkpointed: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(checkpointed) for _ in range(3))
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x).float()


class GraphCounter:
    """An ember backend: aotgrad over the ``BACKEND`` graph compiler, counting the
    dynamo graphs and the forward and backward graphs aotgrad compiles."""

    def __init__(self, backend: str) -> None:
        from ember.aotgrad.api import aot_autograd, nop_compiler
        from ember.aotgrad.partition import min_cut_rematerialization_partition

        self.frames = 0
        #: each dynamo graph's inputs (their source names), in compile order
        self.inputs: list[list[str]] = []
        self.forward = 0
        self.backward = 0
        if backend == "aot_eager":
            inner: Any = nop_compiler
        elif backend == "inductor":
            from ember.inductor.compile_fx import compile_graph

            inner = compile_graph
        else:
            raise ValueError(backend)

        def fw(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
            self.forward += 1
            return inner(gm, example_inputs)

        def bw(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
            self.backward += 1
            return inner(gm, example_inputs)

        self.aot = aot_autograd(fw, bw, min_cut_rematerialization_partition)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.frames += 1
        self.inputs.append([n.name for n in gm.graph.nodes if n.op == "placeholder"])
        return self.aot(gm, example_inputs)


def sharded(mixed: bool, checkpointed: bool, compile_first: Any = None) -> Net:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    net = Net(checkpointed)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed \
        else MixedPrecisionPolicy()
    for i, block in enumerate(net.blocks):
        if compile_first is not None:
            block = compile_first(block)
            net.blocks[i] = block
        fully_shard(block, mp_policy=policy)
    fully_shard(net, mp_policy=policy)
    return net


def batches(rank: int, steps: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed + rank)
    return [(torch.randn(8, WIDTH, generator=gen), torch.randn(8, 1, generator=gen)) for _ in range(steps)]


def compiled_model(spelling: str, mixed: bool, checkpointed: bool, counter: Any) -> tuple[Net, Any]:
    import ember.dynamo

    if spelling == "before":
        net = sharded(mixed, checkpointed, lambda b: ember.dynamo.compile(b, backend=counter))
        return net, net
    net = sharded(mixed, checkpointed)
    if spelling == "whole":
        return net, ember.dynamo.compile(net, backend=counter)
    if spelling == "regions":
        ember.dynamo.compile(net.blocks, backend=counter)
        return net, net
    if spelling == "per_block":
        for i, block in enumerate(net.blocks):
            net.blocks[i] = ember.dynamo.compile(block, backend=counter)
        return net, net
    raise ValueError(spelling)


def checkpoint_and_restart(
    net: Net, opt: torch.optim.Optimizer, folder: str, make: Any, rank: int
) -> list[float]:
    """Save ``net`` and ``opt`` with torch.distributed.checkpoint, load them into a fresh
    sharded model and optimizer (``make() -> (net, forward)``) and train on."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(net, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=folder)
    fresh, forward = make()
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=1e-2)
    model_sd, optim_sd = get_state_dict(fresh, fresh_opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(fresh, fresh_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return train(forward, fresh_opt, batches(rank, RESTART_STEPS, 500))


def run(rank: int, world: int, argv: list[str], port: int, out: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import ember.dynamo

    spelling, backend = argv[0], argv[1]
    mixed, checkpointed = "mp" in argv, "ac" in argv
    dcp_dir = next((a.split("=", 1)[1] for a in argv if a.startswith("dcp=")), None)
    result: dict[str, Any] = {}
    try:
        reference = sharded(mixed, checkpointed)
        counter = GraphCounter(backend)
        net, forward = compiled_model(spelling, mixed, checkpointed, counter)
        data = batches(rank, STEPS, 100)
        ref_opt = torch.optim.Adam(reference.parameters(), lr=1e-2)
        opt = torch.optim.Adam(net.parameters(), lr=1e-2)
        result["eager_losses"] = train(reference, ref_opt, data)
        result["compiled_losses"] = train(forward, opt, data)
        result["max_param_diff"] = max(
            (a - b).abs().max().item() for a, b in zip(full_params(reference), full_params(net), strict=True)
        )
        counts = torch.tensor([counter.frames, counter.forward, counter.backward])
        gathered = [torch.zeros_like(counts) for _ in range(world)]
        dist.all_gather(gathered, counts)
        result["graphs_per_rank"] = [g.tolist() for g in gathered]
        result["graph_inputs"] = list(counter.inputs)
        if dcp_dir is not None:
            result["eager_restart_losses"] = checkpoint_and_restart(
                reference, ref_opt, os.path.join(dcp_dir, "eager"),
                lambda: (lambda m: (m, m))(sharded(mixed, checkpointed)), rank,
            )
            result["compiled_restart_losses"] = checkpoint_and_restart(
                net, opt, os.path.join(dcp_dir, "compiled"),
                lambda: compiled_model(spelling, mixed, checkpointed, counter), rank,
            )
            result["eager_continued_losses"] = train(reference, ref_opt, batches(rank, RESTART_STEPS, 500))
        with torch.no_grad():
            explained = ember.dynamo.explain(net)(torch.randn(8, WIDTH))
        result["break_reasons"] = sorted({b.reason for b in explained.break_reasons})
    finally:
        finish(rank, out, result)


if __name__ == "__main__":
    port, out = int(sys.argv[3]), sys.argv[4]
    mp.spawn(run, args=(2, sys.argv[1:3] + sys.argv[5:], port, out), nprocs=2)
