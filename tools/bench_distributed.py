"""Distributed training steps on two gloo processes: eager, ember and torch.compile interleaved.

Run by ``tools/bench_training.py`` (rows ``ddp``, ``fsdp2`` and ``tp``) as a script:
``python tools/bench_distributed.py SETUP PORT OUT.json STEPS WARMUP [COLUMNS]``, with
SETUP one of

- ``ddp``: a 6-layer, 512-wide MLP under a forward in user code, ``DDP(model,
  bucket_cap_mb=1)`` compiled whole (``compile(DDP(model))``), SGD eager;
- ``fsdp2``: a GPT of 4 blocks (width 128, 4 heads, sequence 32, batch 8, vocabulary
  256), every block and the root ``fully_shard``-ed (torchtitan's recipe), the sharded
  model compiled whole (``compile(model)``), Adam eager;
- ``tp``: the same GPT, each block's MLP tensor-parallel on a 1-d mesh of the two ranks
  (``parallelize_module``: ``fc`` ``ColwiseParallel``, ``out`` ``RowwiseParallel``; the
  attention replicated), one batch for both ranks, compiled whole, Adam eager.

Each process builds one model per column from the same weights (``eager``; ``ember``:
ember.dynamo with the inductor backend; ``torch.compile``: TorchDynamo with torch's
inductor) and trains them step by step in turn, so that a drifting machine load weighs
on every column alike; a barrier starts every step. Rank 0 writes, per column, the
median wall time of a step after warm-up, the median CPU time of a step (the whole
process: the gloo threads included), the losses, the graphs the backend compiled and the
compiled graphs one step runs. Peak memory is not measured on CPU (no allocator
statistics); on CUDA it would be ``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

COLUMNS = ("eager", "ember", "torch.compile")


class MLP(nn.Module):
    def __init__(self, width: int = 512, layers: int = 6) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        for _ in range(layers):
            blocks += [nn.Linear(width, width), nn.GELU()]
        self.layers = nn.Sequential(*blocks, nn.Linear(width, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        out: torch.Tensor = self.proj(y)
        return out


class GPTBlock(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab: int = 256, width: int = 128, heads: int = 4, blocks: int = 4,
                 seq: int = 32) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(seq, width)
        self.layers = nn.ModuleList(GPTBlock(width, heads) for _ in range(blocks))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.ln(x))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


class Counting:
    """A backend wrapper: graphs compiled, and calls of the compiled graphs."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.graphs, self.calls = inner, 0, 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.graphs += 1
        compiled = self.inner(gm, example_inputs)

        def run(*args: Any) -> Any:
            self.calls += 1
            return compiled(*args)

        return run


def backend_of(column: str) -> Counting | None:
    if column == "ember":
        import ember.dynamo

        return Counting(ember.dynamo.backends.lookup_backend("inductor"))
    if column == "torch.compile":
        from torch._inductor.compile_fx import compile_fx

        return Counting(compile_fx)
    return None


def compiled(column: str, target: nn.Module, counter: Counting | None) -> Any:
    if column == "ember":
        import ember.dynamo

        return ember.dynamo.compile(target, backend=counter)
    if column == "torch.compile":
        return torch.compile(target, backend=counter)
    return target


def ddp_setup(column: str, rank: int) -> tuple[Callable[[], float], Counting | None]:
    torch.manual_seed(0)
    net = MLP()
    counter = backend_of(column)
    step_model = compiled(column, DDP(net, bucket_cap_mb=1), counter)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(64, 512, generator=gen), torch.randn(64, 1, generator=gen)

    def step() -> float:
        loss = ((step_model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()

    return step, counter


def fsdp2_setup(column: str, rank: int) -> tuple[Callable[[], float], Counting | None]:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    net = GPT()
    for layer in net.layers:
        fully_shard(layer)
    fully_shard(net)
    counter = backend_of(column)
    step_model = compiled(column, net, counter)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(100 + rank)
    idx = torch.randint(0, 256, (8, 32), generator=gen)
    targets = torch.randint(0, 256, (8, 32), generator=gen)

    def step() -> float:
        loss = step_model(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return float(loss.item())

    return step, counter


def tp_setup(column: str, rank: int) -> tuple[Callable[[], float], Counting | None]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch.manual_seed(0)
    net = GPT()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in net.layers:  # each block's MLP tensor-parallel (attention replicated)
        parallelize_module(layer, mesh, {"fc": ColwiseParallel(), "out": RowwiseParallel()})
    counter = backend_of(column)
    step_model = compiled(column, net, counter)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(100)  # tensor parallelism: one batch for every rank
    idx = torch.randint(0, 256, (8, 32), generator=gen)
    targets = torch.randint(0, 256, (8, 32), generator=gen)

    def step() -> float:
        loss = step_model(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return float(loss.item())

    return step, counter


SETUPS = {"ddp": ddp_setup, "fsdp2": fsdp2_setup, "tp": tp_setup}


def run(rank: int, setup: str, port: int, out: str, steps: int, warmup: int, columns: list[str]) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    result: dict[str, Any] = {}
    try:
        made = {c: SETUPS[setup](c, rank) for c in columns}
        wall: dict[str, list[float]] = {c: [] for c in columns}
        cpu: dict[str, list[float]] = {c: [] for c in columns}
        losses: dict[str, list[float]] = {c: [] for c in columns}
        calls_before: dict[str, int] = {}
        for i in range(warmup + steps):
            for c in columns:
                step, counter = made[c]
                if i == warmup and counter is not None:
                    calls_before[c] = counter.calls
                dist.barrier()
                start, start_cpu = time.perf_counter(), time.process_time()
                losses[c].append(step())
                if i >= warmup:
                    wall[c].append(time.perf_counter() - start)
                    cpu[c].append(time.process_time() - start_cpu)
        for c in columns:
            counter = made[c][1]
            result[c] = {
                "seconds": statistics.median(wall[c]),
                "cpu_seconds": statistics.median(cpu[c]),
                "losses": losses[c],
                "graphs": None if counter is None else counter.graphs,
                "graphs_per_step": None if counter is None else (counter.calls - calls_before[c]) / steps,
            }
    finally:
        if rank == 0:
            with open(out, "w") as f:
                json.dump(result, f)
        dist.destroy_process_group()


if __name__ == "__main__":
    setup, port, out, steps, warmup = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    columns = sys.argv[6].split(",") if len(sys.argv) > 6 else list(COLUMNS)
    mp.spawn(run, args=(setup, port, out, steps, warmup, columns), nprocs=2)
