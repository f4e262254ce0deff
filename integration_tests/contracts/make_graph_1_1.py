"""How the graph format 1.1 golden file in this directory was written (ember-ir 0.1.0).

Format 1.1 added a node's optional ``recompute`` (an activation-checkpoint region number).
Run once, by hand, when ember-ir 0.1.0 was released (2026-11-28). Never rerun it to make a
failing contract test pass: the files are the contract, and every later reader must load
them.

    .venv/bin/python integration_tests/contracts/make_graph_1_1.py
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file
from torch.fx.experimental.proxy_tensor import make_fx

from ember.ir import from_fx, save

HERE = Path(__file__).parent


def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.nn.functional.gelu(x @ w)  # the checkpointed region: recomputed in the backward
    return (h * torch.sigmoid(h)).sum(-1)


def main() -> None:
    torch.manual_seed(11)
    x, w = torch.randn(5, 4), torch.randn(4, 6)
    gm = make_fx(block, tracing_mode="symbolic")(x, w)
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in (torch.ops.aten.mm.default, torch.ops.aten.gelu.default):
            node.meta["recompute"] = 1
    save(from_fx(gm), HERE / "graph_aten_1.1")
    save_file({"x": x, "w": w, "out": block(x, w)}, str(HERE / "graph_aten_1.1" / "io.safetensors"))


if __name__ == "__main__":
    main()
