"""Graphs reading a dynamic Python float compile with both kernel backends (ADR 0055).

ember.dynamo makes a float that changes between calls a graph input (ADR 0044); ember.inductor
used to run every such graph through ATen. Now the float's uses as an arithmetic or comparison
operand read it from its 0-d tensor inside the kernels: the graph compiles once for every later
value, no "running graph eagerly" hint, results equal to eager bit for bit (where no
transcendental function's rounding differs). Inference, C++ and Triton (Triton's
interpreter, on CPU tensors). Training too since ADR 0060 (aotgrad hands the backward the
float's 0-d tensor, not a ``SymFloat``), and ``+``, ``-``, ``*`` on the float (float64 0-d
tensor ops). Not yet: division (``t / 3.0``) and the float's other uses (``alpha=``,
``lerp``, ``pow``, ``clamp``).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

import ember.dynamo as ed
import ember.inductor.backends as backends
from ember.dynamo.testing import CompileCounterWithBackend
from ember.inductor import CompiledGraph, InductorOptions, make_backend
from ember.inductor.testing import recording

VALUES = (0.5, 0.7, 0.9, 1.3, -2.25, 0.1, 3.0)


def _setup(backend: str, monkeypatch: pytest.MonkeyPatch) -> tuple[CompileCounterWithBackend, list[Any]]:
    if backend == "triton":
        pytest.importorskip("triton")
    seen: list[Any] = []

    monkeypatch.setattr(backends, "compile_graph", recording(backends.compile_graph, seen))
    ed.reset()
    opts = InductorOptions(cpu_backend=backend, fallback_on_error=False)
    return CompileCounterWithBackend(make_backend(opts)), seen


def _no_eager(seen: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    assert seen and all(isinstance(c, CompiledGraph) for c in seen), [
        c.report.eager_reason for c in seen]
    hints = [r.getMessage() for r in caplog.records if r.name == "ember.perf_hints" and "eager" in r.getMessage()]
    assert not hints, hints


def ops(x: torch.Tensor, i: torch.Tensor, t: float) -> tuple[torch.Tensor, ...]:
    return (x * t, x - t, t - x, x / t, x > t, x <= t, i * t, i + t,
            torch.where(x > 0, x, t), x.half() * t)


def fused(x: torch.Tensor, t: float) -> torch.Tensor:
    # one kernel, which the C++ compiler may contract into a fused multiply-add (one
    # rounding where eager has two): close to eager, as the static graph is
    return x * t + t


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_float_operands_compile_once_for_every_later_value(
    backend: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cnt, seen = _setup(backend, monkeypatch)
    compiled = ed.compile(ops, backend=cnt)
    x = torch.randn(64, generator=torch.Generator().manual_seed(0)) * 3
    i = torch.arange(-8, 8)
    with caplog.at_level(logging.INFO, logger="ember"):
        for t in VALUES:
            for g, e in zip(compiled(x, i, t), ops(x, i, t), strict=True):
                assert g.dtype == e.dtype and torch.equal(g, e), (t, g, e)
    assert cnt.frame_count == 2
    _no_eager(seen, caplog)
    assert len(seen) == 2  # the static graph, then one for every later value
    cnt2, seen2 = _setup(backend, monkeypatch)
    compiled2 = ed.compile(fused, backend=cnt2)
    with caplog.at_level(logging.INFO, logger="ember"):
        for t in VALUES:
            torch.testing.assert_close(compiled2(x, t), fused(x, t), rtol=1e-6, atol=1e-6)
    assert cnt2.frame_count == 2
    _no_eager(seen2, caplog)


def scaled_loss(x: torch.Tensor, t: float) -> torch.Tensor:
    return (x * (t * 2 - 1)).sin().sum()


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_training_with_a_dynamic_float_compiles_forward_and_backward(
    backend: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cnt, seen = _setup(backend, monkeypatch)
    compiled = ed.compile(scaled_loss, backend=cnt)
    gen = torch.Generator().manual_seed(1)
    with caplog.at_level(logging.INFO, logger="ember"):
        for t in VALUES[:4]:
            x = torch.randn(32, generator=gen, requires_grad=True)
            rx = x.detach().clone().requires_grad_()
            got, want = compiled(x, t), scaled_loss(rx, t)
            got.backward()
            want.backward()
            torch.testing.assert_close(got, want)
            torch.testing.assert_close(x.grad, rx.grad)
    assert cnt.frame_count == 2
    _no_eager(seen, caplog)
    assert len(seen) == 4  # forward and backward, static then for every later value
