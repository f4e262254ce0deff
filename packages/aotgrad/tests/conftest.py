"""Shared helpers: run a model eagerly and through aotgrad, compare everything."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch

from ember.aotgrad import (
    aot_module,
    default_partition,
    min_cut_rematerialization_partition,
    nop_compiler,
)

PARTITIONERS = {
    "default": default_partition,
    "min_cut": min_cut_rematerialization_partition,
}


def _grads(mod: torch.nn.Module, inputs: list[torch.Tensor]) -> list[torch.Tensor | None]:
    return [p.grad for p in mod.parameters()] + [t.grad for t in inputs]


def compare_training(
    model: torch.nn.Module,
    make_inputs: Callable[[], list[torch.Tensor]],
    partition_fn: Any,
    *,
    seed: int = 0,
    steps: int = 2,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> Any:
    """Train a copy eagerly and a copy through aot_module; assert equal results.

    Compares outputs, parameter and input gradients, and buffers (BatchNorm
    running statistics) after each step. Returns the AotModule.
    """
    eager = copy.deepcopy(model)
    compiled_model = copy.deepcopy(model)
    compiled = aot_module(compiled_model, nop_compiler, partition_fn=partition_fn)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(compiled_model.parameters(), lr=0.1)
    for step in range(steps):
        torch.manual_seed(seed + 1000 + step)
        base = make_inputs()
        in_e = [t.detach().clone().requires_grad_(t.requires_grad) for t in base]
        in_c = [t.detach().clone().requires_grad_(t.requires_grad) for t in base]
        torch.manual_seed(seed + step)
        out_e = eager(*in_e)
        torch.manual_seed(seed + step)
        out_c = compiled(*in_c)
        torch.testing.assert_close(out_c, out_e, atol=atol, rtol=rtol)
        loss_e = out_e.float().pow(2).mean() if isinstance(out_e, torch.Tensor) else sum(
            o.float().pow(2).mean() for o in out_e)
        loss_c = out_c.float().pow(2).mean() if isinstance(out_c, torch.Tensor) else sum(
            o.float().pow(2).mean() for o in out_c)
        loss_e.backward()
        loss_c.backward()
        for ge, gc in zip(_grads(eager, in_e), _grads(compiled_model, in_c)):
            if ge is None:
                assert gc is None
            else:
                torch.testing.assert_close(gc, ge, atol=atol, rtol=rtol)
        for (name, be), (_, bc) in zip(eager.named_buffers(), compiled_model.named_buffers()):
            torch.testing.assert_close(bc, be, atol=atol, rtol=rtol, msg=f"buffer {name}")
        opt_e.step()
        opt_c.step()
        opt_e.zero_grad()
        opt_c.zero_grad()
    return compiled


@pytest.fixture(params=sorted(PARTITIONERS))
def partition_fn(request: pytest.FixtureRequest) -> Any:
    return PARTITIONERS[request.param]


@pytest.fixture
def check_training() -> Callable[..., Any]:
    return compare_training
