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
