"""Printed IR pinned by golden files (refresh with EMBER_UPDATE_GOLDENS=1 after a deliberate change)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.fx
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx  # tests only

from ember.ir import Guard, GuardKind, GuardSet, Local, encode_value, from_fx, parse_source

GOLDENS = Path(__file__).parent / "goldens"
# Traced graphs (node names, decompositions, module attributes) change between torch releases.
pinned_torch = pytest.mark.skipif(
    not torch.__version__.startswith("2.13"), reason="printed graphs are pinned on torch 2.13"
)


def check_golden(name: str, text: str) -> None:
    path = GOLDENS / name
    if os.environ.get("EMBER_UPDATE_GOLDENS") == "1":
        path.write_text(text + "\n")
    assert path.exists(), f"missing golden {path}; run with EMBER_UPDATE_GOLDENS=1 to create it"
    assert text + "\n" == path.read_text(), f"printed IR differs from {path}"


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        return self.fc(y), y[:, ::2] * 0.5


@pinned_torch
def test_torch_level_graph_printout() -> None:
    torch.manual_seed(0)
    ir = from_fx(torch.fx.symbolic_trace(Block().eval()), [torch.randn(2, 2, 6, 6)])
    check_golden("block_torch.expected", str(ir))


@pinned_torch
def test_aten_level_symbolic_graph_printout() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x @ w, dim=-1).view(-1)[: x.shape[0] * 2]

    gm = make_fx(f, tracing_mode="symbolic")(torch.randn(5, 3), torch.randn(3, 4))
    text = str(from_fx(gm))
    # Symbol names come from torch's tracer; pin the structure with canonical names.
    for i, sym in enumerate(dict.fromkeys(s for s in _symbols(text))):
        text = text.replace(sym, f"S{i}")
    check_golden("softmax_aten.expected", text)


def _symbols(text: str) -> list[str]:
    import re

    return re.findall(r"\bs\d+\b", text)


def test_guard_set_printout() -> None:
    gs = GuardSet(
        (
            Guard(Local("x"), GuardKind.TENSOR_MATCH, {
                "cls": "torch.Tensor", "cls_id": 1, "dtype": "float32", "device": "cpu", "requires_grad": True,
                "dispatch_keys": "DispatchKeySet(CPU)", "ndim": 2, "sizes": [None, 3], "strides": [3, 1],
            }),
            Guard(parse_source("L['self'].layers[0].weight"), GuardKind.NOT_NONE, {}),
            Guard(parse_source("G['cfg'].mode"), GuardKind.EQUALS_MATCH, {"value": encode_value("fast")}),
            Guard(None, GuardKind.SHAPE_EXPR, {"expr": "Ne(s0, 1)"}),
        ),
        ("s0 >= 2",),
    )  # fmt: skip
    check_golden("guards.expected", str(gs))
