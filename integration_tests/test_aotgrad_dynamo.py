"""ember.dynamo + ember.aotgrad: training through the aot_eager backend matches eager."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import ember.dynamo
from ember.aotgrad import aot_autograd, nop_compiler


class SmallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc1 = nn.Linear(8 * 4 * 4, 32)
        self.ln = nn.LayerNorm(32)
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        x = self.drop(F.gelu(self.ln(self.fc1(x.flatten(1)))))
        return self.fc2(x)


def _train(model: nn.Module, step_fn: Any, steps: int = 20) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(123)
    data = [(torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))) for _ in range(4)]
    losses = []
    for step in range(steps):
        x, y = data[step % len(data)]
        torch.manual_seed(step)  # same dropout masks in both runs
        loss = F.cross_entropy(step_fn(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def test_aot_eager_trains_20_steps_like_eager(caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    model = SmallNet()
    eager_model = copy.deepcopy(model)
    compiled = ember.dynamo.compile(model, backend="aot_eager")
    with caplog.at_level(logging.INFO, logger="ember.aot_graphs"):
        got = _train(model, compiled)
    want = _train(eager_model, eager_model)
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert "joint graph" in caplog.text  # aotgrad really traced the graph
    torch.testing.assert_close(model.bn.running_mean, eager_model.bn.running_mean)
    torch.testing.assert_close(model.bn.running_var, eager_model.bn.running_var)
    assert int(model.bn.num_batches_tracked) == 20


def test_aot_autograd_backend_compiles_forward_and_backward_once() -> None:
    torch.manual_seed(0)
    calls = {"fw": 0, "bw": 0}

    def fw(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Any:
        calls["fw"] += 1
        return nop_compiler(gm, inputs)

    def bw(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Any:
        calls["bw"] += 1
        return nop_compiler(gm, inputs)

    model = SmallNet()
    eager_model = copy.deepcopy(model)
    compiled = ember.dynamo.compile(model, backend=aot_autograd(fw_compiler=fw, bw_compiler=bw))
    got = _train(model, compiled, steps=5)
    want = _train(eager_model, eager_model, steps=5)
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert calls == {"fw": 1, "bw": 1}
