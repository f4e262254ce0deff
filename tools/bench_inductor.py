"""Quick side-by-side measurement: eager vs ember.inductor vs torch.compile(inductor), CPU.

    python tools/bench_inductor.py            # runtime speedups + cold/warm compile times
    python tools/bench_inductor.py --runtime  # runtime only

Each compile-time figure runs in a fresh subprocess with fresh cache dirs (cold)
or the cache of the previous run (warm). Timings are medians; other processes
share this machine, so read ratios from one run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

WORKLOADS = ["pointwise_chain", "softmax", "layernorm_gelu", "mlp"]


def build(name: str) -> tuple[Callable[..., Any], tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    if name == "pointwise_chain":
        x, y = torch.randn(1_000_000), torch.randn(1_000_000)
        return (lambda a, b: torch.relu(torch.cos(a) + torch.sin(b)) * 2.0), (x, y)
    if name == "softmax":
        return (lambda a: torch.softmax(a, dim=-1)), (torch.randn(512, 1024),)
    if name == "layernorm_gelu":
        ln = torch.nn.LayerNorm(1024)
        return (lambda a: torch.nn.functional.gelu(ln(a))), (torch.randn(256, 1024),)
    if name == "mlp":
        mlp = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512))
        return mlp, (torch.randn(64, 512),)
    raise ValueError(name)


def compiled(name: str, which: str) -> tuple[Callable[..., Any], tuple[torch.Tensor, ...]]:
    fn, args = build(name)
    if which == "eager":
        return fn, args
    if which == "ember":
        import ember.inductor

        return torch.compile(fn, backend=ember.inductor.backend), args
    return torch.compile(fn, backend="inductor"), args


def bench_many(fns: dict[str, tuple[Callable[..., Any], tuple[torch.Tensor, ...]]], rounds: int = 7, reps: int = 10) -> dict[str, float]:
    """Best per-call time of each fn, rounds interleaved (robust to other load on the machine)."""
    best = {k: math.inf for k in fns}
    with torch.no_grad():
        for fn, args in fns.values():
            for _ in range(3):
                fn(*args)
        for _ in range(rounds):
            for k, (fn, args) in fns.items():
                t = time.perf_counter()
                for _ in range(reps):
                    fn(*args)
                best[k] = min(best[k], (time.perf_counter() - t) / reps)
    return best


def compile_seconds(name: str, which: str) -> float:
    fn, args = compiled(name, which)
    t = time.perf_counter()
    with torch.no_grad():
        fn(*args)
    return time.perf_counter() - t


def _child(name: str, which: str, env: dict[str, str]) -> float:
    code = f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import bench_inductor as b; print(b.compile_seconds({name!r}, {which!r}))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's default)")
    ap.add_argument("--only", nargs="*", default=WORKLOADS, help="workloads to run")
    opts = ap.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
        os.environ["OMP_NUM_THREADS"] = str(opts.threads)
    rows: dict[str, dict[str, float]] = {}
    for name in opts.only:
        t = bench_many({w: compiled(name, w) for w in ("eager", "ember", "torch")})
        rows[name] = {"eager_ms": t["eager"] * 1e3, "ember_x": t["eager"] / t["ember"], "torch_x": t["eager"] / t["torch"]}
    if not opts.runtime:
        for name in opts.only:
            with tempfile.TemporaryDirectory() as d:
                env = dict(os.environ, EMBER_CACHE_DIR=f"{d}/ember", TORCHINDUCTOR_CACHE_DIR=f"{d}/torch")
                rows[name]["ember_cold_s"] = _child(name, "ember", env)
                rows[name]["torch_cold_s"] = _child(name, "torch", env)
                rows[name]["ember_warm_s"] = _child(name, "ember", env)
                rows[name]["torch_warm_s"] = _child(name, "torch", env)
    if opts.json:
        print(json.dumps(rows, indent=2))
        return
    keys = list(next(iter(rows.values())).keys())
    print(f"{'workload':<16}" + "".join(f"{k:>14}" for k in keys))
    for name, r in rows.items():
        print(f"{name:<16}" + "".join(f"{r[k]:>14.3f}" for k in keys))
    ember_g, torch_g = geomean([r["ember_x"] for r in rows.values()]), geomean([r["torch_x"] for r in rows.values()])
    print(f"geomean speedup over eager: ember {ember_g:.3f}x, torch.compile {torch_g:.3f}x, ratio {ember_g / torch_g:.3f}")
    if not opts.runtime:
        for kind in ("cold", "warm"):
            e = geomean([r[f"ember_{kind}_s"] for r in rows.values()])
            tc = geomean([r[f"torch_{kind}_s"] for r in rows.values()])
            print(f"{kind} compile geomean: ember {e:.2f}s, torch.compile {tc:.2f}s, ratio {e / tc:.3f}")


if __name__ == "__main__":
    main()
