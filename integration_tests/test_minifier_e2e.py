"""End to end: a model compiled by ember.dynamo (and through ember.aotgrad) with a
planted backend bug writes a working repro directory.

Both ways in are covered: wrapping a backend by hand with
``ember.minifier.wrap_backend``, and the environment (``EMBER_REPRO_AFTER=dynamo|aot``,
``EMBER_REPRO_LEVEL``, ``EMBER_REPRO_DIR``), where ember.dynamo and ember.aotgrad find
the minifier through the ``ember.repro`` entry point.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import ember.dynamo
from ember.aotgrad import aot_autograd
from ember.minifier import read_dump, wrap_backend

PLANTED = Path(__file__).resolve().parents[1] / "packages" / "minifier" / "tests"
sys.path.insert(0, str(PLANTED))
import minifier_planted as planted  # noqa: E402

aten = torch.ops.aten


class Gated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(self.norm(x)))
        h = h * torch.sigmoid(h) + h.tanh()
        return x + self.b(h)


def _targets(directory: Path) -> list[object]:
    gm = read_dump(directory).gm
    return [n.target for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]


def _repro_runs(directory: Path) -> str:
    proc = subprocess.run([sys.executable, str(directory / "repro.py")], capture_output=True,
                          text=True, cwd=directory, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return proc.stdout


def _call_expecting_planted_bug(compiled: nn.Module, caplog: pytest.LogCaptureFixture,
                                where: Path) -> None:
    """Run ``compiled``: ember.aotgrad may raise the planted error or fall back to eager
    (its policy, not the minifier's); either way the minifier must say where it wrote."""
    x = torch.randn(4, 16, requires_grad=True)
    with caplog.at_level(logging.WARNING, logger="ember.minifier"):
        try:
            compiled(x)
        except NotImplementedError as exc:
            assert "planted bug" in str(exc)
    said = [r.getMessage() for r in caplog.records if r.name == "ember.minifier"]
    assert any(f"into {where}" in line and "python repro.py" in line for line in said), said


def test_after_dynamo_writes_a_working_repro(tmp_path: Path) -> None:
    torch.manual_seed(0)
    backend = wrap_backend(planted.raises_on_torch_sigmoid, after="dynamo", level=2,
                           repro_dir=tmp_path)
    compiled = ember.dynamo.compile(Gated(), backend=backend)
    with pytest.raises(NotImplementedError, match="planted bug") as info:
        compiled(torch.randn(4, 16))
    assert any("minified" in note for note in getattr(info.value, "__notes__", []))
    repro = tmp_path / "dynamo_graph_0" / "minified"
    assert _targets(repro) == [torch.sigmoid]
    assert "REPRODUCED builtins.NotImplementedError at compile time" in _repro_runs(repro)


def test_after_aot_writes_a_working_repro(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    inner = wrap_backend(planted.raises_on_sigmoid, after="aot", level=2, repro_dir=tmp_path)
    compiled = ember.dynamo.compile(Gated(), backend=aot_autograd(inner))
    _call_expecting_planted_bug(compiled, caplog, tmp_path)
    repro = tmp_path / "aot_graph_0" / "minified"
    assert _targets(repro) == [aten.sigmoid.default]
    assert "REPRODUCED builtins.NotImplementedError at compile time" in _repro_runs(repro)


def test_env_after_aot_level_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               caplog: pytest.LogCaptureFixture) -> None:
    # ember.aotgrad finds the hook through the `ember.repro` entry point; nothing is wrapped by hand
    monkeypatch.setenv("EMBER_REPRO_AFTER", "aot")
    monkeypatch.setenv("EMBER_REPRO_LEVEL", "2")
    monkeypatch.setenv("EMBER_REPRO_DIR", str(tmp_path))
    torch.manual_seed(0)
    compiled = ember.dynamo.compile(Gated(), backend=aot_autograd(planted.raises_on_sigmoid))
    _call_expecting_planted_bug(compiled, caplog, tmp_path)
    repro = tmp_path / "aot_graph_0" / "minified"
    assert _targets(repro) == [aten.sigmoid.default]
    assert "REPRODUCED builtins.NotImplementedError at compile time" in _repro_runs(repro)


def test_env_after_dynamo_level_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ember.dynamo finds the hook through the `ember.repro` entry point; nothing is wrapped by hand
    monkeypatch.setenv("EMBER_REPRO_AFTER", "dynamo")
    monkeypatch.setenv("EMBER_REPRO_LEVEL", "2")
    monkeypatch.setenv("EMBER_REPRO_DIR", str(tmp_path))
    torch.manual_seed(0)
    compiled = ember.dynamo.compile(Gated(), backend=planted.raises_on_torch_sigmoid)
    with pytest.raises(NotImplementedError, match="planted bug"):
        compiled(torch.randn(4, 16))
    repro = tmp_path / "dynamo_graph_0" / "minified"
    assert _targets(repro) == [torch.sigmoid]
    assert "REPRODUCED builtins.NotImplementedError at compile time" in _repro_runs(repro)


def test_env_repro_without_minifier_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.dynamo.backends import with_repro_hook

    monkeypatch.setattr("ember.dynamo.backends.entry_points", lambda **kw: [])
    with pytest.warns(UserWarning, match="ember-minifier is not installed"):
        compiler = with_repro_hook(planted.raises_on_torch_sigmoid, {"EMBER_REPRO_AFTER": "dynamo"})
    assert compiler is planted.raises_on_torch_sigmoid
