"""Bytes of activations saved between forward and backward, per partitioner.

For each training workload it compiles the model three ways and reports what
the forward hands to the backward:

- ember min-cut:  ember.aotgrad.aot_module(..., min_cut_rematerialization_partition)
- ember default:  ember.aotgrad.aot_module(..., default_partition)
- torch aot_eager: torch.compile(backend=aot_autograd(..., torch's min-cut)),
  i.e. torch's own aot_eager with compilers that record the backward graph
  (this script may import torch's compiler stack: it only compares against it)
- eager: what eager autograd saves (saved-tensor hooks), for reference.

"Activations" are saved tensors whose storage is not an input's (parameters,
buffers and the batch are alive anyway), counted once per storage. Saved
inputs are reported separately.

Usage: .venv/bin/python tools/bench_aotgrad.py [--quick]
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmark suite's models
from bench.workloads import ConvBlock, GPTBlock, _mlp

from ember.aotgrad import (
    aot_module,
    default_partition,
    min_cut_rematerialization_partition,
    nop_compiler,
)


@dataclass(frozen=True)
class Workload:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], list[torch.Tensor]]


WORKLOADS = [
    Workload("MLP 64x512-2048-512", _mlp, lambda: [torch.randn(64, 512)]),
    Workload("GPT block d=128 seq=64 b=8", lambda: GPTBlock(128, 4, 64, dropout=0.1),
             lambda: [torch.randn(8, 64, 128)]),
    Workload("CNN block 32ch 32x32 b=16", lambda: ConvBlock(32), lambda: [torch.randn(16, 32, 32, 32)]),
    Workload("TransformerEncoderLayer d=256", lambda: nn.TransformerEncoderLayer(
        256, 8, dim_feedforward=1024, dropout=0.1, batch_first=True),
        lambda: [torch.randn(8, 64, 256)]),
]


def _storage(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


def _nbytes(t: torch.Tensor) -> int:
    return int(t.untyped_storage().nbytes())


@dataclass
class Saved:
    activation_bytes: int
    input_bytes: int
    count: int


def saved_from_graphs(fw: fx.GraphModule, bw: fx.GraphModule) -> Saved:
    """Static count: backward placeholders that are not tangents, by fake storage."""
    inputs = {_storage(n.meta["val"]) for n in fw.graph.nodes
              if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)}
    act: dict[int, int] = {}
    inp: dict[int, int] = {}
    count = 0
    for n in bw.graph.nodes:
        if n.op != "placeholder" or "tangents" in n.name:
            continue
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        count += 1
        s = _storage(val)
        (inp if s in inputs else act)[s] = _nbytes(val)
    return Saved(sum(act.values()), sum(inp.values()), count)


def measure_ember(w: Workload, partition: Any) -> Saved:
    torch.manual_seed(0)
    model = w.build().train()
    compiled = aot_module(model, nop_compiler, partition_fn=partition)
    compiled(*w.inputs()).sum().backward()
    part = compiled._compiled.last_partition
    assert part is not None
    return saved_from_graphs(part.forward, part.backward)


def measure_torch(w: Workload) -> Saved:
    import torch._dynamo
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition as torch_mc

    torch._dynamo.reset()
    graphs: dict[str, fx.GraphModule] = {}

    def fw(gm: fx.GraphModule, example_inputs: Any) -> Any:
        graphs["fw"] = gm
        return make_boxed_func(gm.forward)

    def bw(gm: fx.GraphModule, example_inputs: Any) -> Any:
        graphs["bw"] = gm
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=fw, bw_compiler=bw, partition_fn=torch_mc,
                           keep_inference_input_mutations=True)
    torch.manual_seed(0)
    model = w.build().train()
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    compiled(*w.inputs()).sum().backward()
    return saved_from_graphs(graphs["fw"], graphs["bw"])


def measure_eager(w: Workload) -> Saved:
    torch.manual_seed(0)
    model = w.build().train()
    inputs = w.inputs()
    known = {_storage(t) for t in [*model.parameters(), *model.buffers(), *inputs]}
    act: dict[int, int] = {}
    inp: dict[int, int] = {}
    count = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        count[0] += 1
        s = _storage(t)
        (inp if s in known else act)[s] = _nbytes(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(*inputs)
    out.sum().backward()
    return Saved(sum(act.values()), sum(inp.values()), count[0])


def check_ember_matches_eager(w: Workload) -> float:
    """Max abs difference of the ember (min-cut) gradients vs eager's, as a sanity check."""
    torch.manual_seed(0)
    model = w.build().train()
    ref = copy.deepcopy(model)
    x = w.inputs()
    torch.manual_seed(1)
    aot_module(model, nop_compiler)(*x).square().mean().backward()
    torch.manual_seed(1)
    ref(*x).square().mean().backward()
    diffs = [float((a.grad - b.grad).abs().max()) for a, b in zip(model.parameters(),
             ref.parameters()) if a.grad is not None and b.grad is not None]
    return max(diffs)


def _mib(n: int) -> str:
    return f"{n / 2**20:8.3f}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-torch", action="store_true", help="leave out torch's column")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}; activation bytes saved for backward, MiB "
          "(saved inputs/params in parentheses)\n")
    header = (f"{'workload':32} {'ember min-cut':>20} {'ember default':>20} "
              f"{'torch aot_eager':>20} {'eager':>20}  max|grad diff|")
    print(header)
    print("-" * len(header))
    worse = []
    for w in WORKLOADS:
        mc = measure_ember(w, min_cut_rematerialization_partition)
        df = measure_ember(w, default_partition)
        th = None if args.skip_torch else measure_torch(w)
        eg = measure_eager(w)
        diff = check_ember_matches_eager(w)

        def cell(s: Saved | None) -> str:
            if s is None:
                return f"{'-':>20}"
            return f"{_mib(s.activation_bytes)} ({_mib(s.input_bytes).strip():>6})".rjust(20)

        print(f"{w.name:32} {cell(mc)} {cell(df)} {cell(th)} {cell(eg)}  {diff:.2e}")
        if th is not None and mc.activation_bytes > th.activation_bytes:
            worse.append(w.name)
    print()
    if worse:
        print("ember min-cut saves MORE activation bytes than torch on: " + ", ".join(worse))
        return 1
    print("ember min-cut <= torch aot_eager on every workload")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
