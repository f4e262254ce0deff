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
from ember.dynamo.testing import CompileCounter, CompileCounterWithBackend

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


class SetupMul(torch.autograd.Function):
    """The ``setup_context`` form: forward without ctx, ctx filled from inputs and output."""

    @staticmethod
    def forward(x: torch.Tensor, w: torch.Tensor, scale: float) -> torch.Tensor:
        return x * w * scale

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        x, w, scale = inputs
        ctx.save_for_backward(x, w, output)
        ctx.scale = scale

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        x, w, out = ctx.saved_tensors
        gx = g * w * ctx.scale + out if ctx.needs_input_grad[0] else None  # "+ out": on purpose
        gw = (g * x * ctx.scale).sum(0) if ctx.needs_input_grad[1] else None
        return gx, gw, None


class ClampWithMask(torch.autograd.Function):
    """A non-differentiable second output (``mark_non_differentiable``)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = x > 0
        ctx.mark_non_differentiable(mask)
        ctx.save_for_backward(mask)
        return x.clamp(min=0), mask

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor, g_mask: torch.Tensor) -> torch.Tensor:
        (mask,) = ctx.saved_tensors
        return g * mask * 2 + g_mask.sum() * 0  # g_mask: materialized zeros


class NoMaterialize(torch.autograd.Function):
    """``set_materialize_grads(False)``: the unused output's gradient is None."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.set_materialize_grads(False)
        return x * 2, x * 3

    @staticmethod
    def backward(ctx: Any, ga: torch.Tensor | None, gb: torch.Tensor | None) -> torch.Tensor:
        assert gb is None, "the second output has no gradient"
        return ga * 5 if ga is not None else torch.zeros(())


def _masked(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y, mask = ClampWithMask.apply(x * w)
    assert not mask.requires_grad
    return y.sum() + mask.sum()


CASES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "ctx attributes and saved tensors": lambda x, w: ScaledExp.apply(x.sin() * w, 0.5).sum(),
    "two inputs and two outputs": lambda x, w: sum(t.sum() for t in Clip.apply(x * 2, w)),
    "setup_context": lambda x, w: SetupMul.apply(x.cos(), w, 1.5).sum(),
    "mark_non_differentiable": _masked,
    "set_materialize_grads": lambda x, w: NoMaterialize.apply(x * w)[0].sum(),
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
    """``mark_dirty``: the input changed in place and returned."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.mark_dirty(x)
        return x.mul_(2)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 3  # "wrong" on purpose


class Undeclared(torch.autograd.Function):
    """Changes its input in place without ``mark_dirty``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g


@pytest.mark.parametrize("backend", BACKENDS)
def test_mark_dirty_changes_the_input_and_the_users_backward_runs(backend: str) -> None:
    def fn(w: torch.Tensor) -> torch.Tensor:
        x = w * 1.5
        y = Dirty.apply(x)
        return y.sum() + x.sum() * 2  # x is y now: changed in place

    counter = CompileCounterWithBackend(backend)
    w1 = torch.randn(4, requires_grad=True)
    w2 = w1.detach().clone().requires_grad_()
    out = ember.dynamo.compile(fn, backend=counter, fullgraph=True)(w1)
    out.backward()
    ref = fn(w2)
    ref.backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(w1.grad, w2.grad)
    assert counter.frame_count == 1


def test_setup_context_with_nothing_saved() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return SetupContext.apply(x.clone()) + 1

    counter = CompileCounter()
    x = torch.randn(3, requires_grad=True)
    out = ember.dynamo.compile(fn, backend=counter, fullgraph=True)(x)
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))
    assert counter.frame_count == 1


@pytest.mark.parametrize(
    ("fn_cls", "reason"),
    [(Undeclared, "changes a tensor in place")],
)
def test_forms_not_captured_are_a_break_that_says_why(fn_cls: Any, reason: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return fn_cls.apply(x.clone()) + 1

    with pytest.raises(ember.dynamo.Unsupported, match=reason):
        ember.dynamo.compile(fn, backend="eager", fullgraph=True)(torch.randn(3))
    x = torch.randn(3)
    torch.testing.assert_close(ember.dynamo.compile(fn, backend="eager")(x), fn(x))
