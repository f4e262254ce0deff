"""Horizontal fusion (``horizontal.py``): independent pointwise kernels over the same loops."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ember.inductor import CompiledGraph, InductorOptions

Check = Callable[..., CompiledGraph]
BACKENDS = ("cpp", "triton")


def _updates(*ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # one update per tensor, sharing no input: vertical and sibling fusion leave 4 kernels
    return tuple(t * 0.9 + (k + 1) for k, t in enumerate(ts))


def test_independent_updates_of_same_shape_are_one_kernel(check: Check) -> None:
    ts = [torch.randn(48, 20) for _ in range(4)]
    c = check(_updates, *ts)
    assert c.report.kernels == 1


def test_different_loops_stay_apart(check: Check) -> None:
    ts = [torch.randn(48, 20), torch.randn(48, 20), torch.randn(20, 48), torch.randn(7)]
    c = check(_updates, *ts)
    assert c.report.kernels == 3


def test_off_switch(check: Check, options: InductorOptions) -> None:
    import dataclasses

    ts = [torch.randn(48, 20) for _ in range(4)]
    c = check(_updates, *ts, options=dataclasses.replace(options, horizontal_fusion=False))
    assert c.report.kernels == 4


def test_kernels_on_both_sides_of_an_extern_call_are_not_merged(check: Check) -> None:
    # a and d iterate the same loops, but d needs the matmul, which needs a
    def f(x: torch.Tensor, w: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = x.sin() * 2
        d = (a @ w).cos() + z.exp()
        return a, d, z * 3

    x, w, z = torch.randn(16, 16), torch.randn(16, 16), torch.randn(16, 16)
    c = check(f, x, w, z, atol=1e-4, rtol=1e-4)
    # a's kernel, the matmul, d's kernel (z * 3 joins one of them): a and d are never merged
    assert c.report.kernels == 2 and c.report.extern_calls == 1
