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
