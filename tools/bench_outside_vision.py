"""torchvision / timm models no suite builds: eager, ember and torch.compile in one process.

    .venv-vision/bin/python tools/bench_outside_vision.py tv:mnasnet0_5 timm:lcnet_050 [--dynamic]

Each name is ``tv:<torchvision.models constructor>``, ``timm:<timm model name>`` (random
weights, eval mode, 64x64 inputs, batch 2) or ``kornia:<kornia.feature descriptor>``
(``HardNet``, ``SOSNet``, ``TFeat``: random weights, 16 patches of 32x32) or
``kornia:filters`` (colour conversion, Gaussian blur, Sobel edges, brightness on a 64x64
batch); ``pip install kornia``, a library no suite uses. ``--dynamic`` also calls each at batch 3 and 4,
so ember and torch.compile compile symbolic-size graphs (automatic dynamic). Outputs are
checked against eager at every size; times are the best of 7 rounds of CPU time of the
calling thread, one torch thread, interleaved. Needs the vision environment
(``tools/setup_vision.sh``).
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from collections.abc import Callable
from typing import Any

import torch

import ember.dynamo


class _KorniaFilters(torch.nn.Module):
    """An image program of kornia's functions: colour conversion, blur, edges, brightness."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        import kornia

        hsv = kornia.color.rgb_to_hsv(x)
        blurred = kornia.filters.gaussian_blur2d(x, (5, 5), (1.5, 1.5))
        edges = kornia.filters.sobel(kornia.color.rgb_to_grayscale(blurred))
        return hsv.mean((2, 3)), kornia.enhance.adjust_brightness(blurred, 0.1), edges


def build(name: str) -> tuple[torch.nn.Module, Callable[[int], torch.Tensor]]:
    """The model and its input at a batch size."""
    lib, _, model_name = name.partition(":")
    image: Callable[[int], torch.Tensor] = lambda b: torch.randn(b, 3, 64, 64)  # noqa: E731
    if lib == "tv":
        import torchvision

        model: torch.nn.Module = getattr(torchvision.models, model_name)()
    elif lib == "timm":
        import timm

        model = timm.create_model(model_name, pretrained=False)
    elif lib == "kornia" and model_name == "filters":
        model = _KorniaFilters()
        image = lambda b: torch.rand(b, 3, 64, 64)  # noqa: E731
    elif lib == "kornia":  # a patch descriptor of kornia.feature (HardNet, SOSNet, TFeat)
        import kornia

        model = getattr(kornia.feature, model_name)(pretrained=False)
        image = lambda b: torch.rand(8 * b, 1, 32, 32)  # noqa: E731
    else:
        raise SystemExit(f"{name}: expected tv:<name>, timm:<name> or kornia:<name>")
    return model.eval(), image


def measure(name: str, dynamic: bool) -> dict[str, float]:
    model, image = build(name)
    torch.manual_seed(0)
    batches = (2, 3, 4) if dynamic else (2,)
    xs = [image(b) for b in batches]
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
    # steady state (as tools/bench_interleaved.py): the native graph runner built first, and
    # each frame's guards compiled to C on its first call
    for key, value in (("EMBER_NATIVE_RUNNER", "wait"), ("EMBER_NATIVE_GUARDS", "eager"),
                       ("EMBER_NATIVE_GUARDS_AFTER", "0")):
        os.environ.setdefault(key, value)
    for name in args.models:
        best = measure(name, args.dynamic)
        eager = best["eager"]
        print(f"{name:28s} {'dynamic' if args.dynamic else 'static':8s} eager {eager:7.2f} ms"
              f"  ember {eager / best['ember']:.2f}x  torch.compile {eager / best['torch']:.2f}x",
              flush=True)


if __name__ == "__main__":
    main()
