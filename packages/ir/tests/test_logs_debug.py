"""ember.ir.logs (log areas shared by every package) and ember.ir.debug (the debug folder)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from ember.ir import debug, logs


@pytest.fixture(autouse=True)
def _restore_levels() -> Iterator[None]:
    before = {a: logging.getLogger(f"ember.{a}").level for a in logs.AREAS}
    yield
    for area, level in before.items():
        logging.getLogger(f"ember.{area}").setLevel(level)


def test_every_area_is_one_ember_logger() -> None:
    for area in logs.AREAS:
        assert logs.get_logger(area).name == f"ember.{area}"
    with pytest.raises(logs.LogSettingsError, match="unknown log area 'kernels'"):
        logs.get_logger("kernels")


def test_spec_levels_and_set_logs() -> None:
    assert logs.parse_log_spec("output_code,+perf_hints,-aot_graphs") == {
        "output_code": logging.INFO, "perf_hints": logging.DEBUG, "aot_graphs": logging.WARNING,
    }
    logs.configure_from_env({"EMBER_LOGS": "+inductor"})
    assert logs.enabled("inductor", logging.DEBUG)
    logs.set_logs(output_code=True, inductor=False)
    assert logs.enabled("output_code") and not logs.enabled("inductor")


def test_one_stderr_handler_however_often_enabled(capsys: pytest.CaptureFixture[str]) -> None:
    for _ in range(3):
        logs.set_logs(perf_hints=True)
        logs.configure_from_env({"EMBER_LOGS": "perf_hints"})
    logs.get_logger("perf_hints").info("once")
    assert capsys.readouterr().err.count("[ember.perf_hints] once") == 1


def test_debug_folder_convention(tmp_path: Path) -> None:
    assert debug.debug_base_from_env({}) is None
    env = {"EMBER_COMPILE_DEBUG": "1", "EMBER_COMPILE_DEBUG_DIR": str(tmp_path)}
    assert debug.debug_base_from_env(env) == str(tmp_path)
    assert debug.package_folder("inductor", env) == str(tmp_path / "inductor")
    run = debug.run_folder(str(tmp_path))
    assert run == debug.run_folder(str(tmp_path)) and run.parent == tmp_path and run.is_dir()
    gm = torch.fx.symbolic_trace(torch.nn.ReLU())
    assert debug.debug_dir_of(gm) is None
    debug.set_debug_dir(gm, None)
    assert debug.debug_dir_of(gm) is None
    debug.set_debug_dir(gm, tmp_path / "graph_0_backend")
    assert debug.debug_dir_of(gm) == str(tmp_path / "graph_0_backend")
