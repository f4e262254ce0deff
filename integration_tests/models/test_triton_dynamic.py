"""The zoo's GPT-2 with the Triton backend at growing lengths (issue 32, ADR 0050).

With the default ``dynamic=None`` the second length recompiles the frame into a graph with
a symbolic length; the Triton backend compiles that graph (kernels take the sizes as
arguments) instead of running it eagerly, so six lengths compile at most twice, as with the
C++ backend. Triton runs on CPU tensors in its interpreter (``cpu_backend="triton"``).
Inference and a training step (forward and backward), each compared with eager.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("triton")

import ember.dynamo as ed
import ember.inductor.backends as backends
from ember.dynamo.testing import CompileCounterWithBackend
from ember.inductor import CompiledGraph, InductorOptions, make_backend
from ember.inductor.testing import recording

from . import zoo


def _counted(monkeypatch: pytest.MonkeyPatch) -> tuple[CompileCounterWithBackend, list[Any]]:
    """A Triton-backend counter, and every graph ember.inductor compiles under it."""
    seen: list[Any] = []

    monkeypatch.setattr(backends, "compile_graph", recording(backends.compile_graph, seen))
    ed.reset()
    opts = InductorOptions(cpu_backend="triton", fallback_on_error=False)
    return CompileCounterWithBackend(make_backend(opts)), seen


def _check_compiled(seen: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    assert seen
    for c in seen:
        assert isinstance(c, CompiledGraph), c.report.eager_reason
    assert any(c.report.symbolic for c in seen)  # the recompiled graph has a symbolic length
    hints = [r.getMessage() for r in caplog.records
             if r.name == "ember.perf_hints" and "eager" in r.getMessage()]
    assert not hints, hints


def test_gpt2_six_lengths_compile_twice_with_triton_kernels(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    model = zoo.gpt2().model.eval()
    cnt, seen = _counted(monkeypatch)
    compiled = ed.compile(model, backend=cnt)
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="ember"):
        for length in (8, 11, 16, 23, 30, 37):
            ids = torch.randint(3, zoo.VOCAB, (2, length))
            got = compiled(input_ids=ids, use_cache=False).logits
            want = model(input_ids=ids, use_cache=False).logits
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert cnt.frame_count <= 2
    _check_compiled(seen, caplog)


def test_gpt2_training_step_at_growing_lengths_with_triton_kernels(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    eager = zoo.gpt2().model.train()
    model = copy.deepcopy(eager)
    cnt, seen = _counted(monkeypatch)
    compiled = ed.compile(model, backend=cnt)
    with caplog.at_level(logging.INFO, logger="ember"):
        for length in (8, 12, 19):
            ids = torch.randint(3, zoo.VOCAB, (2, length))
            got = compiled(input_ids=ids, labels=ids, use_cache=False).loss
            got.backward()
            want = eager(input_ids=ids, labels=ids, use_cache=False).loss
            want.backward()
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
                assert p.grad is not None and q.grad is not None, name
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4, msg=name)
            model.zero_grad(set_to_none=True)
            eager.zero_grad(set_to_none=True)
    assert cnt.frame_count <= 2
    _check_compiled(seen, caplog)
