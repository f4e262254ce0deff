"""``torch.cond`` in captured code: one graph whose cond node runs the branch the
predicate selects, on every backend, with gradients through the branch that ran;
results compared with eager ``torch.cond``, graph counts asserted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn

import ember.dynamo
from ember.dynamo.testing import CompileCounter

BACKENDS = ["eager", "aot_eager", "inductor"]


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    ember.dynamo.reset()


def _compile(fn: Callable[..., Any], backend: str) -> tuple[Callable[..., Any], CompileCounter | None]:
    counter = CompileCounter() if backend == "eager" else None
    return ember.dynamo.compile(fn, backend=counter or backend, fullgraph=True), counter


def _cond_nodes(counter: CompileCounter) -> int:
    return sum(1 for gm in counter.graphs for n in gm.graph.nodes if "cond" in str(n.target))


@pytest.mark.parametrize("backend", BACKENDS)
def test_both_branches_in_one_graph_that_never_recompiles(backend: str) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = torch.cond(
            x.sum() > 0,
            lambda x, y: (x.sin() + y, x * y),
            lambda x, y: (x.cos() - y, x + y),
            (x, y),
        )
        return a * 2, b

    compiled, counter = _compile(fn, backend)
    y = torch.randn(4, 3)
    for x in (torch.rand(4, 3), -torch.rand(4, 3), torch.rand(4, 3)):
        for got, want in zip(compiled(x, y), fn(x, y), strict=True):
            torch.testing.assert_close(got, want)
    if counter is not None:
        assert counter.frame_count == 1
        assert _cond_nodes(counter) == 1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_gradients_come_from_the_branch_that_ran_only(backend: str) -> None:
    # the other branch's gradient would be NaN (sqrt of a negative number)
    w = torch.randn(5, requires_grad=True)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.cond(
            x.min() >= 0, lambda x: (x * w.exp()).sqrt(), lambda x: (-x * w.exp()).sqrt(), (x,)
        ).sum()

    compiled, _ = _compile(fn, backend)
    for sign in (1.0, -1.0):
        x0 = sign * (torch.rand(5) + 0.5)
        grads = []
        for f in (compiled, fn):
            x = x0.clone().requires_grad_()
            w.grad = None
            f(x).backward()
            grads.append((x.grad, w.grad))
        (gx, gw), (wx, ww) = grads
        assert gx is not None and gw is not None and torch.isfinite(gx).all()
        torch.testing.assert_close(gx, wx)
        torch.testing.assert_close(gw, ww)


class Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.mean() > 0, self.left, self.right, (x,)) + 1

    def left(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x).relu()

    def right(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(x) * 0.5


@pytest.mark.parametrize("backend", BACKENDS)
def test_branches_that_call_submodules_get_parameter_gradients(backend: str) -> None:
    torch.manual_seed(0)
    model = Gate()
    compiled, counter = _compile(model, backend)
    for sign in (1.0, -1.0):
        x = sign * (torch.rand(3, 6) + 0.1)
        model.zero_grad()
        got = compiled(x)
        got.square().sum().backward()
        got_grads = [p.grad.clone() if p.grad is not None else None for p in model.parameters()]
        model.zero_grad()
        want = model(x)
        want.square().sum().backward()
        torch.testing.assert_close(got, want)
        for g, p in zip(got_grads, model.parameters(), strict=True):
            if p.grad is None:
                assert g is None or not g.any()
            else:
                assert g is not None
                torch.testing.assert_close(g, p.grad)
    if counter is not None:
        assert counter.frame_count == 1 and _cond_nodes(counter) == 1


def test_a_constant_predicate_traces_only_its_branch() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.shape[0] > 2, lambda x: x + 1, lambda x: x - 1, (x,))

    compiled, counter = _compile(fn, "eager")
    x = torch.randn(4)
    torch.testing.assert_close(compiled(x), x + 1)
    assert counter is not None and counter.frame_count == 1 and _cond_nodes(counter) == 0


@pytest.mark.parametrize(
    ("true_fn", "false_fn", "reason"),
    [
        (lambda x: x + 1, lambda x: x.sum(), "has shapes"),
        (lambda x: x + 1, lambda x: x.int(), "torch.float32 and torch.int32"),
        (lambda x: x.add_(1), lambda x: x - 1, "changes a tensor in place"),
        (lambda x: x + 1, lambda x: 3, "returns"),
    ],
    ids=["shapes", "dtypes", "in place", "not a tensor"],
)
def test_branches_ember_cannot_capture_are_a_break_that_says_why(
    true_fn: Callable[..., Any], false_fn: Callable[..., Any], reason: str
) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, true_fn, false_fn, (x,))

    with pytest.raises(ember.dynamo.Unsupported, match=reason):
        ember.dynamo.compile(fn, backend="eager", fullgraph=True)(torch.randn(4))


def test_a_branch_writing_python_state_is_a_break() -> None:
    seen: list[torch.Tensor] = []

    def true_fn(x: torch.Tensor) -> torch.Tensor:
        seen.append(x)
        return x + 1

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, true_fn, lambda x: x - 1, (x,))

    with pytest.raises(ember.dynamo.Unsupported, match="changes Python state"):
        ember.dynamo.compile(fn, backend="eager", fullgraph=True)(torch.randn(4))
    assert seen == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_sizes_read_before_and_inside_the_branches(backend: str) -> None:
    def fn(y: torch.Tensor) -> torch.Tensor:
        n = y.shape[0]
        return torch.cond(
            y.mean() > 0, lambda y: y[:1].expand(y.shape[0]) * n, lambda y: y.flip(0), (y,)
        )

    counter = CompileCounter() if backend == "eager" else None
    compiled = ember.dynamo.compile(fn, backend=counter or backend, dynamic=True)
    for n in (4, 7, 9):
        for sign in (1, -1):
            y = sign * torch.rand(n)
            torch.testing.assert_close(compiled(y), fn(y))
    if counter is not None:
        assert counter.frame_count == 1
