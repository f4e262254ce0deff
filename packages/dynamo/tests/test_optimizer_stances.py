"""Compiled optimizer steps follow the same runtime controls as every other compiled
callable: ``set_stance`` (force_eager, eager_on_recompile, fail_on_recompile),
``ember.dynamo.run()`` and ``ember.dynamo.reset()`` (issue 34). Parameters are compared
with an eager optimizer stepped beside it."""

from __future__ import annotations

import copy

import pytest
import torch

import ember.dynamo
from ember.dynamo.cache import RecompileError
from ember.dynamo.testing import CompileCounter


def _pair() -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    twin = copy.deepcopy(model)
    return (model, torch.optim.Adam(model.parameters(), lr=0.01),
            twin, torch.optim.Adam(twin.parameters(), lr=0.01))


def _grads(*models: torch.nn.Module, skip_first: bool = False) -> None:
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    for m in models:
        m.zero_grad(set_to_none=True)
        m(x).square().sum().backward()
        if skip_first:  # another layout: the first weight has no gradient
            m[0].weight.grad = None


def _same(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    ember.dynamo.reset()
    ember.dynamo.set_stance("default")


def test_force_eager_compiles_no_step() -> None:
    model, opt, twin, ref = _pair()
    counter = CompileCounter()
    step = ember.dynamo.compile(opt.step, backend=counter)
    with ember.dynamo.set_stance("force_eager"):
        for _ in range(3):
            _grads(model, twin)
            step()
            ref.step()
    assert counter.frame_count == 0 and step.compiles == 0
    _same(model, twin)
    _grads(model, twin)
    step()
    ref.step()
    assert step.compiles == 1  # back to default: compiled
    _same(model, twin)


def test_reset_forgets_compiled_steps() -> None:
    model, opt, twin, ref = _pair()
    step = ember.dynamo.compile(opt.step, backend="eager")
    for _ in range(2):
        _grads(model, twin)
        step()
        ref.step()
    assert step.compiles == 1 and step.entries
    ember.dynamo.reset()
    assert not step.entries
    _grads(model, twin)
    step()
    ref.step()
    assert step.compiles == 2  # captured afresh after reset()
    _same(model, twin)


def test_fail_on_recompile_names_the_change() -> None:
    model, opt, twin, ref = _pair()
    step = ember.dynamo.compile(opt.step, backend="eager")
    _grads(model, twin)
    step()
    ref.step()
    _grads(model, twin, skip_first=True)
    with ember.dynamo.set_stance("fail_on_recompile"), pytest.raises(RecompileError, match="optimizer step"):
        step()


def test_eager_on_recompile_and_run_only_step_eagerly() -> None:
    model, opt, twin, ref = _pair()
    step = ember.dynamo.compile(opt.step, backend="eager")
    _grads(model, twin)
    step()
    ref.step()
    with ember.dynamo.set_stance("eager_on_recompile"):
        _grads(model, twin, skip_first=True)
        step()
        ref.step()
    assert step.compiles == 1
    _same(model, twin)
    model2, opt2, twin2, ref2 = _pair()
    step2 = ember.dynamo.compile(opt2.step, backend="eager")
    with ember.dynamo.run():
        _grads(model2, twin2)
        step2()
        ref2.step()
    assert step2.compiles == 0
    _same(model2, twin2)
