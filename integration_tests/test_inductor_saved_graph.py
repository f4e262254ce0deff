"""ember.inductor compiles an ATen graph saved to disk with ember.ir (the contract between stages)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

eir = pytest.importorskip("ember.ir")
inductor = pytest.importorskip("ember.inductor")


def _block(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)
    return torch.nn.functional.gelu(h) * 2, h.amax(-1)


def test_saved_aten_graph_compiles_and_matches(tmp_path: Path) -> None:
    x, w, b = torch.randn(8, 64), torch.randn(64), torch.randn(64)
    gm = make_fx(_block)(x, w, b)
    eir.save(eir.from_fx(gm, [x, w, b]), tmp_path / "graph")
    loaded = eir.load(tmp_path / "graph")
    compiled = inductor.compile_graph(
        loaded,
        [x, w, b],
        inductor.InductorOptions(cache_dir=str(tmp_path / "cache"), fallback_on_error=False),
    )
    assert isinstance(compiled, inductor.CompiledGraph)
    assert compiled.report.kernels == 1 and compiled.report.extern_calls == 0
    for got, want in zip(compiled(x, w, b), _block(x, w, b)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_cli_compiles_saved_graph(tmp_path: Path) -> None:
    x, w = torch.randn(4, 16), torch.randn(16, 8)
    gm = make_fx(lambda x, w: torch.relu(x @ w) + 1)(x, w)
    eir.save(eir.from_fx(gm, [x, w]), tmp_path / "g")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ember.inductor",
            "compile",
            str(tmp_path / "g"),
            "-o",
            str(tmp_path / "out"),
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "1 kernels, 1 extern calls" in proc.stdout
    assert "fallback to ATen: aten::mm x1" in proc.stdout
    assert "matches eager on random inputs: yes" in proc.stdout
    assert (tmp_path / "out" / "output_code.py").exists() and (
        tmp_path / "out" / "kernel0.cpp"
    ).exists()


def test_cli_main_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ember.inductor.__main__ import main

    x = torch.randn(4, 16)
    gm = make_fx(lambda x: (x.sin() * 2).sum(-1))(x)
    eir.save(eir.from_fx(gm, [x]), tmp_path / "g")
    assert main(["compile", str(tmp_path / "g"), "--cache-dir", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert "1 kernels, 0 extern calls" in out and "matches eager on random inputs: yes" in out
