"""``torch.func.functional_call`` in captured code: the module's call traced with its
parameters and buffers read from the dict (one graph, no ``get_attr`` of the module's
own tensors); results and gradients compared with eager."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

import ember.dynamo
from ember.dynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    ember.dynamo.reset()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)
        self.register_buffer("scale", torch.full((4,), 3.0))

    def forward(self, x: torch.Tensor, shift: float = 0.0) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x))) * self.scale + shift


def _state(model: nn.Module, factor: float) -> dict[str, torch.Tensor]:
    state = {k: v.detach() * factor for k, v in model.named_parameters()}
    state.update({k: v.detach() + factor for k, v in model.named_buffers()})
    return state


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_functional_call_reads_the_dict_not_the_module(backend: str) -> None:
    torch.manual_seed(0)
    model = Net()
    counter = CompileCounter() if backend == "eager" else None

    @ember.dynamo.compile(backend=counter or backend, fullgraph=True)
    def f(state: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, state, (x,), {"shift": 1.0})

    x = torch.randn(5, 8)
    for factor in (2.0, -1.0):  # new tensors of the same layout: no recompile
        state = _state(model, factor)
        want = torch.func.functional_call(model, state, (x,), {"shift": 1.0})
        torch.testing.assert_close(f(state, x), want)
    if counter is not None:
        assert counter.frame_count == 1
        assert counter.graphs[0].graph.find_nodes(op="get_attr") == []
        assert counter.graphs[0].graph.find_nodes(op="call_module") == []


def test_a_partial_dict_keeps_the_other_tensors_of_the_module() -> None:
    torch.manual_seed(0)
    model = Net()
    counter = CompileCounter()
    state = {"fc1.weight": torch.randn(16, 8)}

    @ember.dynamo.compile(backend=counter, fullgraph=True)
    def f(state: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, state, x)  # a single argument

    x = torch.randn(5, 8)
    torch.testing.assert_close(f(state, x), torch.func.functional_call(model, state, x))
    assert counter.frame_count == 1
    # outside the call the module's own weight is used again
    torch.testing.assert_close(ember.dynamo.compile(model, backend="eager")(x), model(x))


def test_gradients_reach_the_dict_tensors() -> None:
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(5, 8)

    def loss(state: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, state, (x,)).square().sum()

    got = {k: v.detach().clone().requires_grad_() for k, v in model.named_parameters()}
    want = {k: v.detach().clone().requires_grad_() for k, v in model.named_parameters()}
    ember.dynamo.compile(loss, backend="aot_eager", fullgraph=True)(got, x).backward()
    loss(want, x).backward()
    for k in want:
        torch.testing.assert_close(got[k].grad, want[k].grad)
    assert all(p.grad is None for p in model.parameters())


def test_a_key_the_module_does_not_have_is_a_graph_break_that_says_so() -> None:
    model = Net()

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(model, {"nope": x}, (x,))

    with pytest.raises(ember.dynamo.Unsupported, match="names no parameter or buffer"):
        ember.dynamo.compile(f, backend="eager", fullgraph=True)(torch.randn(5, 8))
