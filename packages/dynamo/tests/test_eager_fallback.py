"""A compiled call that raises runs again eagerly, unless it may have written an input.

``EagerOnError`` (``eager_fallback.py``): where the compiled code raises and eager does
not, the graph runs eagerly; a graph that writes its inputs in place is run again only
when the layers below said that no input was written before the exception
(``ember.ir.updates.note_inputs_written``), else the write would apply twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import ember.dynamo
from ember.ir.updates import note_inputs_written

Backend = Callable[[torch.fx.GraphModule, list[torch.Tensor]], Callable[..., Any]]


@pytest.fixture(autouse=True)
def _reset() -> Any:
    yield
    ember.dynamo.reset()


def _backend(run: Callable[[torch.fx.GraphModule, tuple[Any, ...]], Any]) -> Backend:
    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        return lambda *args: run(gm, args)

    return backend


def _compile(fn: Callable[..., Any], backend: Backend) -> Callable[..., Any]:
    return ember.dynamo.compile(fn, backend=backend, options={"strict": False})


def _double_then_add(x: torch.Tensor) -> torch.Tensor:
    x.mul_(2)
    return x + 1


def test_a_call_that_raises_without_writing_runs_eagerly() -> None:
    def fails(gm: torch.fx.GraphModule, args: tuple[Any, ...]) -> Any:
        raise RuntimeError("a kernel failed")

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.sin() + 1

    x = torch.randn(5)
    torch.testing.assert_close(_compile(fn, _backend(fails))(x), fn(x))


def test_a_call_that_says_it_wrote_nothing_runs_eagerly() -> None:
    def fails(gm: torch.fx.GraphModule, args: tuple[Any, ...]) -> Any:
        exc = RuntimeError("a kernel failed before the update kernel")
        note_inputs_written(exc, False)
        raise exc

    x = torch.arange(4.0)
    out = _compile(_double_then_add, _backend(fails))(x)
    assert torch.equal(x, torch.arange(4.0) * 2)  # written once, by the eager run
    assert torch.equal(out, torch.arange(4.0) * 2 + 1)


@pytest.mark.parametrize("says", [True, None])
def test_a_call_that_wrote_an_input_then_raised_is_not_run_again(says: bool | None) -> None:
    calls = []

    def writes_then_fails(gm: torch.fx.GraphModule, args: tuple[Any, ...]) -> Any:
        calls.append(1)
        args[0].mul_(2)  # a kernel computed the update into the input
        exc = RuntimeError("a later kernel failed")
        if says is not None:
            note_inputs_written(exc, says)
        raise exc  # None: the backend says nothing, and the graph writes an input

    compiled = _compile(_double_then_add, _backend(writes_then_fails))
    x = torch.arange(4.0)
    with pytest.raises(RuntimeError, match="a later kernel failed") as info:
        compiled(x)
    assert torch.equal(x, torch.arange(4.0) * 2)  # not doubled twice
    assert any("not run again eagerly" in n for n in getattr(info.value, "__notes__", []))
    # from then on the graph runs eagerly
    y = torch.arange(4.0)
    assert torch.equal(compiled(y), torch.arange(4.0) * 2 + 1)
    assert torch.equal(y, torch.arange(4.0) * 2)
    assert len(calls) == 1
