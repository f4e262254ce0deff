"""The ATen trace cache of the inference path without ember-aotgrad: a second trace of the same
torch-level graph is read from disk (no fake tensors), bound to the live weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ember.inductor import aten_cache


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.ln(self.fc(x))) * 2


def _out(gm: torch.fx.GraphModule, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out = gm(x)
    return out[0] if isinstance(out, (tuple, list)) else out


def test_second_trace_is_read_from_disk_with_the_live_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    first = torch.fx.symbolic_trace(Net())
    traced = aten_cache.cached_trace_to_aten(first, [x], str(tmp_path))
    torch.testing.assert_close(_out(traced, x), _out(first, x))
    assert list((tmp_path / "aten").rglob("*.json"))

    def fail(*args: Any) -> Any:
        raise AssertionError("traced again")

    monkeypatch.setattr(aten_cache, "trace_to_aten", fail)
    torch.manual_seed(1)
    second = torch.fx.symbolic_trace(Net())  # same shapes, other weights
    loaded = aten_cache.cached_trace_to_aten(second, [x], str(tmp_path))
    torch.testing.assert_close(_out(loaded, x), _out(second, x))


def test_a_damaged_entry_is_traced_again_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    x = torch.randn(3, 8)
    gm = torch.fx.symbolic_trace(Net())
    aten_cache.cached_trace_to_aten(gm, [x], str(tmp_path))
    (entry,) = (tmp_path / "aten").rglob("*.json")
    entry.write_bytes(entry.read_bytes()[:-20])
    again = aten_cache.cached_trace_to_aten(gm, [x], str(tmp_path))
    torch.testing.assert_close(_out(again, x), _out(gm, x))
    assert "corrupted or unreadable" in caplog.text
