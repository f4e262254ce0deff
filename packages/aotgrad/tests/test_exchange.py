"""Forward/backward graphs survive a round trip through ember.ir files."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

import ember.ir as ir
from ember.aotgrad import AotOptions, aot_module, nop_compiler, to_graph_ir


class Seen:
    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        self.graphs.append(gm)
        return gm


def test_training_through_graph_files_matches_eager(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 6 * 6, 5), nn.Dropout(0.2))
    eager = copy.deepcopy(model)
    seen = Seen()
    compiled = aot_module(model, seen, options=AotOptions(exchange_dir=str(tmp_path)))
    x = torch.randn(2, 3, 8, 8)
    torch.manual_seed(1)
    out_c = compiled(x)
    torch.manual_seed(1)
    out_e = eager(x)
    torch.testing.assert_close(out_c, out_e)
    out_c.square().sum().backward()
    out_e.square().sum().backward()
    for pc, pe in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(pc.grad, pe.grad)
    torch.testing.assert_close(model[1].running_mean, eager[1].running_mean)
    dirs = sorted(p.name.split("_")[0] for p in tmp_path.iterdir())
    assert dirs == ["backward", "forward"]
    for d in tmp_path.iterdir():
        assert (d / ir.GRAPH_FILE).exists()
        assert ir.load(d).dialect == "aten"
    assert len(seen.graphs) == 2


def test_to_graph_ir_is_aten_dialect_with_tensor_metadata() -> None:
    compiled = aot_module(nn.Linear(3, 2), nop_compiler)
    compiled(torch.randn(4, 3))
    part = compiled._compiled.last_partition
    assert part is not None
    g = to_graph_ir(part.backward)
    assert g.dialect == "aten"
    text = ir.dumps(g)
    assert "aten::mm" in text and "tangents_1" in text


def test_compile_debug_dir_gets_every_graph(tmp_path: Path) -> None:
    from ember.aotgrad import AotOptions, aot_function
    from ember.aotgrad.debug import debug_dir_from_env

    assert debug_dir_from_env({"EMBER_COMPILE_DEBUG": "0"}) is None
    base = debug_dir_from_env({"EMBER_COMPILE_DEBUG": "1", "EMBER_COMPILE_DEBUG_DIR": str(tmp_path)})
    assert base == str(tmp_path / "aot")
    f = aot_function(lambda x: x.sin(), nop_compiler, options=AotOptions(debug_dir=base))
    f(torch.randn(3, requires_grad=True))
    with torch.no_grad():
        f(torch.randn(3, requires_grad=True))
    folders = sorted((tmp_path / "aot").iterdir())
    assert len(folders) == 2
    files = {p.name for folder in folders for p in folder.iterdir()}
    assert {"joint.txt", "forward.txt", "backward.txt", "forward", "backward",
            "inference.txt", "inference"} <= files
    assert "errors.txt" not in files
    assert ir.load(folders[0] / "backward").dialect == "aten"
