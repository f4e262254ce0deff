"""Two gloo processes on one machine: eager DDP beside compiled DDP, step by step.

Run by ``integration_tests/test_ddp.py`` as a script:
``python ddp_worker.py SCENARIO BACKEND PORT OUT.json``. Each rank trains the
same model twice from the same weights on its own batches, once with eager
``DDP(model)`` and once compiled (``SCENARIO``: ``outer`` is
``ember.dynamo.compile(DDP(model))``, ``inner`` is
``DDP(ember.dynamo.compile(model))``), and rank 0 writes both runs' losses,
the largest parameter difference and the graphs the backend compiled as JSON.
``fullgraph`` checks that ``compile(DDP(model), fullgraph=True)`` says why not.
(The DDP benchmark is ``tools/bench_distributed.py``.)
"""

from __future__ import annotations

import copy
import os
import sys
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from training import finish

WIDTH = 64
LAYERS = 4
STEPS = 4
#: one Linear(64, 64) is 16.25 KiB of parameters: a bucket of about one layer
BUCKET_CAP_MB = 16 * 1024 / (1024 * 1024)


def model(width: int = WIDTH, layers: int = LAYERS) -> nn.Module:
    torch.manual_seed(0)
    blocks: list[nn.Module] = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*blocks, nn.Linear(width, 1))


def train(ddp: Any, rank: int) -> list[float]:
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(STEPS):
        x = torch.randn(8, WIDTH, generator=gen)
        y = torch.randn(8, 1, generator=gen)
        loss = ((ddp(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def run(rank: int, world: int, scenario: str, backend: str, port: int, out: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import ember.dynamo
    from ember.dynamo.testing import CompileCounterWithBackend

    result: dict[str, Any] = {}
    try:
        reference = model()
        compiled_model = copy.deepcopy(reference)
        if scenario == "fullgraph":
            try:
                ember.dynamo.compile(DDP(compiled_model), fullgraph=True)
                result["error"] = None
            except Exception as e:
                result["error"] = f"{type(e).__name__}: {e}"
            return
        counter = CompileCounterWithBackend(backend)
        if scenario == "outer":
            wrapped = DDP(compiled_model, bucket_cap_mb=BUCKET_CAP_MB)
            compiled = ember.dynamo.compile(wrapped, backend=counter)
        else:
            inner = ember.dynamo.compile(compiled_model, backend=counter)
            compiled = DDP(inner, bucket_cap_mb=BUCKET_CAP_MB)
        result["eager_losses"] = train(DDP(reference, bucket_cap_mb=BUCKET_CAP_MB), rank)
        result["compiled_losses"] = train(compiled, rank)
        result["max_param_diff"] = max(
            (a - b).abs().max().item()
            for a, b in zip(reference.parameters(), compiled_model.parameters(), strict=True)
        )
        result["graphs"] = counter.frame_count
        result["params_per_graph"] = [len(list(g.parameters())) for g in counter.graphs]
    finally:
        finish(rank, out, result)


if __name__ == "__main__":
    scenario, backend, port, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    mp.spawn(run, args=(2, scenario, backend, port, out), nprocs=2)
