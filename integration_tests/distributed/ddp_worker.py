"""Two gloo processes on one machine: eager DDP beside compiled DDP, step by step.

Run by ``integration_tests/test_ddp.py`` (and ``tools/bench``) as a script:
``python ddp_worker.py SCENARIO BACKEND PORT OUT.json``. Each rank trains the
same model twice from the same weights on its own batches, once with eager
``DDP(model)`` and once compiled (``SCENARIO``: ``outer`` is
``ember.dynamo.compile(DDP(model))``, ``inner`` is
``DDP(ember.dynamo.compile(model))``), and rank 0 writes both runs' losses,
the largest parameter difference and the graphs the backend compiled as JSON.
``fullgraph`` checks that ``compile(DDP(model), fullgraph=True)`` says why not.
``bench`` (``tools/bench_training.py``: ``... bench COLUMN PORT OUT.json STEPS``)
times a wider model's DDP step with COLUMN one of ``eager``, ``ember``,
``torch.compile`` and counts the graphs its backend compiled.
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

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


class UserMLP(nn.Module):
    """``model()``'s layers under a forward written in user code: torch.compile starts
    tracing only in user frames, so DDP around a bare ``nn.Sequential`` (whose forward
    is torch's own code) gives it nothing to compile after DDP's forward breaks."""

    def __init__(self, width: int, layers: int) -> None:
        super().__init__()
        self.layers = model(width, layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def bench(rank: int, column: str, steps: int) -> dict[str, Any]:
    """Median DDP step time (after 5 warm-up steps) of a 6-layer, 512-wide MLP
    with 1 MiB buckets, the losses, the graphs the backend compiled, and how many
    compiled graphs one step runs."""
    net = UserMLP(width=512, layers=6)
    graphs = 0
    calls = 0

    def counting(inner: Any) -> Any:
        def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
            nonlocal graphs
            graphs += 1
            compiled = inner(gm, example_inputs)

            def run(*args: Any) -> Any:
                nonlocal calls
                calls += 1
                return compiled(*args)

            return run

        return backend

    ddp: Any = DDP(net, bucket_cap_mb=1)
    if column == "ember":
        import ember.dynamo

        ddp = ember.dynamo.compile(ddp, backend=counting(ember.dynamo.backends.lookup_backend("inductor")))
    elif column == "torch.compile":
        from torch._inductor.compile_fx import compile_fx

        ddp = torch.compile(ddp, backend=counting(compile_fx))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(64, 512, generator=gen), torch.randn(64, 1, generator=gen)
    times, losses = [], []
    calls_before = 0
    for i in range(5 + steps):
        if i == 5:
            calls_before = calls
        start = time.perf_counter()
        loss = ((ddp(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        if i >= 5:
            times.append(time.perf_counter() - start)
    return {
        "seconds": statistics.median(times),
        "losses": losses,
        "graphs": None if column == "eager" else graphs,
        "graphs_per_step": None if column == "eager" else (calls - calls_before) / steps,
    }


def run(rank: int, world: int, scenario: str, backend: str, port: int, out: str, steps: int = 0) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import ember.dynamo
    from ember.dynamo.testing import CompileCounterWithBackend

    result: dict[str, Any] = {}
    try:
        reference = model()
        compiled_model = copy.deepcopy(reference)
        if scenario == "bench":
            result = bench(rank, backend, steps)
            return
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
        if rank == 0:
            with open(out, "w") as f:
                json.dump(result, f)
        dist.destroy_process_group()


if __name__ == "__main__":
    scenario, backend, port, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    steps = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    mp.spawn(run, args=(2, scenario, backend, port, out, steps), nprocs=2)
