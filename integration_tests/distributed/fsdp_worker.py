"""Two gloo processes on one machine: eager FSDP2 beside ember-compiled FSDP2 (issue 18).

Run by ``integration_tests/test_fsdp.py`` as a script:
``python fsdp_worker.py BACKEND PORT OUT.json``. Each rank trains the same model
twice from the same weights on its own batches, with every block and the root
sharded by ``torch.distributed.fsdp.fully_shard`` (FSDP2): once eagerly and once
with the root compiled by ember, and rank 0 writes both runs' losses, the
largest parameter difference (of the full, all-gathered parameters), the graphs
the backend compiled and the graph-break reasons as JSON.

What ember does with FSDP2 today: a module ``fully_shard`` wrapped has forward
pre/post hooks (all-gather the shards before forward, free them after, and the
gradient reduce-scatter from backward hooks). Capture does not trace module
hooks: calling such a module is a graph break ("module `FSDPBlock` has
forward/backward hooks") and the call, hooks and the block's forward, runs
eagerly as FSDP2 wrote it. Training is therefore exactly eager's; only the code
between sharded modules (here the root's own layers: the head) is compiled.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

STEPS = 4
WIDTH = 32


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH)
        self.norm = nn.LayerNorm(WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(self.norm(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def sharded() -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    net = Net()
    for block in net.blocks:
        fully_shard(block)
    fully_shard(net)
    return net


def train(net: nn.Module, forward: Any, rank: int) -> list[float]:
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(8, WIDTH, generator=gen)
        y = torch.randn(8, 1, generator=gen)
        loss = ((forward(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def full_params(net: nn.Module) -> list[torch.Tensor]:
    return [p.full_tensor().detach() if hasattr(p, "full_tensor") else p.detach() for p in net.parameters()]


def run(rank: int, world: int, backend: str, port: int, out: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import ember.dynamo
    from ember.dynamo.testing import CompileCounterWithBackend

    result: dict[str, Any] = {}
    try:
        reference, net = sharded(), sharded()
        counter = CompileCounterWithBackend(backend)
        compiled = ember.dynamo.compile(net, backend=counter)
        result["eager_losses"] = train(reference, reference, rank)
        result["compiled_losses"] = train(net, compiled, rank)
        result["max_param_diff"] = max(
            (a - b).abs().max().item() for a, b in zip(full_params(reference), full_params(net), strict=True)
        )
        result["graphs"] = counter.frame_count
        result["ops_per_graph"] = [
            sum(1 for n in g.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
            for g in counter.graphs
        ]
        explained = ember.dynamo.explain(copy.copy(net))(torch.randn(8, WIDTH))
        result["break_reasons"] = sorted({b.reason for b in explained.break_reasons})
    finally:
        if rank == 0:
            with open(out, "w") as f:
                json.dump(result, f)
        dist.destroy_process_group()


if __name__ == "__main__":
    backend, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    mp.spawn(run, args=(2, backend, port, out), nprocs=2)
