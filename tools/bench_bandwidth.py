"""Memory bandwidth of ember.inductor's pointwise kernels against a plain copy.

Issue 20's target: pointwise kernels at >= 80% of the copy bandwidth measured on
the same GPU. This times, on one device and in one run:

- ``copy``: ``dst.copy_(src)`` (ATen's copy kernel), the reference;
- ``ember``: ``x * 2 + 1`` and ``relu(x) * y`` compiled by ember.inductor;
- ``torch``: the same functions under torch.compile's inductor (``--torch``).

Bandwidth counts bytes read plus bytes written. Usage::

    python tools/bench_bandwidth.py --device cuda --torch     # on a GPU machine
    python tools/bench_bandwidth.py --device cpu --numel 16000000   # here
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable
from typing import Any

import torch


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _time(fn: Callable[[], Any], device: str, repeat: int) -> float:
    """Median seconds per call over ``repeat`` calls, after 3 warm-up calls."""
    for _ in range(3):
        fn()
    _sync(device)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def scale_shift(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def relu_mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) * y


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--numel", type=int, default=1 << 28, help="elements per tensor (float32)")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--torch", action="store_true", help="also time torch.compile's inductor")
    args = p.parse_args(argv)

    import ember.dynamo

    dev, n = args.device, args.numel
    x, y = (torch.randn(n, device=dev) for _ in range(2))
    dst = torch.empty_like(x)
    nbytes = x.element_size() * n
    copy_s = _time(lambda: dst.copy_(x), dev, args.repeat)
    copy_bw = 2 * nbytes / copy_s
    print(f"device {dev}, {n} float32 elements per tensor")
    print(f"copy: {copy_bw / 1e9:8.1f} GB/s (read + write)")
    cases: list[tuple[str, Callable[..., torch.Tensor], tuple[torch.Tensor, ...], int]] = [
        ("x * 2 + 1", scale_shift, (x,), 2),
        ("relu(x) * y", relu_mul, (x, y), 3),
    ]
    compilers: list[tuple[str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = [
        ("ember-inductor", lambda f: ember.dynamo.compile(f, backend="inductor")),
    ]
    if args.torch:
        compilers.append(("torch-inductor", lambda f: torch.compile(f)))
    print("| function | compiler | GB/s | fraction of copy | matches eager |")
    print("|---|---|---|---|---|")
    for label, fn, inputs, tensors_moved in cases:
        expected = fn(*inputs)
        for name, make in compilers:
            compiled = make(fn)
            got = compiled(*inputs)
            ok = torch.allclose(got, expected)
            secs = _time(functools.partial(compiled, *inputs), dev, args.repeat)
            bw = tensors_moved * nbytes / secs
            print(f"| {label} | {name} | {bw / 1e9:.1f} | {bw / copy_bw:.2f} | {ok} |")


if __name__ == "__main__":
    main()
