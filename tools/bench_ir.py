"""Benchmark the graph IR on torch.nn.TransformerEncoderLayer: file sizes and save/load time.

    .venv/bin/python tools/bench_ir.py [--d-model 512] [--nhead 8] [--ff 2048] [--repeat 5]

Reports, for the torch-level graph (symbolic_trace) and the ATen-level graph
(make_fx, parameters as graph inputs, so no weights file): graph.json size,
weights.safetensors size, and median times of from_fx, dumps, loads, save,
load and to_fx. A benchmark script, not a timed test.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.fx
from torch import nn
from torch.fx.experimental.proxy_tensor import (
    make_fx,  # tools may use torch's tracer to build inputs
)

from ember.ir import GraphIR, dumps, from_fx, load, loads, save, to_fx


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(name: str, gm: torch.fx.GraphModule, example: list[torch.Tensor], repeat: int) -> None:
    from_fx(gm, example)  # warm-up (fake tensor mode start-up is a one-time cost)
    t_from = median_ms(lambda: from_fx(gm, example), repeat)
    ir: GraphIR = from_fx(gm, example)
    text = dumps(ir)
    t_dumps = median_ms(lambda: dumps(ir), repeat)
    t_loads = median_ms(lambda: loads(text), repeat)
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "g"
        t_save = median_ms(lambda: save(ir, target), repeat)
        t_load = median_ms(lambda: load(target), repeat)
        graph_bytes = (target / "graph.json").stat().st_size
        weights_bytes = (target / "weights.safetensors").stat().st_size
        loaded = load(target)
    t_to_fx = median_ms(lambda: to_fx(loaded), repeat)
    n_nodes = len(ir.nodes)
    print(f"\n{name}: {n_nodes} nodes, {len(ir.tensor_metas())} named tensors")
    print(f"  graph.json           {graph_bytes / 1024:10.1f} KiB")
    print(f"  weights.safetensors  {weights_bytes / 1024:10.1f} KiB")
    for label, ms in [("from_fx", t_from), ("dumps", t_dumps), ("loads", t_loads), ("save", t_save), ("load", t_load), ("to_fx", t_to_fx)]:
        print(f"  {label:<20} {ms:10.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--nhead", type=int, default=8)
    parser.add_argument("--ff", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.backends.mha.set_fastpath_enabled(False)  # the fast path branches on tensors; tracing cannot follow
    layer = nn.TransformerEncoderLayer(args.d_model, args.nhead, args.ff, batch_first=True).eval()
    x = torch.randn(4, 32, args.d_model)
    print(f"TransformerEncoderLayer(d_model={args.d_model}, nhead={args.nhead}, dim_feedforward={args.ff}), "
          f"input {tuple(x.shape)}, torch {torch.__version__}, median of {args.repeat}")
    concrete = {"src_mask": None, "src_key_padding_mask": None, "is_causal": False}
    measure("torch-level (symbolic_trace)", torch.fx.symbolic_trace(layer, concrete_args=concrete), [x], args.repeat)
    params = dict(layer.named_parameters())

    def run(p: dict[str, torch.Tensor], inp: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = torch.func.functional_call(layer, p, (inp,))
        return out

    aten_gm = make_fx(run)(params, x)
    measure("ATen-level (make_fx, params as inputs)", aten_gm, [], args.repeat)
    real_gm = make_fx(lambda inp: layer(inp))(x)
    measure("ATen-level (make_fx, params as get_attr)", real_gm, [], args.repeat)


if __name__ == "__main__":
    main()
