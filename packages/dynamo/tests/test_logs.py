"""EMBER_LOGS parsing, set_logs and per-area loggers."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import torch

import ember.dynamo
from ember.dynamo import logs
from ember.dynamo.logs import LogSettingsError, parse_log_spec


@pytest.fixture(autouse=True)
def _restore_levels() -> Iterator[None]:
    before = {a: logging.getLogger(f"ember.{a}").level for a in logs.AREAS}
    yield
    for area, level in before.items():
        logging.getLogger(f"ember.{area}").setLevel(level)


def test_parse_spec_levels() -> None:
    assert parse_log_spec("graph_breaks, +guards,recompiles") == {
        "graph_breaks": logging.INFO,
        "guards": logging.DEBUG,
        "recompiles": logging.INFO,
    }
    assert parse_log_spec("") == {}
    assert set(parse_log_spec("+all")) == set(logs.AREAS)


def test_unknown_area_is_named() -> None:
    with pytest.raises(LogSettingsError, match="EMBER_LOGS names unknown log area 'recompile'; known areas: "):
        parse_log_spec("recompile")
    with pytest.raises(LogSettingsError, match="set_logs names unknown log area 'graphs'"):
        ember.dynamo.set_logs(graphs=True)
    with pytest.raises(LogSettingsError, match="use True, False, 'info' or 'debug'"):
        ember.dynamo.set_logs(guards="loud")


def test_env_configures_loggers() -> None:
    logs.configure_from_env({"EMBER_LOGS": "bytecode,+graph_code"})
    assert logging.getLogger("ember.bytecode").level == logging.INFO
    assert logging.getLogger("ember.graph_code").level == logging.DEBUG
    assert logs.enabled("graph_code", logging.DEBUG)


def test_set_logs_levels() -> None:
    ember.dynamo.set_logs(recompiles=True, guards="debug", graph=False)
    assert logging.getLogger("ember.recompiles").level == logging.INFO
    assert logging.getLogger("ember.guards").level == logging.DEBUG
    assert logging.getLogger("ember.graph").level == logging.WARNING
    assert ember.dynamo.get_logger("recompiles").name == "ember.recompiles"


def test_enabled_area_reaches_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    ember.dynamo.set_logs(perf_hints=True)
    ember.dynamo.get_logger("perf_hints").info("hello from perf_hints")
    assert "[ember.perf_hints] hello from perf_hints" in capsys.readouterr().err


def toy(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_capture_logs_bytecode_graph_and_breaks(caplog: pytest.LogCaptureFixture) -> None:
    ember.dynamo.set_logs(bytecode=True, graph=True, graph_code=True, guards=True, graph_breaks=True)
    f = ember.dynamo.compile(toy, backend="eager")
    with caplog.at_level(logging.INFO, logger="ember"):
        f(torch.randn(4), torch.randn(4))
    ember.dynamo.reset()
    by_area: dict[str, str] = {}
    for rec in caplog.records:
        by_area[rec.name] = by_area.get(rec.name, "") + rec.getMessage() + "\n"
    assert "ORIGINAL BYTECODE" in by_area["ember.bytecode"] and "MODIFIED BYTECODE" in by_area["ember.bytecode"]
    assert "def forward(self, a, b):" in by_area["ember.graph_code"]
    assert "call_function  abs_1" in by_area["ember.graph"]
    assert "local 'a' TENSOR_MATCH" in by_area["ember.guards"]
    assert "graph break in `toy` at " in by_area["ember.graph_breaks"]
    assert "`if b.sum() < 0:`" in by_area["ember.graph_breaks"]
