"""Reductions and their fusion with producers and epilogues."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from ember.inductor import CompiledGraph, InductorOptions

Check = Callable[..., CompiledGraph]
#: every test here runs with both code generators (Triton in its interpreter)
BACKENDS = ("cpp", "triton")


def test_reductions_match_eager(check: Check) -> None:
    x = torch.randn(32, 48, 5)
    i = torch.randint(-3, 4, (32, 48))

    def f(x, i):
        return (
            x.sum(),
            x.sum((0, 2)),
            x.mean(1, keepdim=True),
            x.amax(-1),
            x.amin(0),
            x.argmax(1),
            x.argmin(),
            x.max(2),
            (x > 0).any(1),
            (x > -3).all(),
            x.var(1),
            x.std(2, correction=0),
            torch.var_mean(x, 0),
            i.sum(1),
            i.prod(0),
            x.prod(-1),
        )

    check(f, x, i, atol=1e-4, rtol=1e-4)


def test_softmax_is_one_kernel(check: Check, options: InductorOptions) -> None:
    x = torch.randn(64, 256)
    c = check(lambda x: torch.softmax(x, -1), x, options=options)
    assert c.report.kernels == 1
    src = next(iter(c.report.kernel_sources.values()))
    assert src.count("for (int64_t r0") <= 3  # max pass, sum pass, normalize pass per row


@pytest.mark.backends("cpp")  # (Triton keeps no kernel-local arrays: private_bytes = 0)
def test_softmax_computes_exp_once(check: Check) -> None:
    # exp(x - max) feeds both the sum and the division: it is kept in a per-row local
    # array instead of being recomputed (what made the fused kernel lose to ATen before)
    x = torch.randn(64, 256)
    c = check(lambda x: torch.softmax(x * 2, -1) + 1, x)
    assert c.report.fallbacks == {} and c.report.kernels == 1
    src = next(iter(c.report.kernel_sources.values()))
    assert src.count("ember_expf(") == 1 and "local_buf" in src
    assert "empty_strided" in c.report.wrapper_source
    assert c.report.wrapper_source.count("empty_strided") == 1  # only the output


def test_softmax_with_nan_and_inf_rows(check: Check) -> None:
    x = torch.randn(6, 33)
    x[1, 4] = float("nan")
    x[2, :] = float("-inf")
    x[3, 7] = float("inf")
    check(lambda x: (torch.softmax(x, -1), torch.log_softmax(x, -1)), x)


def test_layernorm_gelu_one_kernel_per_row(check: Check) -> None:
    x, w, b = torch.randn(64, 256), torch.randn(256), torch.randn(256)
    c = check(
        lambda x, w, b: torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (256,), w, b)),
        x,
        w,
        b,
        atol=1e-4,
        rtol=1e-4,
    )
    assert c.report.kernels == 1
    assert c.report.extern_calls == 0


def test_log_softmax_and_logsumexp(check: Check) -> None:
    x = torch.randn(16, 40)
    check(lambda x: (torch.log_softmax(x, 1), torch.logsumexp(x, 0)), x, atol=1e-5, rtol=1e-5)


def test_full_reduction_then_broadcast(check: Check) -> None:
    x = torch.randn(100_000)
    c = check(lambda x: x / x.sum(), x, atol=1e-6, rtol=1e-4)
    assert c.report.kernels == 1


@pytest.mark.parametrize("shape", [(0, 4), (3, 0)])
def test_empty_reductions(check: Check, shape: tuple[int, int]) -> None:
    x = torch.randn(shape)
    check(lambda x: (x.sum(1), x.sum(0)), x)
