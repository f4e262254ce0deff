"""Max pooling lowered to generated code (``lowering/pooling.py``): values and indices
equal eager's (NaN wins, ties keep the first element, padding, dilation, ceil mode), and an
inference graph that only reads the values calls no ATen pooling kernel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import ember.dynamo
from ember.inductor import CompiledGraph

Check = Callable[..., CompiledGraph]
#: every test here runs with both code generators (Triton in its interpreter)
BACKENDS = ("cpp", "triton")

aten = torch.ops.aten

CASES = [
    # (input size, kernel, stride, padding, dilation, ceil_mode)
    ((2, 8, 31, 31), 3, 2, 0, 1, True),  # SqueezeNet's pools
    ((2, 8, 10, 9), 2, None, 0, 1, False),  # stride defaults to the kernel
    ((1, 3, 7, 7), 3, 1, 1, 1, False),  # padding
    ((2, 4, 11, 13), 3, 2, 1, 2, True),  # dilation and ceil mode together
    ((3, 9, 9), 3, 3, 1, 1, True),  # no batch dim
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) + f"-k{c[1]}")
def test_max_pool_values_and_indices_match_eager(check: Check, case: tuple) -> None:
    shape, k, s, p, d, ceil = case
    torch.manual_seed(0)
    x = torch.randn(shape)
    x[..., 0, 0] = float("nan")  # a NaN wins its windows
    x[..., 2, :3] = 5.0  # ties keep the first
    x[..., 4, 4] = -float("inf")

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return aten.max_pool2d_with_indices(x, [k, k], [s, s] if s else [], [p, p], [d, d], ceil)

    c = check(f, x)  # compares values (NaN where eager's are) and indices exactly
    assert c.report.fallbacks == {}, c.report.fallbacks


def test_inference_pool_computes_only_the_values(check: Check) -> None:
    x = torch.randn(2, 8, 15, 15)
    c = check(lambda x: torch.nn.functional.max_pool2d(x.relu(), 3, 2, ceil_mode=True) * 2, x)
    assert c.report.fallbacks == {} and c.report.kernels == 1


def test_max_pool_trains_through_ember_dynamo() -> None:
    """The indices the generated kernel computes feed ATen's pooling backward."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, ceil_mode=True),
        torch.nn.Conv2d(8, 4, 1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
    )
    x = torch.randn(2, 3, 17, 17)
    compiled = ember.dynamo.optimize("inductor")(net)
    compiled(x).square().sum().backward()
    got = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    net(x).square().sum().backward()
    for g, e in zip(got, (p.grad for p in net.parameters())):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


def test_a_computed_input_is_stored_once_not_recomputed_per_window_element(check: Check) -> None:
    """ShuffleNet's stem pools a batch norm's ReLU: each output reads 9 inputs, so the norm
    is stored once instead of recomputed (its square root) 9 times per output; a bare
    ReLU stays fused (SqueezeNet's pools)."""
    x = torch.randn(2, 8, 16, 16)
    var, mean = torch.rand(8) + 0.5, torch.randn(8)

    def f(x: torch.Tensor) -> torch.Tensor:
        h = ((x - mean[:, None, None]) / (var[:, None, None] + 1e-5).sqrt()).relu()
        return torch.nn.functional.max_pool2d(h, 3, 2, padding=1)

    c = check(f, x, atol=1e-5, rtol=1e-5)
    assert "\n".join(c.report.kernel_sources.values()).count("sqrt") == 1, c.report.kernel_sources
    c = check(lambda x: torch.nn.functional.max_pool2d(x.relu(), 3, 2, padding=1), x)
    assert c.report.kernels == 1


@pytest.mark.parametrize("ceil", [False, True])
def test_max_pool_at_symbolic_sizes_is_generated_code(ceil: bool, reports: list[Any]) -> None:
    """A model called at a second size compiles with symbolic sizes: the pool is generated
    code there too (it ran ATen's scalar kernel: "max_pool2d with symbolic output sizes"),
    its window offsets masked where they cannot be proved inside; values and indices equal
    eager's at every size."""

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return aten.max_pool2d_with_indices(x.relu(), [3, 3], [2, 2], [1, 1], [1, 1], ceil)

    compiled = ember.dynamo.optimize("inductor", dynamic=True)(f)
    for shape in ((2, 4, 9, 9), (1, 3, 12, 7), (3, 2, 5, 16)):
        x = torch.randn(shape)
        x[..., 1, 1] = float("nan")
        got, want = compiled(x), f(x)
        torch.testing.assert_close(got[0], want[0], equal_nan=True)
        assert torch.equal(got[1], want[1])
    assert reports and all(
        isinstance(c, CompiledGraph) and c.report.fallbacks == {} for c in reports
    ), [getattr(c, "report", c) for c in reports]
    sources = "\n".join(src for c in reports for src in c.report.kernel_sources.values())
    assert "const int64_t s" in sources  # a graph with symbolic sizes ran
