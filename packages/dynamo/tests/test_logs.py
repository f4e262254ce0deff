"""EMBER_LOGS parsing, set_logs and per-area loggers."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

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
