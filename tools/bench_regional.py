"""Regional compilation vs compiling the whole model: cold compile time of a 12-layer transformer.

    python tools/bench_regional.py [--layers 12] [--repeats 3] [--train] [--torch] [--preimport] [--threads N]

Each measurement is a fresh interpreter with an empty ``EMBER_CACHE_DIR`` (nothing
cached: capture, tracing, lowering and the C++ compiler all run), timing the compiler
call plus the first call:

* ``whole``: ``ember.dynamo.compile(model)``: one frame, all layers inlined in one graph;
* ``regional``: ``ember.dynamo.compile(model.layers)``: the layers share one compiled
  ``forward``; the first layer is captured and compiled, the others bind it;
* ``torch whole`` / ``torch regional``: torch.compile on the model / each layer
  (``layer.compile()``), for comparison.

Python's bytecode cache is kept (``PYTHONDONTWRITEBYTECODE`` is dropped for the workers, as
in ``tools/bench``): an installed ember has its ``.pyc`` files. Prints the median of ``--repeats`` runs per mode and the ratio regional / whole, each
with the worker's CPU seconds (its own and its finished children's: ember's C++ compiler runs;
torch's compile workers outlive the figure, so its CPU column is a lower bound). On a
machine shared with other work, ``--threads 1`` (``OMP_NUM_THREADS`` for every mode)
keeps OpenMP threads from waiting on descheduled siblings during the first call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

WORKER = textwrap.dedent(
    """
    import json, math, os, sys, time
    import torch
    from torch import nn
    sys.path.insert(0, {tools!r})
    from bench.workloads import GPTBlock

    mode, layers, train, preimport = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(GPTBlock(128, 4, 64, dropout=0.0) for _ in range(layers))
            self.head = nn.LayerNorm(128)

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.head(x)

    torch.manual_seed(0)
    model = Model()
    x = torch.randn(8, 64, 128)
    if mode.startswith("torch") or preimport:
        # imported before the clock, as tools/bench does for torch.compile; ember's first
        # capture imports it too (torch's FakeTensorMode does), so --preimport leaves
        # the same fixed cost out of ember's figures
        import torch._dynamo
    start, cpu0 = time.perf_counter(), os.times()
    if mode == "whole":
        import ember.dynamo
        run = ember.dynamo.compile(model)
    elif mode == "regional":
        import ember.dynamo
        ember.dynamo.compile(model.layers)
        run = model
    elif mode == "torch whole":
        run = torch.compile(model)
    else:
        for layer in model.layers:
            layer.compile()
        run = model
    if train:
        run(x).sum().backward()
    else:
        with torch.no_grad():
            run(x)
    seconds = time.perf_counter() - start
    cpu1 = os.times()
    cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    children = (cpu1.children_user + cpu1.children_system) - (cpu0.children_user + cpu0.children_system)
    print(json.dumps({{"seconds": seconds, "cpu": cpu, "children_cpu": children}}))
    """
)


def measure(
    mode: str, layers: int, train: bool, preimport: bool = False, threads: int | None = None
) -> dict[str, float]:
    tools = str(Path(__file__).resolve().parent)
    with tempfile.TemporaryDirectory(prefix="ember-regional-") as tmp:
        script = Path(tmp) / "worker.py"
        script.write_text(WORKER.format(tools=tools))
        env = dict(os.environ, EMBER_CACHE_DIR=str(Path(tmp) / "cache"), TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / "torch"))
        env.pop("EMBER_COMPILE_DEBUG", None)
        # Python's bytecode cache is what an installed ember has (pip writes the .pyc
        # files; torch's are in site-packages): with PYTHONDONTWRITEBYTECODE every worker
        # compiled ember's editable sources again (~0.3 s in both modes), which no user
        # pays. tools/bench's workers keep it the same way (bench/runner.py).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        if threads is not None:
            env["OMP_NUM_THREADS"] = str(threads)
        proc = subprocess.run(
            [sys.executable, str(script), mode, str(layers), "1" if train else "0", "1" if preimport else "0"],
            capture_output=True, text=True, env=env, timeout=1800,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{mode} failed:\n{proc.stderr[-3000:]}")
        figures: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
        return figures


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--train", action="store_true", help="a training step (forward + backward) instead of inference")
    p.add_argument("--torch", action="store_true", help="also measure torch.compile")
    p.add_argument("--preimport", action="store_true",
                   help="import TorchDynamo before the clock for ember's modes too (as for torch's): "
                   "the figures are then compile work without that fixed import")
    p.add_argument("--threads", type=int, default=None,
                   help="OMP_NUM_THREADS for every mode (default: torch's default)")
    args = p.parse_args()
    modes = ["whole", "regional"] + (["torch whole", "torch regional"] if args.torch else [])
    times: dict[str, list[float]] = {m: [] for m in modes}
    cpus: dict[str, list[float]] = {m: [] for m in modes}
    load = [os.getloadavg()[0]]
    for _ in range(args.repeats):
        for mode in modes:  # interleaved, so load changes hit every mode alike
            got = measure(mode, args.layers, args.train, args.preimport, args.threads)
            times[mode].append(got["seconds"])
            cpus[mode].append(got["cpu"] + got["children_cpu"])
    load.append(os.getloadavg()[0])
    median = {m: statistics.median(v) for m, v in times.items()}
    cpu = {m: statistics.median(v) for m, v in cpus.items()}
    what = "training step" if args.train else "inference"
    imports = ", TorchDynamo imported before the clock for every mode" if args.preimport else ""
    threads = f", OMP_NUM_THREADS={args.threads}" if args.threads is not None else ""
    print(f"cold compile (compiler call + first call), {args.layers} GPT layers, {what}, "
          f"median of {args.repeats}, load {load[0]:.1f}-{load[1]:.1f}{imports}{threads}")
    for mode in modes:
        print(f"  {mode:15s} {median[mode]:7.2f} s  CPU {cpu[mode]:6.2f} s (g++ included)   "
              f"runs: {', '.join(f'{t:.2f}' for t in times[mode])}")
    for family, prefix in (("ember", ""), ("torch", "torch ")):
        if f"{prefix}regional" in median:
            print(f"  {family} regional / whole: {median[prefix + 'regional'] / median[prefix + 'whole']:.2f}x "
                  f"wall, {cpu[prefix + 'regional'] / cpu[prefix + 'whole']:.2f}x CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
