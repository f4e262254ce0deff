"""Dynamic shapes: compiles over varying shapes, symbolic vs static kernels, amortized time.

Three figures per workload (a transformer block, an MLP, a CNN; inference):

1. compiles over 20 varying shapes: ember (``dynamic=None``, backend inductor)
   and torch.compile (``dynamic=None``, counted with torch's counting backend:
   how many times torch's frontend compiles does not depend on its backend);
2. the compiled graph's time per call at one shape, ember with ``dynamic=False``
   (static kernels) and with ``dynamic=True`` (symbolic kernels), as a ratio;
3. amortized time per step over ``--steps`` steps from cold, the shape changing
   every step (cycling over the 20 shapes): eager, ember ``dynamic=None``,
   ember ``dynamic=False`` (and torch.compile with ``--torch``), compile time
   included.

Each measurement runs in this process one after the other (caches are reset
between compilers with ``reset()``; ember's on-disk caches are pointed at a
fresh temporary folder). The machine is shared: print ``uptime`` beside the
figures. ``.venv/bin/python tools/bench_dynamic.py [--steps 1000] [--torch] [--generate 100]``
(``--generate N``: LLaMA ``generate`` time per token, eager vs compiled forward).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch._dynamo
import torch._dynamo.testing
from torch import nn

os.environ.setdefault("EMBER_CACHE_DIR", tempfile.mkdtemp(prefix="ember-bench-dynamic-"))

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounterWithBackend

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration_tests"))
from test_dynamic_shapes import Block, cnn, mlp


@dataclass
class Workload:
    name: str
    make: Callable[[], nn.Module]
    shape: Callable[[int], tuple[int, ...]]


SHAPES = 20
WORKLOADS = [
    Workload("block", Block, lambda i: (2 + i % 5, 8 + 3 * i, 32)),
    Workload("mlp", mlp, lambda i: (4 + 7 * i, 16)),
    Workload("cnn", cnn, lambda i: (2 + i % 6, 3, 16 + 2 * (i % 8), 16 + 2 * (i % 8))),
]


def inputs(w: Workload) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*w.shape(i), generator=g) for i in range(SHAPES)]


def compiles(w: Workload) -> tuple[int, int]:
    xs = inputs(w)
    model = w.make().eval()
    ed.reset()
    cnt = CompileCounterWithBackend("inductor")
    ember_fn = ed.compile(model, backend=cnt)
    torch._dynamo.reset()
    tcnt = torch._dynamo.testing.CompileCounter()
    torch_fn = torch.compile(model, backend=tcnt)
    with torch.no_grad():
        for x in xs:
            want = model(x)
            torch.testing.assert_close(ember_fn(x), want, rtol=1e-4, atol=1e-4)
            torch_fn(x)
    return cnt.frame_count, tcnt.frame_count


def call_time(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t0)
    return statistics.median(sorted(times)[: max(1, reps // 2)])


def kernel_ratio(w: Workload, reps: int) -> tuple[float, float]:
    x = inputs(w)[3]
    model = w.make().eval()
    with torch.no_grad():
        ed.reset()
        static = ed.compile(model, backend="inductor", dynamic=False)
        dynamic = ed.compile(model, backend="inductor", dynamic=True)
        static(x), dynamic(x)
        s = d = 0.0
        for _ in range(5):  # interleaved, so load changes hit both alike
            s += call_time(static, x, reps)
            d += call_time(dynamic, x, reps)
    return s / 5, d / 5


def amortized(w: Workload, steps: int, compiler: str) -> float:
    xs = inputs(w)
    model = w.make().eval()
    ed.reset()
    if compiler == "eager":
        fn: Callable[[torch.Tensor], torch.Tensor] = model
    elif compiler == "torch":
        torch._dynamo.reset()
        fn = torch.compile(model)
    else:
        fn = ed.compile(model, backend="inductor", dynamic={"ember": None, "ember-static": False}[compiler])
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(steps):
            fn(xs[i % SHAPES])
    return (time.perf_counter() - t0) / steps


def generate_row(new_tokens: int, with_torch: bool) -> None:
    """LLaMA ``generate``: time per generated token after the first call, eager vs compiled forward.

    The model is the integration test's small LLaMA (random weights, 2 layers); greedy
    decoding, so the compiled run's tokens must equal eager's (checked)."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(3, 256, (1, 8))
    kw = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False}
    eager_forward = model.forward

    def timed() -> tuple[torch.Tensor, float]:
        t0 = time.perf_counter()
        out = model.generate(ids, **kw)
        return out, time.perf_counter() - t0

    rows: list[tuple[str, float, float, int]] = []
    with torch.no_grad():
        want, first = timed()
        _, again = timed()
        rows.append(("eager", first, min(again, timed()[1]), 0))
        compilers = [("ember (inductor)", None)] + ([("torch.compile (inductor)", "torch")] if with_torch else [])
        for label, kind in compilers:
            ed.reset()
            torch._dynamo.reset()
            if kind == "torch":
                tcnt = torch._dynamo.testing.CompileCounterWithBackend("inductor")
                model.forward = torch.compile(eager_forward, backend=tcnt)
            else:
                cnt = CompileCounterWithBackend("inductor")
                model.forward = ed.compile(eager_forward, backend=cnt)
            got, first = timed()
            assert torch.equal(got, want), f"{label}: greedy tokens differ from eager"
            _, again = timed()
            again = min(again, timed()[1])
            frames = tcnt.frame_count if kind == "torch" else cnt.frame_count
            rows.append((label, first, again, frames))
        model.forward = eager_forward
    print(f"\nLLaMA generate(max_new_tokens={new_tokens}), greedy tokens equal eager's")
    print("| forward | first call s | ms/token after | vs eager | compiles |")
    print("|---|---|---|---|---|")
    base = rows[0][2]
    for label, first, again, frames in rows:
        print(f"| {label} | {first:.2f} | {again / new_tokens * 1e3:.2f} | {again / base:.2f} | {frames} |",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--torch", action="store_true", help="also time torch.compile (inductor)")
    ap.add_argument("--workloads", default=",".join(w.name for w in WORKLOADS))
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    ap.add_argument("--skip-amortized", action="store_true")
    ap.add_argument("--generate", type=int, default=0,
                    help="also time LLaMA generate(max_new_tokens=N) (needs transformers)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    chosen = [w for w in WORKLOADS if w.name in args.workloads.split(",")]
    print(f"load: {os.getloadavg()}, threads: {torch.get_num_threads()}")
    print("| workload | compiles/20 shapes ember | torch.compile | static us/call | symbolic us/call "
          "| symbolic/static |")
    print("|---|---|---|---|---|---|")
    for w in chosen:
        e, t = compiles(w)
        s, d = kernel_ratio(w, args.reps)
        print(f"| {w.name} | {e} | {t} | {s * 1e6:.0f} | {d * 1e6:.0f} | {d / s:.2f} |", flush=True)
    if args.generate:
        generate_row(args.generate, args.torch)
    if args.skip_amortized:
        return
    compilers = ["eager", "ember", "ember-static"] + (["torch"] if args.torch else [])
    print(f"\namortized ms/step over {args.steps} steps from cold (shape changes every step)")
    print("| workload | " + " | ".join(compilers) + " |")
    print("|---|" + "---|" * len(compilers))
    for w in chosen:
        row = [amortized(w, args.steps, c) * 1e3 for c in compilers]
        print(f"| {w.name} | " + " | ".join(f"{v:.2f}" for v in row) + " |", flush=True)
    print(f"load: {os.getloadavg()}")


if __name__ == "__main__":
    main()
