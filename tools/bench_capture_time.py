"""Time to capture (first call) of a TransformerEncoderLayer forward.

    .venv/bin/python tools/bench_capture_time.py [--repeat R]

ember.dynamo.compile vs torch.compile, both with backend "eager", each
measured in a fresh process (so neither profits from the other's imports
or caches; the process imports torch, ember and torch._dynamo and runs the
layer once eagerly before the clock starts). Reports the first-call time (capture + backend + run), the
second-call time, and how many graphs the backend received, so a capture
that gave up (0 graphs) is visible rather than looking fast.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
import torch
import torch._dynamo  # imported up front for both: fake tensors pull it in anyway
import ember.dynamo
torch.set_num_threads(1)  # a shared 2-core machine: no intra-op thread contention
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0, batch_first=True).eval()
x = torch.randn(2, 10, 64)
with torch.no_grad():
    layer(x)  # one eager run first: one-time kernel set-up is not capture time
graphs = []
def backend(gm, example_inputs):
    graphs.append(len(gm.graph.nodes))
    return gm.forward
which = sys.argv[1]
compiled = ember.dynamo.compile(layer, backend=backend) if which == "ember" else torch.compile(layer, backend=backend)
with torch.no_grad():
    t0 = time.perf_counter(); out = compiled(x); t1 = time.perf_counter()
    compiled(x); t2 = time.perf_counter()
    torch.testing.assert_close(out, layer(x))
print(json.dumps({"first": t1 - t0, "second": t2 - t1, "graphs": len(graphs), "nodes": sum(graphs)}))
"""


def run(which: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", CHILD, which], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for which in ("ember", "torch.compile"):
        results = [run(which) for _ in range(args.repeat)]
        first = statistics.median(r["first"] for r in results)
        second = statistics.median(r["second"] for r in results)
        r = results[0]
        print(
            f"{which:<14} first call {first * 1e3:9.1f} ms   second call {second * 1e3:7.2f} ms   "
            f"graphs {int(r['graphs'])} ({int(r['nodes'])} nodes)"
        )


if __name__ == "__main__":
    main()
