"""``torch.autograd.Function`` subclasses in captured code: the forward traced into the
graph, the user's own backward kept (these backwards deliberately differ from the true
derivative, so a backend differentiating the forward instead would fail). Results and
gradients compared with eager, graph counts asserted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import ember.dynamo
from ember.dynamo.testing import CompileCounter

BACKENDS = ["eager", "aot_eager", "inductor"]


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    ember.dynamo.reset()


class ScaledExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float) -> torch.Tensor:
        y = x.exp()
        ctx.save_for_backward(y)
        ctx.scale = scale
        return y * scale

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, None]:
        (y,) = ctx.saved_tensors
        grad = g * y * ctx.scale * 2 if ctx.needs_input_grad[0] else None  # "wrong" on purpose
        return grad, None


class Clip(torch.autograd.Function):
    """Two tensor inputs, two outputs, a tensor kept as a ctx attribute."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.mask = x > 0
        ctx.save_for_backward(w)
        return x.clamp(min=0) * w, x.sum(0)

    @staticmethod
    def backward(ctx: Any, ga: torch.Tensor, gb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        (w,) = ctx.saved_tensors
        return ga * ctx.mask * w + gb, (ga * 3).sum(0)


CASES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "ctx attributes and saved tensors": lambda x, w: ScaledExp.apply(x.sin() * w, 0.5).sum(),
    "two inputs and two outputs": lambda x, w: sum(t.sum() for t in Clip.apply(x * 2, w)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_forward_is_traced_and_the_users_backward_runs(name: str, backend: str) -> None:
    fn = CASES[name]
    counter = CompileCounter() if backend == "eager" else None
    compiled = ember.dynamo.compile(fn, backend=counter or backend, fullgraph=True)
    x0, w0 = torch.randn(4, 3), torch.randn(3)
    results = []
    for f in (compiled, fn):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        out = f(x, w)
        out.backward()
        results.append((out.detach(), x.grad, w.grad))
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want)
    if counter is not None:
        assert counter.frame_count == 1
        assert not any(n.op == "call_module" for gm in counter.graphs for n in gm.graph.nodes)


def test_without_grad_the_forward_alone_runs() -> None:
    counter = CompileCounter()
    compiled = ember.dynamo.compile(lambda x: ScaledExp.apply(x, 3.0), backend=counter, fullgraph=True)
    x = torch.randn(5)
    out = compiled(x)
    torch.testing.assert_close(out, x.exp() * 3.0)
    assert not out.requires_grad and counter.frame_count == 1


class SetupContext(torch.autograd.Function):
    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 2


class Dirty(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.mark_dirty(x)
        return x.add_(1)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g


@pytest.mark.parametrize(
    ("fn_cls", "reason"),
    [(SetupContext, "with a setup_context"), (Dirty, "ctx.mark_dirty")],
)
def test_forms_not_captured_are_a_break_that_says_why(fn_cls: Any, reason: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return fn_cls.apply(x.clone()) + 1

    with pytest.raises(ember.dynamo.Unsupported, match=reason):
        ember.dynamo.compile(fn, backend="eager", fullgraph=True)(torch.randn(3))
    x = torch.randn(3)
    torch.testing.assert_close(ember.dynamo.compile(fn, backend="eager")(x), fn(x))
