"""torchvision / timm models no suite builds: eager, ember and torch.compile in one process.

    .venv-vision/bin/python tools/bench_outside_vision.py tv:mnasnet0_5 timm:lcnet_050 [--dynamic]

Each name is ``tv:<torchvision.models constructor>`` or ``timm:<timm model name>`` (random
weights, eval mode, 64x64 inputs, batch 2). ``--dynamic`` also calls each at batch 3 and 4,
so ember and torch.compile compile symbolic-size graphs (automatic dynamic). Outputs are
checked against eager at every size; times are the best of 7 rounds of CPU time of the
calling thread, one torch thread, interleaved. Needs the vision environment
(``tools/setup_vision.sh``).
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Callable
from typing import Any

import torch

import ember.dynamo


def build(name: str) -> torch.nn.Module:
    lib, _, model_name = name.partition(":")
    if lib == "tv":
        import torchvision

        model: torch.nn.Module = getattr(torchvision.models, model_name)()
    elif lib == "timm":
        import timm

        model = timm.create_model(model_name, pretrained=False)
    else:
        raise SystemExit(f"{name}: expected tv:<name> or timm:<name>")
    return model.eval()


def measure(name: str, dynamic: bool) -> dict[str, float]:
    model = build(name)
    torch.manual_seed(0)
    batches = (2, 3, 4) if dynamic else (2,)
    xs = [torch.randn(b, 3, 64, 64) for b in batches]
    fns: dict[str, Callable[..., Any]] = {
        "eager": model,
        "ember": ember.dynamo.compile(copy.deepcopy(model), backend="inductor"),
        "torch": torch.compile(copy.deepcopy(model)),
    }
    best: dict[str, float] = {}
    with torch.no_grad():
        for x in xs:
            want = model(x)
            for key in ("ember", "torch"):
                torch.testing.assert_close(fns[key](x), want, rtol=1e-3, atol=1e-3)
        for _ in range(7):
            for key, fn in fns.items():
                start = time.thread_time()
                for _ in range(5):
                    for x in xs:
                        fn(x)
                ms = (time.thread_time() - start) / 5 / len(xs) * 1e3
                best[key] = min(best.get(key, float("inf")), ms)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--dynamic", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name in args.models:
        best = measure(name, args.dynamic)
        eager = best["eager"]
        print(f"{name:28s} {'dynamic' if args.dynamic else 'static':8s} eager {eager:7.2f} ms"
              f"  ember {eager / best['ember']:.2f}x  torch.compile {eager / best['torch']:.2f}x",
              flush=True)


if __name__ == "__main__":
    main()
