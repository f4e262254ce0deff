"""dynamo -> aotgrad -> files -> compiler: graphs cross the stage boundary on disk."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

import ember.dynamo
import ember.ir as ir
from ember.aotgrad import AotOptions, aot_autograd, nop_compiler


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(16)
        self.fc1 = nn.Linear(16, 64)
        self.fc2 = nn.Linear(64, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


def test_graphs_saved_between_stages_train_like_eager(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Block()
    eager = copy.deepcopy(model)
    seen: list[torch.fx.GraphModule] = []

    def compiler(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        seen.append(gm)
        return nop_compiler(gm, example_inputs)

    backend = aot_autograd(fw_compiler=compiler,
                           options=AotOptions(exchange_dir=str(tmp_path), fallback_to_eager=False))
    compiled = ember.dynamo.compile(model, backend=backend)
    opt_c = torch.optim.Adam(model.parameters(), lr=1e-2)
    opt_e = torch.optim.Adam(eager.parameters(), lr=1e-2)
    x = torch.randn(4, 8, 16)
    for _ in range(5):
        lc = compiled(x).square().mean()
        le = eager(x).square().mean()
        lc.backward()
        le.backward()
        torch.testing.assert_close(lc, le)
        for o in (opt_c, opt_e):
            o.step()
            o.zero_grad()
    saved = sorted(tmp_path.iterdir())
    assert [p.name.split("_")[0] for p in saved] == ["backward", "forward"]
    assert len(seen) == 2
    # each file is a self-contained ATen graph: it loads and runs on its own
    forward = ir.to_fx(ir.load(next(p for p in saved if p.name.startswith("forward"))))
    params = [p.detach() for p in model.parameters()]
    placeholders = [n for n in forward.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == len(params) + 1
    out = forward(*params, x)
    torch.testing.assert_close(out[0], model(x))
