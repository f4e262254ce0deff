"""A compiled graph is never reused when something it depends on changed.

End to end through capture: each case compiles, changes one thing the graph
depends on, and checks the result against eager and the compile count.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import ember.dynamo
from ember.dynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def _reset() -> Any:
    yield
    ember.dynamo.reset()


def compiled(fn: Any) -> tuple[Any, CompileCounter]:
    cnt = CompileCounter()
    return ember.dynamo.compile(fn, backend=cnt), cnt


def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def test_meta_device_recompiles() -> None:
    f, cnt = compiled(double)
    torch.testing.assert_close(f(torch.ones(3)), torch.full((3,), 3.0))
    out = f(torch.ones(3, device="meta"))
    assert out.device.type == "meta" and out.shape == (3,)
    assert cnt.frame_count == 2


def test_non_contiguous_input_recompiles() -> None:
    f, cnt = compiled(double)
    a = torch.randn(3, 4)
    torch.testing.assert_close(f(a), double(a))
    b = torch.randn(4, 3).t()
    torch.testing.assert_close(f(b), double(b))
    assert cnt.frame_count == 2


def test_closure_value_change() -> None:
    k = 2.0

    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * k

    f, cnt = compiled(scaled)
    x = torch.randn(3)
    torch.testing.assert_close(f(x), x * 2.0)
    k = 5.0
    torch.testing.assert_close(f(x), x * 5.0)
    k = 2.0
    torch.testing.assert_close(f(x), x * 2.0)
    assert cnt.frame_count == 2


def test_default_argument_replaced() -> None:
    def shifted(x: torch.Tensor, b: float = 1.0) -> torch.Tensor:
        return x + b

    f, cnt = compiled(shifted)
    x = torch.randn(3)
    torch.testing.assert_close(f(x), x + 1.0)
    shifted.__defaults__ = (4.0,)
    torch.testing.assert_close(f(x), x + 4.0)
    torch.testing.assert_close(f(x, 1.0), x + 1.0)


def test_kwonly_default_mutated_in_place() -> None:
    def shifted(x: torch.Tensor, *, b: float = 1.0) -> torch.Tensor:
        return x + b

    f, _ = compiled(shifted)
    x = torch.randn(3)
    torch.testing.assert_close(f(x), x + 1.0)
    assert shifted.__kwdefaults__ is not None
    shifted.__kwdefaults__["b"] = 7.0
    torch.testing.assert_close(f(x), x + 7.0)


class Scale(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.factor = 2.0
        self.use_bias = True
        self.bias = torch.nn.Parameter(torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.factor
        if self.use_bias:
            y = y + self.bias
        return y


def test_module_attribute_changes() -> None:
    mod = Scale()
    cnt = CompileCounter()
    opt = ember.dynamo.compile(mod, backend=cnt)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), mod(x))
    mod.factor = 3.0
    torch.testing.assert_close(opt(x), mod(x))
    mod.use_bias = False
    torch.testing.assert_close(opt(x), mod(x))
    n = cnt.frame_count
    torch.testing.assert_close(opt(x), mod(x))
    assert cnt.frame_count == n


def test_grad_mode_changes_autograd_behaviour() -> None:
    mod = Scale()
    opt = ember.dynamo.compile(mod, backend=CompileCounter())
    x = torch.randn(3)
    with torch.no_grad():
        assert opt(x).requires_grad is False
    out = opt(x)
    assert out.requires_grad is True
    out.sum().backward()
    assert mod.bias.grad is not None


def test_default_dtype_change() -> None:
    def make(x: torch.Tensor) -> torch.Tensor:
        return x + torch.ones(3)

    f, cnt = compiled(make)
    x = torch.randn(3)
    torch.testing.assert_close(f(x), make(x))
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        torch.testing.assert_close(f(x.double()), make(x.double()))
        assert f(x.double()).dtype == torch.float64
    finally:
        torch.set_default_dtype(old)
    assert cnt.frame_count == 2
