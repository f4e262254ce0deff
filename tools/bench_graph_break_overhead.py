"""Cached-call overhead with one graph break in the middle of a forward.

    .venv/bin/python tools/bench_graph_break_overhead.py [--number N] [--repeat R]

A model of two residual MLP blocks with a ``print`` (to an in-memory
sink) between them, so capture splits the forward into two graphs with a
resume function. Times plain eager, ``ember.dynamo.compile`` and
``torch.compile`` (backend "eager") on a small input, interleaved in one
run (min over repeats, microseconds per call), and reports each one's
added overhead over eager and ember's / torch.compile's ratio. The graph
count each backend saw is printed so a capture that gave up is visible.
"""

from __future__ import annotations

import argparse
import io
import timeit
from typing import Any

import torch

import ember.dynamo

SINK = io.StringIO()


class Block(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(d, 2 * d)
        self.fc2 = torch.nn.Linear(2 * d, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.fc2(torch.nn.functional.gelu(self.fc1(x))))


class TwoBlocks(torch.nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.first = Block(d)
        self.second = Block(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.first(x)
        print("between blocks", file=SINK)  # the graph break
        return self.second(h)


def counting(seen: list[int]) -> Any:
    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        seen.append(1)
        return gm.forward

    return backend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TwoBlocks().eval()
    x = torch.randn(2, 16)
    ember_graphs: list[int] = []
    torch_graphs: list[int] = []
    candidates = {
        "eager": model,
        "ember.dynamo": ember.dynamo.compile(model, backend=counting(ember_graphs)),
        "torch.compile": torch.compile(model, backend=counting(torch_graphs)),
    }
    with torch.no_grad():
        expected = model(x)
        for fn in candidates.values():
            for _ in range(3):
                torch.testing.assert_close(fn(x), expected)
        best = dict.fromkeys(candidates, float("inf"))
        for _ in range(args.repeat):
            for name, fn in candidates.items():
                SINK.seek(0)
                SINK.truncate()
                t = timeit.timeit(lambda fn=fn: fn(x), number=args.number) / args.number
                best[name] = min(best[name], t * 1e6)
    print(f"graphs compiled: ember {len(ember_graphs)}, torch.compile {len(torch_graphs)}")
    for name, us in best.items():
        print(f"{name:<14} {us:8.2f} us/call   added overhead {us - best['eager']:8.2f} us")
    ratio = (best["ember.dynamo"] - best["eager"]) / (best["torch.compile"] - best["eager"])
    print(f"ember added overhead / torch.compile added overhead = {ratio:.2f}")


if __name__ == "__main__":
    main()
