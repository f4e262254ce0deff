"""Compiled training steps with ember.inductor: model and optimizer compiled
against eager, state dicts compared after ten steps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ember.dynamo
from ember.dynamo.optimizer import CompiledOptimizerStep


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 4))


@pytest.mark.parametrize("foreach", [False, True])
def test_inductor_adam_state_dict_after_ten_steps_equals_eager(foreach: bool) -> None:
    eager_model, model = mlp(), mlp()
    eager_opt = torch.optim.Adam(eager_model.parameters(), lr=1e-2, foreach=foreach)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=foreach)
    compiled_model = ember.dynamo.compile(model, backend="inductor")
    opt.step = ember.dynamo.compile(opt.step, backend="inductor")
    gen = torch.Generator().manual_seed(3)
    for _ in range(10):
        x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
        for m, o in ((eager_model, eager_opt), (compiled_model, opt)):
            o.zero_grad()
            loss = nn.functional.mse_loss(m(x), y)
            loss.backward()
            o.step()
    assert isinstance(opt.step, CompiledOptimizerStep)
    assert opt.step.compiles == 1 and all(e is not None for e in opt.step.entries.values())
    want, got = eager_opt.state_dict(), opt.state_dict()
    assert want["param_groups"] == got["param_groups"]
    for key, state in want["state"].items():
        for name, value in state.items():
            torch.testing.assert_close(got["state"][key][name], value, rtol=1e-4, atol=1e-6)
    for a, b in zip(eager_model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw", "adam_fused", "adamw_amsgrad"])
@pytest.mark.parametrize("foreach", [False, True])
def test_inductor_step_is_a_few_kernels_writing_in_place(
    name: str, foreach: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """The compiled step: one loop per parameter shape plus one for the scalars, no extern
    calls, and parameters and state written in place (no ``copy_`` back after the graph)."""
    import logging
    import re

    make = {
        "sgd": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, foreach=foreach),
        "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=foreach),
        "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=foreach),
        # fused has no foreach flag: both parametrizations are the fused kernel
        "adam_fused": lambda ps: torch.optim.Adam(ps, lr=1e-2, fused=True),
        "adamw_amsgrad": lambda ps: torch.optim.AdamW(ps, lr=1e-2, amsgrad=True, foreach=foreach),
    }[name]
    # three weights of one shape, three biases of another
    model = nn.Sequential(nn.Linear(24, 24), nn.Linear(24, 24), nn.Linear(24, 24))
    eager_model = nn.Sequential(nn.Linear(24, 24), nn.Linear(24, 24), nn.Linear(24, 24))
    eager_model.load_state_dict(model.state_dict())
    opt, eager_opt = make(list(model.parameters())), make(list(eager_model.parameters()))
    opt.step = ember.dynamo.compile(opt.step, backend="inductor")
    gen = torch.Generator().manual_seed(1)
    for step in range(4):
        for p, q in zip(model.parameters(), eager_model.parameters(), strict=True):
            p.grad = torch.randn(p.shape, generator=gen)
            q.grad = p.grad.clone()
        eager_opt.step()
        if step <= 1:
            # Adam's first step compiles the graph every step runs (its state is created
            # by ``_init_group`` first); SGD's first step creates its momentum buffers in
            # a graph of its own and the second compiles the one every later step runs
            with caplog.at_level(logging.INFO, logger="ember.output_code"):
                opt.step()
        elif step == 3:
            with torch.profiler.profile() as prof:
                opt.step()
        else:
            opt.step()
    # the wrapper of the last graph compiled: the one steps 2 and 3 run
    outputs = [r.getMessage() for r in caplog.records if "kernels:" in r.getMessage()]
    assert outputs, [r.getMessage() for r in caplog.records]
    wrapper = outputs[-1].split("kernels:")[0]
    calls = re.findall(r"^ +kernel\d+\(", wrapper, flags=re.M)  # in the try of an update
    assert len(calls) == 3, wrapper  # the scalars (Adam's steps), the weights, the biases
    assert "  # aten" not in wrapper and "empty_strided((24" not in wrapper, wrapper
    # Adam's per-parameter bias corrections share one scratch block, not a tensor each,
    # and each tensor's address is read once per step
    assert "empty_strided(()" not in wrapper, wrapper
    reads = re.findall(r"(\w+)\.data_ptr\(\)", wrapper)
    assert len(reads) == len(set(reads)), wrapper
    assert not [e.name for e in prof.events() if e.name == "aten::copy_"]
    for a, b in zip(eager_model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_backward_after_a_compiled_step_changed_a_saved_weight_raises_as_eager(name: str) -> None:
    """The compiled step writes parameters through raw pointers; it bumps their version
    counters as eager's in-place ops do, so a backward through a graph that saved a
    weight before the step raises, as eager's does, instead of using the new weight."""
    errors = []
    for compiled in (False, True):
        torch.manual_seed(0)
        layer = nn.Linear(6, 6)
        opt: torch.optim.Optimizer = (
            torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9) if name == "sgd"
            else torch.optim.Adam(layer.parameters(), lr=0.1)
        )
        if compiled:
            opt.step = ember.dynamo.compile(opt.step, backend="inductor")
        for _ in range(3):  # SGD: the second step compiles the graph later steps run
            opt.zero_grad()
            layer(torch.randn(2, 6)).sum().backward()
            opt.step()
        x = torch.randn(2, 6, requires_grad=True)
        loss = layer(x).sum()  # saves the weight for x's gradient
        opt.step()
        with pytest.raises(RuntimeError, match="modified by an inplace operation") as info:
            loss.backward()
        errors.append(str(info.value).split(";")[0])
    assert isinstance(opt.step, CompiledOptimizerStep) and opt.step.compiles >= 1
    assert errors[0] == errors[1]
