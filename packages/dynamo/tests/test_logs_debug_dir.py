"""EMBER_COMPILE_DEBUG=1 writes one folder per compiled frame."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import ember.dynamo
from ember.dynamo import debug_dir


@pytest.fixture(autouse=True)
def _reset() -> Any:
    yield
    ember.dynamo.reset()


def test_env_parsing() -> None:
    assert debug_dir.debug_dir_from_env({}) is None
    assert debug_dir.debug_dir_from_env({"EMBER_COMPILE_DEBUG": "0"}) is None
    assert debug_dir.debug_dir_from_env({"EMBER_COMPILE_DEBUG": "1", "EMBER_COMPILE_DEBUG_DIR": "/x"}) == "/x"


def test_debug_dir_has_bytecode_guards_and_graph_ir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_COMPILE_DEBUG", "1")
    monkeypatch.setenv("EMBER_COMPILE_DEBUG_DIR", str(tmp_path))
    lin = torch.nn.Linear(3, 2)

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(lin(x)) + 1

    compiled = ember.dynamo.compile(f, backend="eager")
    x = torch.randn(4, 3)
    torch.testing.assert_close(compiled(x), f(x))
    frames = list(tmp_path.glob("run_*/frame_*_f"))
    assert len(frames) == 1
    folder = frames[0]
    assert "LOAD_GLOBAL" in (folder / "original_bytecode.txt").read_text()
    assert "__compiled_fn" in (folder / "transformed_bytecode.txt").read_text()
    guards = json.loads((folder / "guards.json").read_text())
    assert guards["format"] == "ember.guards"
    assert "def check(L, G):" in (folder / "guards.txt").read_text()
    assert (folder / "graph_0" / "graph.json").exists()
    assert "relu" in (folder / "graph_0.txt").read_text()
    assert not (folder / "errors.txt").exists()
