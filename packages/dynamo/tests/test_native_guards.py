"""Compiled modules with native guard checks (ADR 0051) from the first call: every way a
user changes a module between calls (a weight replaced, ``.data =`` with another layout or
the same, a submodule swapped, a buffer, an attribute, train/eval, a hook) gives eager's
result, and the check that ran was the native one."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch

import ember.dynamo

sys.path.insert(0, os.path.dirname(__file__))
from native_harness import native_checks, native_env, needs_compiler

pytestmark = needs_compiler


@pytest.fixture(autouse=True)
def _native(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    native_env(monkeypatch, tmp_path_factory.getbasetemp() / "native-guards-dynamo")


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("shift", torch.ones(3))
        self.scale = 2.0
        self.drop = torch.nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.lin(x) * self.scale + self.shift)



CHANGES: dict[str, Callable[[Net], Any]] = {
    "weight replaced": lambda m: setattr(m.lin, "weight", torch.nn.Parameter(torch.randn(3, 4))),
    "weight .data, same layout": lambda m: setattr(m.lin.weight, "data", torch.randn(3, 4)),
    "weight .data, transposed": lambda m: setattr(m.lin.weight, "data", torch.randn(4, 3).t()),
    "weight .data, float64": lambda m: m.double(),
    "bias removed": lambda m: setattr(m.lin, "bias", None),
    "submodule swapped": lambda m: setattr(m, "lin", torch.nn.Linear(4, 3)),
    "buffer replaced": lambda m: setattr(m, "shift", torch.full((3,), 5.0)),
    "buffer written in place": lambda m: m.shift.add_(1.0),
    "attribute changed": lambda m: setattr(m, "scale", 3.0),
    "dropout on in train mode": lambda m: (setattr(m.drop, "p", 1.0), m.train()),
    "forward hook": lambda m: m.lin.register_forward_hook(lambda mod, args, out: out * 0 + 7),
    "forward pre-hook": lambda m: m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,)),
    "weight requires_grad off": lambda m: m.lin.weight.requires_grad_(False),
}


@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_module_changes_with_native_guards(change: str, backend: str) -> None:
    torch.manual_seed(0)
    m = Net().eval()
    compiled = ember.dynamo.compile(m, backend=backend)
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x), m(x))
        assert native_checks(), "the cached call ran no native check"
        CHANGES[change](m)
        xx = x.double() if change == "weight .data, float64" else x
        for _ in range(3):
            torch.testing.assert_close(compiled(xx), m(xx))


def test_inputs_changing_with_native_guards() -> None:
    def f(x: torch.Tensor, n: int, opts: dict[str, Any]) -> torch.Tensor:
        y = x * n
        if opts["relu"]:
            y = torch.relu(y)
        return y + len(opts)

    compiled = ember.dynamo.compile(f, backend="eager")
    calls = [
        (torch.randn(3), 2, {"relu": True}),
        (torch.randn(3), 2, {"relu": True}),
        (torch.randn(3), 3, {"relu": True}),
        (torch.randn(3), 2, {"relu": False}),
        (torch.randn(3), 2, {"relu": True, "extra": 1}),
        (torch.randn(5), 2, {"relu": True}),
        (torch.randn(3, dtype=torch.float64), 2, {"relu": True}),
        (torch.randn(3).requires_grad_(), 2, {"relu": True}),
        (torch.randn(6)[::2], 2, {"relu": True}),
        (torch.randn(3), 2, {"relu": True}),
    ]
    for x, n, opts in calls:
        torch.testing.assert_close(compiled(x, n, opts), f(x, n, opts))
    assert native_checks()
