"""A compiled backward that raises: the gradients come from the forward run eagerly
(``backward_fallback.py``), logged on one line; strict raises. Each test plants the
failure in the backward compiler and compares every gradient with eager's."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx as fx

from ember.aotgrad import AotOptions, aot_function, aot_module, nop_compiler

LENIENT = AotOptions(fallback_to_eager=True, strict=False)


def failing_backward(when: Callable[[list[Any]], bool] = lambda args: True,
                     graph_too: bool = False) -> Any:
    """A backward compiler whose compiled graphs raise where ``when(args)`` (an internal
    error); with ``graph_too`` the backward graph itself raises there as well (a bug in the
    traced backward: running it uncompiled does not help)."""

    def compiler(gm: fx.GraphModule, example_inputs: list[Any]) -> Any:
        if graph_too:
            placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
            with gm.graph.inserting_after(placeholders[-1]):
                gm.graph.call_function(_raising_where(when), tuple(placeholders))
            gm.recompile()

        def run(*args: Any) -> Any:
            if when(list(args)):
                raise RuntimeError("planted: the compiled backward failed\nand said more")
            return gm(*args)

        return run

    return compiler


def _raising_where(when: Callable[[list[Any]], bool]) -> Callable[..., None]:
    def planted_failure(*args: Any) -> None:
        if when(list(args)):
            raise RuntimeError("planted: the backward graph failed")

    return planted_failure


def _grads(fn: Callable[..., Any], *inputs: torch.Tensor, seed: int = 0) -> list[Any]:
    leaves = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    torch.manual_seed(seed)
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o * torch.linspace(-1, 2, o.numel()).view(o.shape)).sum() for o in outs
               if o.requires_grad)
    loss.backward()  # type: ignore[union-attr]
    return [o.detach() for o in outs] + [t.grad for t in leaves]


def _same(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert (g is None) == (w is None)
        if g is not None:
            torch.testing.assert_close(g, w)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_backward_graph_runs_uncompiled_when_its_compiled_form_raises(
        caplog: pytest.LogCaptureFixture) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ w).sum(0) * 3

    compiled = aot_function(f, nop_compiler, failing_backward(), options=LENIENT)
    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, 5, requires_grad=True)
    with caplog.at_level(logging.WARNING, logger="ember.aotgrad"):
        _same(_grads(compiled, x, w), _grads(f, x, w))
        _same(_grads(compiled, x, w), _grads(f, x, w))  # the second skips the compiled backward
    records = _warnings(caplog)
    assert len(records) == 1
    text = records[0].getMessage()
    assert "<locals>.f raised RuntimeError: planted" in text and "\n" not in text
    assert "its backward graph runs eagerly instead" in text
    assert records[0].exc_info is None  # no traceback by default


def test_the_function_runs_again_when_the_backward_graph_raises_too(
        caplog: pytest.LogCaptureFixture) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(x @ w)
        return h.sum(0) * 3, h.t()  # the second output: a view the runtime replays

    compiled = aot_function(f, nop_compiler, failing_backward(graph_too=True), options=LENIENT)
    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, 5, requires_grad=True)
    with caplog.at_level(logging.WARNING, logger="ember.aotgrad"):
        _same(_grads(compiled, x, w), _grads(f, x, w))
        _same(_grads(compiled, x, w), _grads(f, x, w))
    records = _warnings(caplog)
    assert len(records) == 1 and "the function run again eagerly" in records[0].getMessage()


def test_strict_raises_the_backward_error() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x.exp() * 2).sum()

    compiled = aot_function(f, nop_compiler, failing_backward(),
                            options=AotOptions(fallback_to_eager=True, strict=True))
    with pytest.raises(RuntimeError, match="planted"):
        compiled(torch.randn(3, requires_grad=True)).backward()


def test_dropout_draws_the_same_mask_when_run_again() -> None:
    # the forward's random numbers come from the generator as it was before the forward
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x * 2, 0.5, training=True)

    compiled = aot_function(f, nop_compiler, failing_backward(graph_too=True), options=LENIENT)
    x = torch.randn(64, requires_grad=True)
    _same(_grads(compiled, x, seed=3), _grads(f, x, seed=3))


def test_an_input_the_graph_writes_is_run_again_from_its_value_before_the_write() -> None:
    def f(x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
        buf.mul_(2)
        return (x * buf).sin()

    compiled = aot_function(f, nop_compiler, failing_backward(graph_too=True), options=LENIENT)
    x, buf = torch.randn(5, requires_grad=True), torch.randn(5)
    b1, b2 = buf.clone(), buf.clone()
    _same(_grads(compiled, x, b1), _grads(f, x, b2))
    torch.testing.assert_close(b1, b2)


def test_an_input_changed_between_forward_and_backward_raises_with_a_note() -> None:
    # ``w`` is not saved (the gradient of ``x * 2 + w`` does not read it), so autograd's own
    # version check does not see the write; running the function again on the new values
    # could give a wrong gradient, so the backward's error stays, explained
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x * 2 + w).sum()

    compiled = aot_function(f, nop_compiler, failing_backward(graph_too=True), options=LENIENT)
    x, w = torch.randn(3, requires_grad=True), torch.randn(3)
    loss = compiled(x, w)
    with torch.no_grad():
        w.add_(1)
    with pytest.raises(RuntimeError, match="planted") as info:
        loss.backward()
    assert any("changed in place between its forward and its backward" in n
               for n in getattr(info.value, "__notes__", []))


def test_a_module_whose_backward_fails_only_at_one_size() -> None:
    # a per-size failure: the other size keeps the compiled backward, and once a size passed
    # its forward keeps no inputs
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    eager = torch.nn.Sequential(*[m for m in model])
    failures = failing_backward(lambda args: any(
        isinstance(a, torch.Tensor) and a.dim() == 2 and a.shape[0] == 6 for a in args),
        graph_too=True)
    compiled = aot_module(model, nop_compiler, failures, options=LENIENT)
    for n in (3, 6, 3, 6):
        x = torch.randn(n, 4)
        got = _grads(compiled, x)
        got_params = [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]
        model.zero_grad()
        want = _grads(eager, x)
        want_params = [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]
        model.zero_grad()
        _same(got, want)
        _same(got_params, want_params)
    plans = [plan for plan, _ in compiled._compiled.cache.values() if plan is not None]
    fallbacks = [p.fallback for p in plans if p.fallback is not None]
    assert len(plans) == len(fallbacks) == 2
    assert sorted((bool(fb.passed), bool(fb.failed)) for fb in fallbacks) == [
        (False, True), (True, False)]
    passed = next(fb for fb in fallbacks if fb.passed)
    failed = next(fb for fb in fallbacks if fb.failed)
    params = [p.detach() for p in model.parameters()]
    assert passed.keep([*params, torch.randn(3, 4)]).inputs is None
    assert failed.keep([*params, torch.randn(6, 4)]).inputs is not None
