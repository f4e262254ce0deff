"""Cached-call time of workloads outside the test suites: eager, ember and torch.compile in
one process, interleaved (issue 30, ADR 0062).

    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_call_floor.py [--workloads gpt_bigcode,inplace]

- ``gpt_bigcode``: transformers' ``GPTBigCodeForCausalLM`` (multi-query attention; in no
  ember test or zoo) built from a small config with random weights, inference under
  ``no_grad`` on a (2, 32) batch.
- ``inplace``: a function that writes 8 of its 16 tensor inputs in place (``add_``) and
  returns a sum: the graphs whose inputs ``AliasChecked`` checked on every call before
  ADR 0062, now a ``NO_ALIASING`` guard.

Each row: CPU time of the calling thread per call (min of repeats; ``--wall``: wall time)
for eager, ember (backend ``inductor``, native guards from the first call) and
torch.compile (``inductor``), every result checked against eager's first.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import torch

import ember.dynamo

_clock = time.thread_time


def _per_call(fn: Callable[[], Any], calls: int) -> float:
    t0 = _clock()
    for _ in range(calls):
        fn()
    return (_clock() - t0) / calls * 1e6


def _gpt_bigcode() -> tuple[Callable[[Callable[..., Any]], Callable[[], Any]], Any]:
    from transformers import GPTBigCodeConfig, GPTBigCodeForCausalLM

    torch.manual_seed(0)
    cfg = GPTBigCodeConfig(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4, multi_query=True)
    model = GPTBigCodeForCausalLM(cfg)
    model.train(False)
    ids = torch.randint(0, 256, (2, 32))

    def make(fn: Callable[..., Any]) -> Callable[[], Any]:
        def call() -> Any:
            with torch.no_grad():
                return fn(input_ids=ids, use_cache=False).logits
        return call

    return make, model


def _inplace() -> tuple[Callable[[Callable[..., Any]], Callable[[], Any]], Any]:
    torch.manual_seed(0)
    xs = [torch.randn(16) for _ in range(16)]

    def step(*ts: torch.Tensor) -> torch.Tensor:
        for t in ts[:8]:
            t.add_(1.0)
        return sum(ts[8:], torch.zeros(16))

    def make(fn: Callable[..., Any]) -> Callable[[], Any]:
        return lambda: fn(*xs)

    return make, step


WORKLOADS = {"gpt_bigcode": _gpt_bigcode, "inplace": _inplace}


def _row(name: str, calls: int, with_torch: bool) -> None:
    make, target = WORKLOADS[name]()
    timed: dict[str, Callable[[], Any]] = {"eager": make(target)}
    want = timed["eager"]()
    timed["ember"] = make(ember.dynamo.compile(target, backend="inductor"))
    if with_torch:
        timed["torch.compile"] = make(torch.compile(target))
    for key, fn in timed.items():
        for _ in range(3):
            got = fn()
        if name != "inplace":  # (the in-place one changes its inputs each call)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=key)
    best = dict.fromkeys(timed, float("inf"))
    for _ in range(7):
        for key, fn in timed.items():
            best[key] = min(best[key], _per_call(fn, calls))
    tc = best.get("torch.compile", float("nan"))
    print(f"{name:<12} eager {best['eager']:8.1f} us  ember {best['ember']:8.1f} us  torch.compile {tc:8.1f} us"
          f"  ember/eager {best['ember'] / best['eager']:5.2f}  ember/tc {best['ember'] / tc:5.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="gpt_bigcode,inplace")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--no-torch", action="store_true", help="leave torch.compile out")
    parser.add_argument("--wall", action="store_true", help="time wall clock instead of thread CPU time")
    args = parser.parse_args()
    global _clock
    if args.wall:
        _clock = time.perf_counter
    os.environ.setdefault("EMBER_NATIVE_GUARDS", "eager")
    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {load:.2f}, torch {torch.__version__}, "
          f"1 thread, {'wall' if args.wall else 'thread CPU'} time", flush=True)
    for name in args.workloads.split(","):
        _row(name, args.calls, not args.no_torch)
    print(f"# load {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
