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


def test_each_graph_names_its_backend_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Backends (aotgrad, inductor) learn where to write from the graph they are given."""
    from ember.ir.debug import debug_dir_of

    monkeypatch.setenv("EMBER_COMPILE_DEBUG", "1")
    monkeypatch.setenv("EMBER_COMPILE_DEBUG_DIR", str(tmp_path))
    seen: list[str | None] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        seen.append(debug_dir_of(gm))
        return gm.forward

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        print("break")
        return y.cos()

    ember.dynamo.compile(f, backend=backend)(torch.randn(3))
    assert len(seen) == 2 and all(s is not None for s in seen)
    folders = [Path(s) for s in seen if s is not None]
    assert [p.name for p in folders] == ["graph_0_backend", "graph_0_backend"]
    assert folders[0].parent != folders[1].parent  # the frame, then its resume function
    assert all(p.parent.parent.name.startswith("run_") for p in folders)
    assert all((p.parent / "graph_0.txt").exists() for p in folders)
