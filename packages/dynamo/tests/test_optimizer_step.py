"""``compile(optimizer.step)``: one captured graph per optimizer layout, the
same parameters and state as eager's step, ``lr`` changes without recompiling."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import ember.dynamo
from ember.dynamo.optimizer import CompiledOptimizerStep
from ember.dynamo.testing import CompileCounter, CompileCounterWithBackend

Factory = Callable[..., torch.optim.Optimizer]
OPTIMIZERS: dict[str, Factory] = {
    "sgd": lambda params, foreach: torch.optim.SGD(params, lr=0.05, momentum=0.9, foreach=foreach),
    "adam": lambda params, foreach: torch.optim.Adam(params, lr=0.01, foreach=foreach),
    "adamw": lambda params, foreach: torch.optim.AdamW(params, lr=0.01, weight_decay=0.1, foreach=foreach),
}


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))


def train(m: nn.Module, opt: torch.optim.Optimizer, step: Callable[[], Any], steps: int,
          after: Callable[[], None] | None = None) -> None:
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        opt.zero_grad()
        m(torch.randn(4, 8, generator=gen)).pow(2).sum().backward()
        step()
        if after is not None:
            after()


def assert_same_state(a: torch.optim.Optimizer, b: torch.optim.Optimizer, **tol: float) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    for key, state in sa["state"].items():
        assert state.keys() == sb["state"][key].keys()
        for name, value in state.items():
            if isinstance(value, torch.Tensor):
                torch.testing.assert_close(sb["state"][key][name], value, **tol)
            else:
                assert sb["state"][key][name] == value


def check_ten_steps_match_eager(make: Callable[[Any], torch.optim.Optimizer], compiles: int = 1) -> None:
    eager_model, compiled_model = model(), model()
    eager_opt, opt = make(eager_model.parameters()), make(compiled_model.parameters())
    counter = CompileCounter()
    opt.step = ember.dynamo.compile(opt.step, backend=counter)  # the seed blog's spelling
    train(eager_model, eager_opt, eager_opt.step, 10)
    train(compiled_model, opt, opt.step, 10)
    # the parameter updates are float32 elementwise ops in eager's order; the
    # scalars come from a tensor lr (ADR 0024), so a few ulps may differ
    tol = {"rtol": 1e-5, "atol": 1e-6}
    for a, b in zip(eager_model.parameters(), compiled_model.parameters(), strict=True):
        torch.testing.assert_close(b, a, **tol)
    assert_same_state(eager_opt, opt, **tol)
    # Adam's state is created by its ``_init_group`` before the first step is captured:
    # one graph for all ten steps; SGD's first step creates its momentum buffers in the
    # captured graph (they are its outputs), steps 2-10 run a second graph
    assert counter.frame_count == compiles
    assert isinstance(opt.step, CompiledOptimizerStep)
    assert all(entry is not None for entry in opt.step.entries.values())


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_compiled_step_matches_eager_after_ten_steps(name: str, foreach: bool) -> None:
    check_ten_steps_match_eager(lambda params: OPTIMIZERS[name](params, foreach), 2 if name == "sgd" else 1)


VARIANTS: dict[str, Factory] = {
    "sgd_fused": lambda ps, _: torch.optim.SGD(ps, lr=0.05, momentum=0.9, fused=True),
    "adam_fused": lambda ps, _: torch.optim.Adam(ps, lr=0.01, fused=True),
    "adamw_fused": lambda ps, _: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, fused=True),
    "adam_amsgrad_foreach": lambda ps, _: torch.optim.Adam(ps, lr=0.01, amsgrad=True, foreach=True),
    "adam_amsgrad": lambda ps, _: torch.optim.Adam(ps, lr=0.01, amsgrad=True, foreach=False),
    "adamw_amsgrad_fused": lambda ps, _: torch.optim.AdamW(ps, lr=0.01, amsgrad=True, fused=True),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_fused_and_amsgrad_steps_are_captured(name: str) -> None:
    """``fused=True`` is recorded through the foreach path (same update, same state);
    amsgrad's ``_foreach_maximum_`` as ``maximum`` then ``copy_``."""
    check_ten_steps_match_eager(lambda params: VARIANTS[name](params, None), 2 if name.startswith("sgd") else 1)


