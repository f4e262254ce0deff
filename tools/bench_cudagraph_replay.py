"""ember's own per-call cost of a ``mode="reduce-overhead"`` replay, measurable without a GPU.

    python tools/bench_cudagraph_replay.py

Runs :class:`ember.inductor.cudagraphs.CudaGraphCall` on CPU tensors with a recording whose
replay does nothing, so the figure is only the runner's bookkeeping per call (which
recording fits, whether the caller let go of the last outputs, copies in and out, fresh
output tensors): the part of a replay that is ember's Python, on top of what
``CUDAGraph.replay`` costs on a GPU. Shapes as the suite's ``tiny_add``: two inputs read in
place, one output.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ember.inductor.cudagraphs import CudaGraphCall


class _NoopReplay(CudaGraphCall):
    def _capture(
        self, run: Callable[[], list[Any]], inputs: Sequence[Any]
    ) -> tuple[Callable[[], Any], list[Any]]:
        return (lambda: None), run()


def main() -> None:
    x, y = torch.randn(4), torch.randn(4)
    runner = _NoopReplay(lambda a: [a[0] + a[1]], torch.device("cpu"), set(), "tiny_add")
    for _ in range(3):
        runner([x, y])
    assert runner.replays >= 1, "the stand-in recording was not replayed"
    n = 100_000
    best = min(timeit.repeat(lambda: runner([x, y]), number=n, repeat=5)) / n
    print(f"CudaGraphCall bookkeeping per replay: {best * 1e6:.2f} us "
          "(2 inputs read in place, 1 output, replay itself excluded)")


if __name__ == "__main__":
    main()
