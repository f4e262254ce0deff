"""One set of log areas for every package: ember.dynamo.set_logs reaches ember.inductor's
and ember.aotgrad's loggers, and each block is logged once."""

from __future__ import annotations

import logging

import pytest
import torch

import ember.dynamo


def test_set_logs_reaches_inductor_and_aotgrad(caplog: pytest.LogCaptureFixture) -> None:
    ember.dynamo.reset()
    ember.dynamo.set_logs(output_code=True, perf_hints=True, aot_graphs=True)
    try:
        with caplog.at_level(logging.INFO, logger="ember"):
            lin = torch.nn.Linear(8, 8)
            x = torch.randn(4, 8, requires_grad=True)
            ember.dynamo.compile(lin, backend="inductor")(x).sum().backward()
    finally:
        ember.dynamo.set_logs(output_code=False, perf_hints=False, aot_graphs=False)
        ember.dynamo.reset()
    by_name: dict[str, list[str]] = {}
    for record in caplog.records:
        by_name.setdefault(record.name, []).append(record.getMessage())
    code = by_name.get("ember.output_code", [])
    assert len(code) == 2, code  # the forward and the backward graph, once each
    assert all("def call(args):" in text for text in code)
    assert any("forward graph" in text for text in by_name.get("ember.aot_graphs", []))
    assert "ember.perf_hints" in by_name


@pytest.mark.parametrize("transform", ["vmap", "grad"])
def test_a_handled_failure_is_one_warning_line_without_traceback(
        transform: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # torch.vmap / torch.func.grad over an ember-compiled function: the graph runs eagerly
    # under the transform (issue 31: the log held a traceback through ember's internals)
    monkeypatch.delenv("EMBER_STRICT", raising=False)
    ember.dynamo.reset()

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x.sin() * 2).sum()

    compiled = ember.dynamo.compile(f, backend="inductor")
    apply = torch.vmap if transform == "vmap" else torch.func.grad
    x = torch.randn(4, 3)
    with caplog.at_level(logging.WARNING, logger="ember"):
        got = apply(compiled)(x)
    torch.testing.assert_close(got, apply(f)(x))
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    text = warnings[0].getMessage()
    assert "torch.func transform" in text and "\n" not in text and warnings[0].exc_info is None
    ember.dynamo.reset()


def test_the_traceback_of_a_handled_failure_at_plus_dynamo(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EMBER_STRICT", raising=False)
    ember.dynamo.reset()

    def broken(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> object:
        raise RuntimeError("planted: the backend failed\nwith a long message\nof many lines")

    ember.dynamo.set_logs(dynamo="debug")
    try:
        with caplog.at_level(logging.DEBUG, logger="ember"):
            out = ember.dynamo.compile(lambda x: x * 2, backend=broken)(torch.ones(3))
    finally:
        ember.dynamo.set_logs(dynamo=False)
        ember.dynamo.reset()
    torch.testing.assert_close(out, torch.full((3,), 2.0))
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "planted: the backend failed (...)" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None  # +dynamo: the whole traceback