def test_per_parameter_adam_is_eager_bit_for_bit() -> None:
    eager_model, compiled_model = model(), model()
    eager_opt = torch.optim.Adam(eager_model.parameters(), lr=0.01, foreach=False)
    opt = torch.optim.Adam(compiled_model.parameters(), lr=0.01, foreach=False)
    step = ember.dynamo.compile(opt.step, backend="eager")
    train(eager_model, eager_opt, eager_opt.step, 10)
    train(compiled_model, opt, step, 10)
    for a, b in zip(eager_model.parameters(), compiled_model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert_same_state(eager_opt, opt, rtol=0, atol=0)


@pytest.mark.parametrize("foreach", [False, True])
def test_lr_scheduler_changes_lr_without_recompiling(foreach: bool) -> None:
    eager_model, compiled_model = model(), model()
    eager_opt = torch.optim.Adam(eager_model.parameters(), lr=0.02, foreach=foreach)
    opt = torch.optim.Adam(compiled_model.parameters(), lr=0.02, foreach=foreach)
    counter = CompileCounter()
    opt.step = ember.dynamo.compile(opt.step, backend=counter)
    eager_sched = torch.optim.lr_scheduler.LambdaLR(eager_opt, lambda i: 0.8**i)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 0.8**i)
    train(eager_model, eager_opt, eager_opt.step, 8, eager_sched.step)
    train(compiled_model, opt, opt.step, 8, sched.step)
    assert opt.param_groups[0]["lr"] == eager_opt.param_groups[0]["lr"] == pytest.approx(0.02 * 0.8**8)
    for a, b in zip(eager_model.parameters(), compiled_model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert counter.frame_count == 1


def test_a_new_layout_recompiles_once() -> None:
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    counter = CompileCounter()
    step = ember.dynamo.compile(opt.step, backend=counter)
    train(m, opt, step, 3)
    assert counter.frame_count == 2  # the first step (it creates the momentum buffers), the rest
    m[2].bias.requires_grad_(False)  # its gradient is gone from now on
    m[2].bias.grad = None
    reference = copy.deepcopy((m, opt.state_dict()))
    train(m, opt, step, 3)
    assert counter.frame_count == 3
    ref_model, ref_state = reference
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.1, momentum=0.9)
    ref_opt.load_state_dict(ref_state)
    train(ref_model, ref_opt, ref_opt.step, 3)
    for a, b in zip(ref_model.parameters(), m.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_step_hooks_and_closures_run_as_in_eager() -> None:
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    seen: list[str] = []
    opt.register_step_pre_hook(lambda o, args, kwargs: seen.append("pre"))
    opt.register_step_post_hook(lambda o, args, kwargs: seen.append("post"))
    counter = CompileCounter()
    step = ember.dynamo.compile(opt.step, backend=counter)
    train(m, opt, step, 2)
    assert seen == ["pre", "post"] * 2
    assert counter.frame_count == 1

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = m(torch.ones(1, 8)).sum()
        loss.backward()
        return loss

    loss = step(closure)  # a closure runs the step eagerly, and its loss comes back
    assert isinstance(loss, torch.Tensor) and counter.frame_count == 1


def test_layouts_are_guarded_by_ember_guards() -> None:
    """A compiled layout is found by ember.guards' check function; a change it names
    (a hyperparameter, a gradient gone) recompiles once and is explained in words."""
    m = model()
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    counter = CompileCounter()
    opt.step = ember.dynamo.compile(opt.step, backend=counter)
    train(m, opt, opt.step, 3)
    assert counter.frame_count == 1 and opt.step.explain() == [""]
    opt.param_groups[0]["betas"] = (0.8, 0.99)
    assert "betas" in opt.step.explain()[0]
    train(m, opt, opt.step, 2)
    assert counter.frame_count == 2
    m[2].bias.requires_grad_(False)
    m[2].bias.grad = None
    explained = opt.step.explain()
    assert "['betas']" in explained[0] and "['params'][3]" in explained[1], explained
    train(m, opt, opt.step, 2)
    assert counter.frame_count == 3


class HeavyBall(torch.optim.Optimizer):
    """An optimizer whose step creates its state inline (no ``_init_group``), with a
    non-tensor entry: the first step's graph returns the new state."""

    def __init__(self, params: Any, lr: float = 0.1) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["kind"] = "heavy-ball"
                    state["velocity"] = torch.zeros_like(p)
                    state["seen"] = p.grad.abs()
                state["velocity"].mul_(0.5).add_(p.grad)
                torch.maximum(state["seen"], p.grad.abs(), out=state["seen"])
                p.sub_(state["velocity"] / (state["seen"] + 1), alpha=group["lr"])


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_first_step_creating_state_inline_compiles_and_installs_it(backend: str) -> None:
    eager_model, compiled_model = model(), model()
    eager_opt, opt = HeavyBall(eager_model.parameters()), HeavyBall(compiled_model.parameters())
    counter = CompileCounterWithBackend(backend)
    opt.step = ember.dynamo.compile(opt.step, backend=counter)
    train(eager_model, eager_opt, eager_opt.step, 1)
    train(compiled_model, opt, opt.step, 1)
    assert counter.frame_count == 1  # the first step itself was captured
    assert_same_state(eager_opt, opt, rtol=0, atol=0)
    assert list(opt.state[next(compiled_model.parameters())]) == ["kind", "velocity", "seen"]
    train(eager_model, eager_opt, eager_opt.step, 4)
    train(compiled_model, opt, opt.step, 4)
    assert counter.frame_count == 2
    # ``sub_(..., alpha=lr)`` with a tensor lr is a product then a subtraction (ADR 0024)
    for a, b in zip(eager_model.parameters(), compiled_model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert_same_state(eager_opt, opt, rtol=1e-5, atol=1e-6)
