"""ember.minifier's repro hook wraps aotgrad's graph compilers (EMBER_REPRO_AFTER=aot)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ember.aotgrad import aot_function, nop_compiler


def test_every_aot_graph_is_dumped_at_level_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_REPRO_AFTER", "aot")
    monkeypatch.setenv("EMBER_REPRO_LEVEL", "3")
    monkeypatch.setenv("EMBER_REPRO_DIR", str(tmp_path))
    compiled = aot_function(lambda x: (x.sin() * x).sum(), nop_compiler)
    x = torch.randn(4, 4, requires_grad=True)
    compiled(x).backward()
    torch.testing.assert_close(x.grad, x.detach().sin() + x.detach() * x.detach().cos())
    dumps = sorted(p.name for p in tmp_path.iterdir())
    assert len(dumps) == 2  # the forward and the backward graph
    assert all(list(p.rglob("graph.json")) for p in tmp_path.iterdir())


def test_without_the_setting_compilers_are_not_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EMBER_REPRO_AFTER", raising=False)
    compiled = aot_function(lambda x: x.cos(), nop_compiler)
    assert compiled.fw_compiler is nop_compiler
