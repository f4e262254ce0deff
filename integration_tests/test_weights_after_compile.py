"""A compiled model whose weights or layers change between calls, as users change them:
``p.data = new`` (loading weights, EMA, weight tying), ``p.data.copy_()``, ``m.weight = other``,
``.data`` with another layout, ``layers.append(...)``; checked against eager (issue 14, ADR 0038).

Each case runs in inference (``no_grad``), with grad on for a frozen model, and in training,
and once more on a second instance of the class, whose frame is bound from the frame cache.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import ember.dynamo

BACKENDS = ["aot_eager", "inductor"]


@pytest.fixture(autouse=True)
def _reset() -> Any:
    yield
    ember.dynamo.reset()


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 6)
        self.fc2 = nn.Linear(6, 3)
        self.register_buffer("scale", torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(torch.relu(self.fc1(x))) * self.scale
        return out


def _new_data(m: MLP) -> None:
    m.fc1.weight.data = torch.randn(6, 4)


def _copy_in_place(m: MLP) -> None:
    with torch.no_grad():
        m.fc1.weight.copy_(torch.randn(6, 4))


def _ema(m: MLP) -> None:
    with torch.no_grad():
        for p in m.parameters():
            p.data.mul_(0.5).add_(0.25)


def _buffer_data(m: MLP) -> None:
    m.scale.data = torch.randn(3)


def _transposed_data(m: MLP) -> None:
    m.fc1.weight.data = torch.randn(4, 6).t()


def _double_data(m: MLP) -> None:
    m.fc2.bias.data = torch.randn(3, dtype=torch.float64)


def _replaced(m: MLP) -> None:
    m.fc1.weight = nn.Parameter(torch.randn(6, 4))


def _tied(m: MLP) -> None:
    other = nn.Linear(6, 4)
    m.fc1.weight = nn.Parameter(other.weight.t().contiguous())


CHANGES: dict[str, Callable[[MLP], None]] = {
    "data": _new_data,
    "copy_": _copy_in_place,
    "ema": _ema,
    "buffer_data": _buffer_data,
    "transposed_data": _transposed_data,
    "float64_data": _double_data,
    "replaced": _replaced,
    "tied": _tied,
}


def _fresh(seed: int) -> MLP:
    torch.manual_seed(seed)
    return MLP()


@pytest.mark.parametrize("restored", [False, True], ids=["captured", "from_frame_cache"])
@pytest.mark.parametrize("mode", ["no_grad", "frozen", "train"])
@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_weights_changed_after_a_compiled_call_are_used(
    backend: str, change: str, mode: str, restored: bool
) -> None:
    x = torch.randn(5, 4)
    if restored:  # a first instance stores the frame; the second binds it
        first = _fresh(1)
        with torch.no_grad() if mode == "no_grad" else torch.enable_grad():
            if mode == "frozen":
                first.requires_grad_(False)
            ember.dynamo.compile(first, backend=backend)(x)
    m = _fresh(0)
    if mode == "frozen":
        m.requires_grad_(False)
    compiled = ember.dynamo.compile(m, backend=backend)
    grad = torch.no_grad() if mode == "no_grad" else torch.enable_grad()
    with grad:
        compiled(x)
        CHANGES[change](m)
        if change == "float64_data":  # eager's addmm refuses mixed dtypes: so must ember
            with pytest.raises(RuntimeError):
                m(x)
            with pytest.raises(RuntimeError):
                compiled(x)
            return
        got = compiled(x)
        want = m(x)
    torch.testing.assert_close(got, want)
    if mode == "train":
        got.sum().backward()
        got_grads = [p.grad.clone() for p in m.parameters() if p.grad is not None]
        m.zero_grad()
        want.sum().backward()
        want_grads = [p.grad for p in m.parameters() if p.grad is not None]
        assert len(got_grads) == len(want_grads) == len(list(m.parameters()))
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w)


class Stack(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


@pytest.mark.parametrize("backend", ["eager", *BACKENDS])
def test_layer_appended_after_a_compiled_call_runs(backend: str) -> None:
    x = torch.randn(2, 4)
    seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    stack = Stack(2)
    with torch.no_grad():
        for model, add in ((seq, lambda: seq.append(nn.Linear(4, 4))),
                           (stack, lambda: stack.layers.append(nn.Linear(4, 4)))):
            compiled = ember.dynamo.compile(model, backend=backend)
            compiled(x)
            add()
            torch.testing.assert_close(compiled(x), model(x))


class Chain(nn.Sequential):
    """A ``Sequential`` with its own ``forward`` (code no other test calls with other sizes:
    ``Sequential.forward`` seen with several sizes is captured with dynamic sizes, and such
    frames are not stored)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self:
            x = layer(x)
        return x


@pytest.mark.parametrize("backend", ["eager", *BACKENDS])
def test_sequentials_of_different_lengths_each_run_their_own_layers(backend: str) -> None:
    # a 3-layer Sequential's frame, stored for other instances, ran a 24-layer one
    x = torch.randn(2, 8)
    with torch.no_grad():
        for n in (3, 24, 2):
            torch.manual_seed(n)
            model = Chain(*[nn.Linear(8, 8) for _ in range(n)])
            torch.testing.assert_close(ember.dynamo.compile(model, backend=backend)(x), model(x))


class TiedLM(nn.Module):
    def __init__(self, tied: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.embed(tokens))
        return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_tied_weights_untied_after_a_compiled_call(backend: str) -> None:
    # the untied name was not guarded (named_parameters() drops duplicates), and a plan
    # stored for the tied model named both constants by embed.weight
    tokens = torch.tensor([1, 2, 3])
    with torch.no_grad():
        torch.manual_seed(0)
        m = TiedLM(tied=True)
        compiled = ember.dynamo.compile(m, backend=backend)
        torch.testing.assert_close(compiled(tokens), m(tokens))
        m.head.weight = nn.Parameter(torch.randn(10, 4))
        torch.testing.assert_close(compiled(tokens), m(tokens))
        torch.manual_seed(1)
        untied = TiedLM(tied=False)  # same graph, weights not tied: its own plan
        torch.testing.assert_close(ember.dynamo.compile(untied, backend=backend)(tokens),
                                   untied(tokens))
