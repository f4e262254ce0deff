"""Per-call overhead of a cached call: ember.dynamo vs torch.compile vs eager.

    .venv/bin/python tools/bench_cached_call.py [--number N] [--repeat R]

Times ``f(x, y) = x + y`` on 4-element CPU tensors with backend ``eager``:
plain eager, ``ember.dynamo.compile`` and ``torch.compile``, interleaved in
one run (min over repeats, microseconds per call). The *added overhead* is
the compiled time minus the eager time; the headline is ember's added
overhead divided by torch.compile's (target <= 1.0).
"""

from __future__ import annotations

import argparse
import timeit

import torch

import ember.dynamo


def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)  # one thread: intra-op threads only add noise at this size
    x, y = torch.randn(4), torch.randn(4)
    candidates = {
        "eager": f,
        "ember.dynamo": ember.dynamo.compile(f, backend="eager"),
        "torch.compile": torch.compile(f, backend="eager"),
    }
    for fn in candidates.values():  # warm up: capture once, then cached
        for _ in range(3):
            torch.testing.assert_close(fn(x, y), x + y)
    best = dict.fromkeys(candidates, float("inf"))
    for _ in range(args.repeat):  # interleave, so load changes hit every candidate alike
        for name, fn in candidates.items():
            t = timeit.timeit(lambda fn=fn: fn(x, y), number=args.number) / args.number
            best[name] = min(best[name], t * 1e6)
    for name, us in best.items():
        extra = us - best["eager"]
        print(f"{name:<14} {us:8.3f} us/call   added overhead {extra:8.3f} us")
    ratio = (best["ember.dynamo"] - best["eager"]) / (best["torch.compile"] - best["eager"])
    print(f"ember added overhead / torch.compile added overhead = {ratio:.2f} (target <= 1.0)")


if __name__ == "__main__":
    main()
