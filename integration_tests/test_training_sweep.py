"""Every model of the benchmark suite and the integration zoo trains 3 steps under
``backend="inductor"`` with eager's losses and gradients (issue 14).

One eager copy and one compiled copy of each model take the same 3 SGD steps
(``train()`` mode: BatchNorm updates its statistics, dropout draws from the same
seed on both sides). Each step's loss and every parameter gradient must match
eager's; nothing may raise. The loss is the mean square of the model's floating
outputs (the benchmark's training step), or the model's own loss where it
computes one. Slow: every model is compiled for training
(``EMBER_SLOW=1 bash tools/test.sh integration_tests/test_training_sweep.py``).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import ember.dynamo

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from bench.registry import WORKLOADS, load_builtins
from bench.workloads import flatten_tensors
from bench.workloads_zoo import load_zoo, zoo_names

pytestmark = pytest.mark.slow

STEPS = 3
RTOL, ATOL = 1e-3, 1e-4

#: models whose inductor training does not match eager yet, and why (strict xfails)
GAPS: dict[str, str] = {}

load_builtins()
#: the benchmark's models (its zoo rows are the integration zoo's models, below)
BENCH = sorted(name for name, w in WORKLOADS.items() if not name.startswith("zoo_"))


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    ember.dynamo.reset()
    yield
    ember.dynamo.reset()


def _mean_square(out: Any) -> torch.Tensor:
    outs = [o for o in flatten_tensors(out) if o.is_floating_point()]
    loss = sum(o.float().square().mean() for o in outs)
    assert isinstance(loss, torch.Tensor), "the model returned no floating tensor"
    return loss


def _train_like_eager(model: nn.Module, call: Callable[[Callable[..., Any]], Any],
                      loss_of: Callable[[Any], torch.Tensor]) -> None:
    eager, ours = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    compiled = ember.dynamo.compile(ours, backend="inductor")
    opt_e = torch.optim.SGD(eager.parameters(), lr=1e-2)
    opt_c = torch.optim.SGD(ours.parameters(), lr=1e-2)
    for step in range(STEPS):
        torch.manual_seed(step)
        loss_e = loss_of(call(eager))
        torch.manual_seed(step)
        loss_c = loss_of(call(compiled))
        loss_e.backward()
        loss_c.backward()
        torch.testing.assert_close(loss_c, loss_e, rtol=RTOL, atol=ATOL,
                                   msg=lambda m, k=step: f"step {k} loss: {m}")
        for (name, pe), pc in zip(eager.named_parameters(), ours.parameters(), strict=True):
            assert (pe.grad is None) == (pc.grad is None), f"step {step}: {name}.grad"
            if pe.grad is not None:
                torch.testing.assert_close(pc.grad, pe.grad, rtol=RTOL, atol=ATOL,
                                           msg=lambda m, k=step, n=name: f"step {k} {n}.grad: {m}")
        for (name, be), bc in zip(eager.named_buffers(), ours.buffers(), strict=True):
            torch.testing.assert_close(bc, be, rtol=RTOL, atol=ATOL,
                                       msg=lambda m, k=step, n=name: f"step {k} buffer {n}: {m}")
        opt_e.step()
        opt_c.step()
        opt_e.zero_grad()
        opt_c.zero_grad()


@pytest.mark.parametrize("name", BENCH)
def test_benchmark_model_trains_like_eager(name: str) -> None:
    workload = WORKLOADS[name]
    for module in workload.requires:
        pytest.importorskip(module)
    case = workload.build("cpu")
    if not isinstance(case.model, nn.Module):
        pytest.skip("a function, not a model: no parameters to train")
    args = case.inputs[0]
    _train_like_eager(case.model, lambda fn: fn(*args), _mean_square)


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=[pytest.mark.xfail(strict=True, reason=GAPS[n])] if n in GAPS else [])
    for n in zoo_names()
])
def test_zoo_model_trains_like_eager(name: str) -> None:
    pytest.importorskip("transformers")
    case = load_zoo().build(name)

    def loss_of(out: Any) -> torch.Tensor:
        if case.mode == "train":
            return case.outputs(out)[0]
        return _mean_square(case.outputs(out))

    _train_like_eager(case.model, lambda fn: fn(*case.args, **case.kwargs), loss_of)
