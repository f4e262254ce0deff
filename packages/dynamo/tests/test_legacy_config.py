"""TorchDynamo's older config names (legacy_config.py): each maps onto ember's settings
or warns once; none is an AttributeError."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator

import pytest
import torch

import ember.dynamo
from ember.dynamo.api import options_of
from ember.dynamo.legacy_config import LEGACY_SETTINGS

config = ember.dynamo.config


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    levels = {name: logging.getLogger(name).level for name in logging.root.manager.loggerDict
              if name.startswith("ember.")}
    yield
    config.reset()
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.parametrize("name", sorted(LEGACY_SETTINGS))
def test_every_legacy_name_reads_and_sets(name: str) -> None:
    assert getattr(config, name) == LEGACY_SETTINGS[name].default
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        setattr(config, name, LEGACY_SETTINGS[name].default)


def test_unknown_names_still_fail_listing_the_legacy_ones() -> None:
    with pytest.raises(AttributeError, match="has no setting 'verbos'.*log_level.*replay_record_enabled"):
        config.verbos = True


@pytest.mark.parametrize("name", ["replay_record_enabled", "capture_func_transforms"])
def test_names_without_meaning_warn_once(name: str) -> None:
    with pytest.warns(UserWarning, match=name):
        setattr(config, name, True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        setattr(config, name, True)  # said once
    assert getattr(config, name) is True


def test_dynamic_shapes_reads_what_is_in_force() -> None:
    # automatic dynamic (the default) is dynamic shapes on: it read False, and writing
    # that back turned automatic dynamic off
    assert config.dynamic is None and config.dynamic_shapes is True
    config.dynamic_shapes = config.dynamic_shapes
    assert config.dynamic is not False
    config.dynamic = False
    assert config.dynamic_shapes is False


@pytest.mark.parametrize(("name", "value", "dynamic"), [
    ("TORCHDYNAMO_DYNAMIC_SHAPES", "1", True),
    ("TORCHDYNAMO_DYNAMIC_SHAPES", "0", False),
    ("EMBER_DYNAMIC_SHAPES", "0", False),
])
def test_dynamic_shapes_environment_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, dynamic: bool
) -> None:
    monkeypatch.setenv(name, value)
    config.reset()
    assert config.dynamic is dynamic
    counter = ember.dynamo.testing.CompileCounter()
    compiled = ember.dynamo.compile(lambda x: x * 2, backend=counter)
    for n in (4, 5, 6):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), x * 2)
    assert counter.frame_count == (1 if dynamic else 3)
    monkeypatch.setenv(name, "yes")
    with pytest.raises(ValueError, match=name):
        config.reset()
    monkeypatch.delenv(name)


def test_dynamic_shapes_is_dynamic_and_reaches_compile() -> None:
    config.dynamic_shapes = True
    assert config.dynamic is True
    compiled = ember.dynamo.compile(lambda x: x, backend="eager")
    assert options_of(compiled).dynamic is True
    config.dynamic_shapes = False
    assert config.dynamic is False and config.dynamic_shapes is False


@pytest.mark.parametrize(("level", "on", "off"), [
    (logging.ERROR, [], ["graph_breaks", "bytecode", "dynamo"]),
    (logging.WARNING, ["graph_breaks"], ["bytecode", "graph", "guards"]),
    (logging.INFO, ["graph_breaks", "recompiles", "bytecode", "graph", "guards"], ["dynamo"]),
    (logging.DEBUG, ["graph_breaks", "bytecode", "dynamo"], []),
])
def test_log_level_sets_areas(level: int, on: list[str], off: list[str]) -> None:
    config.log_level = level
    for area in on:
        assert logging.getLogger(f"ember.{area}").isEnabledFor(logging.INFO), area
    for area in off:
        assert not logging.getLogger(f"ember.{area}").isEnabledFor(logging.INFO), area
    assert logging.getLogger("ember.dynamo").isEnabledFor(logging.DEBUG) == (level <= logging.DEBUG)


def test_log_level_rejects_non_levels() -> None:
    with pytest.raises(ValueError, match="must be a logging level"):
        config.log_level = "LOUD"


def test_debug_turns_on_graph_bytecode_and_guards() -> None:
    config.debug = True
    assert all(logging.getLogger(f"ember.{a}").isEnabledFor(logging.INFO)
               for a in ("graph", "bytecode", "guards"))
    config.debug = False
    assert not logging.getLogger("ember.bytecode").isEnabledFor(logging.INFO)


def test_dynamic_none_leaves_config_in_force() -> None:
    config.dynamic = False
    assert options_of(ember.dynamo.compile(lambda x: x, backend="eager")).dynamic is False
    assert options_of(ember.dynamo.compile(lambda x: x, backend="eager", dynamic=None)).dynamic is False


def test_debug_function_and_verbose_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_DEBUG_FUNCTION", "suspect")
    monkeypatch.setenv("EMBER_VERBOSE", "1")
    options = options_of(ember.dynamo.compile(lambda x: x, backend="eager"))
    assert (options.debug_function, options.verbose) == ("suspect", True)


def test_debug_function_runs_other_functions_eagerly() -> None:
    config.debug_function = "suspect"
    counter = ember.dynamo.testing.CompileCounter()

    def suspect(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def other(x: torch.Tensor) -> torch.Tensor:
        return x - 1

    x = torch.ones(2)
    torch.testing.assert_close(ember.dynamo.compile(other, backend=counter)(x), x - 1)
    assert counter.frame_count == 0
    torch.testing.assert_close(ember.dynamo.compile(suspect, backend=counter)(x), x + 1)
    assert counter.frame_count == 1


def test_suppress_errors_is_strict_inverted() -> None:
    assert config.suppress_errors is True and config.strict is False
    config.suppress_errors = False
    assert config.strict is True and config.suppress_errors is False
    config.suppress_errors = True
    assert config.strict is False
