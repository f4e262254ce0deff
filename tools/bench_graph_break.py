"""Cached-call overhead with one graph break in the middle of a forward.

    .venv/bin/python tools/bench_graph_break.py [--number N] [--repeat R]

A model of two small transformer blocks with a ``print`` between them (so
the forward is split into two graphs and a resume function): plain eager,
``ember.dynamo.compile`` and ``torch.compile``, both with backend
``eager``, interleaved in one run (min over repeats, microseconds per call,
stdout of the print discarded). Reports each one's time and overhead over
eager, and ember's time minus torch.compile's.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import timeit

import torch
from torch import nn

import ember.dynamo


class TwoBlocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True)
        self.b = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x)
        print("between blocks")
        return self.b(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--number", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = TwoBlocks().eval()
    x = torch.randn(2, 8, 32)
    graphs: list[torch.fx.GraphModule] = []

    def eager_counting(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        graphs.append(gm)  # what backend "eager" does, plus counting
        return gm.forward

    candidates = {
        "eager": model,
        # torch.compile traces through torch.nn layers' forward; so does this
        "ember.dynamo": ember.dynamo.compile(
            model, backend=eager_counting, options={"inline_inbuilt_nn_modules": True}
        ),
        "torch.compile": torch.compile(model, backend="eager"),
    }
    sink = io.StringIO()
    # grad mode on: under no_grad eager would take TransformerEncoderLayer's
    # fused fast path, which compiled code does not, and the comparison
    # would be between different programs
    with contextlib.redirect_stdout(sink):
        want = model(x)
        for fn in candidates.values():
            for _ in range(3):
                torch.testing.assert_close(fn(x), want)
        best = dict.fromkeys(candidates, float("inf"))
        for _ in range(args.repeat):
            for name, fn in candidates.items():
                sink.seek(0)
                sink.truncate()
                t = timeit.timeit(lambda fn=fn: fn(x), number=args.number) / args.number
                best[name] = min(best[name], t * 1e6)
    print(f"ember captured {len(graphs)} graphs (want 2: before and after the print)")
    for name, us in best.items():
        print(f"{name:<14} {us:9.2f} us/call   added overhead {us - best['eager']:8.2f} us")
    # Both compiled versions flatten the layers into graphs and can beat
    # eager, so "added overhead" may be negative; compare them directly.
    diff = best["ember.dynamo"] - best["torch.compile"]
    print(f"ember - torch.compile = {diff:+.2f} us/call")


if __name__ == "__main__":
    main()
