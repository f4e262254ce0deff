"""Compiled modules whose native guard check serves module reads from a record while the
module is unchanged (ADR 0062): every way of changing a module between calls gives eager's
result, and before the change the record was in use (so the change is what it must see)."""

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

RECORDS = sys.version_info < (3, 13)  # ``EMBER_MODULE_CACHE`` in ember.guards' native_prelude.c


@pytest.fixture(autouse=True)
def _native(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    native_env(monkeypatch, tmp_path_factory.getbasetemp() / "native-guards-dynamo")


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)])
        self.norm = torch.nn.LayerNorm(4)
        self.register_buffer("shift", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.lin(x)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.norm(x) + self.shift


class Scaled(torch.nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 3



def _recorded() -> bool:
    """Some native check serves module reads from its record."""
    for check in native_checks():
        rows = check.native_fn.module_reads()  # type: ignore[union-attr]
        if rows and all(state == 1 for state, _, _ in rows) and any(hits > 0 for _, hits, _ in rows):
            return True
    return False


def _param(*shape: int) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.randn(*shape))


CHANGES: dict[str, Callable[[Net], Any]] = {
    "weight replaced": lambda m: setattr(m.lin, "weight", _param(4, 4)),
    "_parameters written directly": lambda m: m.lin._parameters.__setitem__("weight", _param(4, 4)),
    "register_parameter after delete": lambda m: (delattr(m.lin, "bias"), m.lin.register_parameter("bias", _param(4))),
    "bias removed": lambda m: setattr(m.lin, "bias", None),
    "weight .data, same layout": lambda m: setattr(m.lin.weight, "data", torch.randn(4, 4)),
    "weight .data, transposed": lambda m: setattr(m.lin.weight, "data", torch.randn(4, 4).t()),
    "weight requires_grad_": lambda m: m.lin.weight.requires_grad_(False),
    "model to float64": lambda m: m.double(),
    "weight tied after capture": lambda m: setattr(m.layers[1], "weight", m.layers[0].weight),
    "register_buffer replaces": lambda m: m.register_buffer("shift", torch.full((4,), 5.0)),
    "buffer written in place": lambda m: m.shift.add_(1.0),
    "submodule swapped": lambda m: setattr(m, "lin", torch.nn.Linear(4, 4)),
    "ModuleList item swapped": lambda m: m.layers.__setitem__(1, torch.nn.Linear(4, 4)),
    "ModuleList appended": lambda m: m.layers.append(torch.nn.Linear(4, 4)),
    "instance attribute shadows a parameter": lambda m: object.__setattr__(m.lin, "bias", torch.full((4,), 9.0)),
    "module class changed": lambda m: setattr(m.lin, "__class__", Scaled),
    "instance attribute shadows a norm weight": lambda m: object.__setattr__(m.norm, "weight", torch.zeros(4)),
    "train mode": lambda m: m.train(),
    "forward hook": lambda m: m.lin.register_forward_hook(lambda mod, args, out: out * 0 + 7),
    "forward pre-hook on a list item": lambda m: m.layers[0].register_forward_pre_hook(lambda mod, a: (a[0] * 2,)),
    "unrelated attribute added": lambda m: setattr(m.lin, "note", "x"),
    "load_state_dict": lambda m: m.load_state_dict({k: torch.randn_like(v) for k, v in m.state_dict().items()}),
}


@pytest.mark.parametrize(
    ("change", "backend"),
    [(change, backend) for change in CHANGES for backend in ("eager", "inductor")],
)
def test_module_changes_with_recorded_reads(change: str, backend: str) -> None:
    torch.manual_seed(0)
    m = Net().eval()
    compiled = ember.dynamo.compile(m, backend=backend)
    x = torch.randn(2, 4)
    with torch.no_grad():
        for _ in range(4):
            torch.testing.assert_close(compiled(x), m(x))
        assert native_checks(), "the cached call ran no native check"
        if RECORDS:
            assert _recorded(), "the native check served no module read from its record"
        CHANGES[change](m)
        xx = x.double() if change == "model to float64" else x
        for _ in range(4):
            torch.testing.assert_close(compiled(xx), m(xx))


def test_changes_one_after_another() -> None:
    """Several changes in a row, each after calls that recorded the state before it."""
    torch.manual_seed(1)
    m = Net().eval()
    compiled = ember.dynamo.compile(m, backend="inductor")
    x = torch.randn(3, 4)
    with torch.no_grad():
        for name in ("weight .data, same layout", "unrelated attribute added", "buffer written in place",
                     "weight replaced", "ModuleList item swapped", "forward hook", "submodule swapped"):
            CHANGES[name](m)
            for _ in range(3):
                torch.testing.assert_close(compiled(x), m(x), msg=name)
