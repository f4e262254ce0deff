"""``register_hook`` on a tensor the graph computes: captured as a node that registers the
hook when the graph runs, so the compiled backward applies it. Gradients compared with
eager, graph counts asserted; hooks ember cannot capture are a break that says why."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import ember.dynamo
from ember.dynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    ember.dynamo.reset()


def _double(g: torch.Tensor) -> torch.Tensor:
    return g * 2


def hooked(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = x.sin() * w
    y.register_hook(_double)
    z = y.cos()
    z.register_hook(lambda g: g.clamp(max=0.5))
    return (z * y).sum()


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_hooks_on_intermediates_change_the_compiled_gradients_as_in_eager(backend: str) -> None:
    counter = CompileCounter() if backend == "eager" else None
    compiled = ember.dynamo.compile(hooked, backend=counter or backend, fullgraph=True)
    x0, w0 = torch.randn(6), torch.randn(6)
    grads = []
    for f in (compiled, hooked):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        f(x, w).backward()
        grads.append((x.grad, w.grad))
    for got, want in zip(*grads, strict=True):
        torch.testing.assert_close(got, want)
    if counter is not None:
        assert counter.frame_count == 1


def test_a_hook_with_a_closure_is_a_break_that_says_why() -> None:
    seen: list[torch.Tensor] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.register_hook(lambda g: seen.append(g))
        return y.sum()

    with pytest.raises(ember.dynamo.Unsupported, match="the tensor hook of `<lambda>`, which has closure"):
        ember.dynamo.compile(fn, backend="eager", fullgraph=True)(torch.randn(3, requires_grad=True))
    x = torch.randn(3, requires_grad=True)
    ember.dynamo.compile(fn, backend="aot_eager")(x).backward()
    assert len(seen) == 1  # the break ran the hook registration eagerly: it still fires
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))
