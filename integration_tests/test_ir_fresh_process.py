"""A graph saved by one process loads and runs in a fresh one that imports only torch and ember.ir."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.fx
from safetensors.torch import load_file, save_file
from torch import nn

from ember.ir import from_fx, save

LOADER = textwrap.dedent(
    """
    import sys
    import ember.ir
    from safetensors.torch import load_file, save_file
    directory = sys.argv[1]
    gm = ember.ir.to_fx(ember.ir.load(directory))
    x = load_file(directory + "/input.safetensors")["x"]
    save_file({"y": gm(x).contiguous()}, directory + "/output.safetensors")
    """
)


@pytest.mark.slow
def test_transformer_layer_runs_in_a_fresh_process(tmp_path: Path) -> None:
    torch.manual_seed(0)
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
        concrete = {"src_mask": None, "src_key_padding_mask": None, "is_causal": False}
        gm = torch.fx.symbolic_trace(layer, concrete_args=concrete)
        x = torch.randn(2, 7, 32)
        expected = layer(x)
        directory = save(from_fx(gm, [x]), tmp_path / "layer")
    finally:
        torch.backends.mha.set_fastpath_enabled(before)
    save_file({"x": x}, str(directory / "input.safetensors"))
    result = subprocess.run(
        [sys.executable, "-c", LOADER, str(directory)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    got = load_file(str(directory / "output.safetensors"))["y"]
    torch.testing.assert_close(got, expected.detach())
