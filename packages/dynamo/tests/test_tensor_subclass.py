"""Tensor-subclass inputs: a subclass that adds nothing to ``torch.Tensor`` is captured
(guarded by class, results of its class as in eager); any other is a graph break
that names it. Results compared with eager, graph counts asserted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import ember.dynamo
from ember.dynamo.testing import CompileCounter


class Tagged(torch.Tensor):
    """Adds nothing: torch's default ``__torch_function__`` keeps the class on results."""


class MoreTagged(Tagged):
    pass


class Logging(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    ember.dynamo.reset()


def _fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x * 2 + y, y.sin(), torch.cat([x, y]).sum(0), x


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_a_plain_subclass_is_captured_and_results_keep_its_class(backend: str) -> None:
    counter = CompileCounter() if backend == "eager" else None
    compiled = ember.dynamo.compile(_fn, backend=counter or backend, fullgraph=True)
    x, y = torch.randn(4, 6).as_subclass(Tagged), torch.randn(4, 6)
    got, want = compiled(x, y), _fn(x, y)
    for g, w in zip(got, want, strict=True):
        assert type(g) is type(w)
        torch.testing.assert_close(g.as_subclass(torch.Tensor), w.as_subclass(torch.Tensor))
    assert got[3] is x
    if counter is not None:
        assert counter.frame_count == 1
        compiled(torch.randn(4, 6), y)  # a plain tensor: the class guard fails
        compiled(torch.randn(4, 6).as_subclass(MoreTagged), y)
        assert counter.frame_count == 3
        compiled(torch.randn(4, 6).as_subclass(Tagged), y)
        assert counter.frame_count == 3


def test_gradients_reach_the_tensor_behind_a_subclass() -> None:
    leaf = torch.randn(5, requires_grad=True)
    out = ember.dynamo.compile(lambda t: (t * t).sum(), backend="aot_eager", fullgraph=True)(
        leaf.as_subclass(Tagged)
    )
    out.backward()
    torch.testing.assert_close(leaf.grad, 2 * leaf.detach())


def test_a_subclass_with_its_own_torch_function_is_a_break_that_names_it() -> None:
    x = torch.randn(3).as_subclass(Logging)
    with pytest.raises(ember.dynamo.Unsupported, match="tensor subclass `Logging`"):
        ember.dynamo.compile(lambda t: t + 1, backend="eager", fullgraph=True)(x)
    counter = CompileCounter()
    got = ember.dynamo.compile(lambda t: t + 1, backend=counter)(x)
    torch.testing.assert_close(got.as_subclass(torch.Tensor), x.as_subclass(torch.Tensor) + 1)
    assert type(got) is Logging and counter.frame_count == 0
