"""``torch.compile(model, backend="ember")``: ember.inductor behind TorchDynamo, found by
name through torch's ``torch_dynamo_backends`` entry-point group (ember-inductor's
pyproject), as tools that take a backend *name* (transformers' Trainer, accelerate,
Lightning) select it. Results are compared with eager; the backend torch resolves the
name to must be ember's own function, not a fallback of torch's.
"""

from __future__ import annotations

import pytest
import torch

import ember.inductor

from .models import zoo

pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()


def test_the_name_resolves_to_ember_inductor() -> None:
    from torch._dynamo.backends.registry import list_backends, lookup_backend

    assert "ember" in list_backends()
    assert lookup_backend("ember") is ember.inductor.backends.inductor


def test_zoo_gpt2_under_torch_compile_backend_ember_matches_eager() -> None:
    case = zoo.gpt2()
    torch.manual_seed(0)
    compiled = torch.compile(case.model, backend="ember")
    with torch.no_grad():
        want = case.outputs(case.model(*case.args, **case.kwargs))
        got = case.outputs(compiled(*case.args, **case.kwargs))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_training_step_and_options_through_the_name() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    compiled = torch.compile(model, backend="ember", options={"max_fusion_size": 32})
    compiled(x).square().sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().sum().backward()
    for g, p in zip(got, model.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)
