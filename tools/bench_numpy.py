"""NumPy code compiled: ember against torch.compile and NumPy itself, in one run.

The seed FAQ's example (``000``, "Can I compile NumPy code using torch.compile?"):
``np.sum(X[:, :, None] * Y[:, None, :], axis=(-2, -1))``, which NumPy runs on one
thread with a (n, d, d) temporary, and a compiler can fuse into one parallel loop
with no temporary. Times (median per call, after warm-up) for:

- ``numpy``: the function run by NumPy;
- ``ember``: ``ember.dynamo.compile(fn)`` (ember.inductor, arrays in and out);
- ``torch.compile``: the same function under torch.compile (``--no-torch`` skips it).

Each compiled result is checked against NumPy's before timing. Usage::

    nice -n 10 python tools/bench_numpy.py --n 1024 --d 64 --repeat 20 [--threads 1]

On a loaded machine, ``--threads 1`` gives steadier figures (OpenMP threads of a
compiled kernel wait on each other when a core is taken away).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def numpy_fn(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    return np.sum(X[:, :, None] * Y[:, None, :], axis=(-2, -1))


def normalize(X: np.ndarray) -> np.ndarray:
    mean = X.mean(axis=1, keepdims=True)
    std = np.sqrt(((X - mean) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    return np.tanh((X - mean) / std) * 0.5 + 0.5


PROGRAMS: dict[str, tuple[Callable[..., np.ndarray], int]] = {"outer_sum": (numpy_fn, 2), "normalize": (normalize, 1)}


def _time(fn: Callable[[], Any], repeat: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--no-torch", action="store_true", help="skip torch.compile")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    import ember.dynamo

    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.n, args.d))
    Y = rng.standard_normal((args.n, args.d))
    print(f"n={args.n} d={args.d} threads={torch.get_num_threads()}")
    print(f"{'program':<12} {'numpy ms':>10} {'ember ms':>10} {'torch.compile ms':>17} {'numpy/ember':>12} {'numpy/torch':>12}")
    for name, (fn, arity) in PROGRAMS.items():
        inputs = (X, Y)[:arity]
        expected = fn(*inputs)
        compilers: dict[str, Callable[..., Any]] = {"ember": ember.dynamo.compile(fn)}
        if not args.no_torch:
            compilers["torch"] = torch.compile(fn)
        times = {"numpy": _time(lambda f=fn, i=inputs: f(*i), args.repeat)}
        for label, compiled in compilers.items():
            got = compiled(*inputs)
            assert isinstance(got, np.ndarray), (label, type(got))
            np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-8)
            times[label] = _time(lambda c=compiled, i=inputs: c(*i), args.repeat)
        torch_ms = times.get("torch", float("nan")) * 1e3
        print(
            f"{name:<12} {times['numpy'] * 1e3:>10.3f} {times['ember'] * 1e3:>10.3f} {torch_ms:>17.3f} "
            f"{times['numpy'] / times['ember']:>12.2f} {times['numpy'] / times.get('torch', float('nan')):>12.2f}"
        )


if __name__ == "__main__":
    main()
