"""How the format 1.0 golden files in this directory were written (ember-ir 0.1.0).

Run once, by hand, when format 1.0 was released. Never rerun it to make a failing
contract test pass: the files are the contract, and every later reader must load them.
A new format version gets its own script and its own files beside these.

    .venv/bin/python integration_tests/contracts/make_format_1_0.py
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.fx
from safetensors.torch import save_file
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

from ember.ir import Guard, GuardKind, GuardSet, Local, encode_value, from_fx, parse_source, save

HERE = Path(__file__).parent


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 2)
        self.register_buffer("scale", torch.tensor([0.5, 2.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        y = y.mean(dim=(2, 3))
        return self.fc(y)[:, :2] * self.scale + torch.nn.functional.gelu(y).sum(-1, keepdim=True)


def aten_fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = torch.relu(x @ w) * 2.0
    return h.sum(dim=0), h.view(-1)[: x.shape[0]]


def main() -> None:
    torch.manual_seed(1234)
    net = Net().eval()
    x = torch.randn(2, 3, 5, 5)
    gm = torch.fx.symbolic_trace(net)
    save(from_fx(gm, [x]), HERE / "graph_torch_1.0")
    save_file({"input": x, "output": net(x).detach()}, str(HERE / "graph_torch_1.0" / "io.safetensors"))

    xa, wa = torch.randn(6, 4), torch.randn(4, 3)
    agm = make_fx(aten_fn, tracing_mode="symbolic")(xa, wa)
    save(from_fx(agm), HERE / "graph_aten_1.0")
    out0, out1 = aten_fn(xa, wa)
    save_file({"x": xa, "w": wa, "out0": out0, "out1": out1}, str(HERE / "graph_aten_1.0" / "io.safetensors"))

    guards = GuardSet(
        guards=(
            Guard(Local("x"), GuardKind.TENSOR_MATCH, {
                "cls": "torch.Tensor", "cls_id": 140000000000001, "dtype": "float32", "device": "cpu",
                "requires_grad": False, "dispatch_keys": "DispatchKeySet(CPU, ADInplaceOrView, AutogradCPU)",
                "ndim": 2, "sizes": [None, 8], "strides": [8, 1],
            }),
            Guard(Local("n"), GuardKind.TYPE_MATCH, {"type": "builtins.int", "type_id": 140000000000002}),
            Guard(Local("n"), GuardKind.CONSTANT_MATCH, {"value": encode_value(3)}),
            Guard(parse_source("L['cfg']['mode']"), GuardKind.EQUALS_MATCH, {"value": encode_value(("fast", 0.5, None))}),
            Guard(parse_source("G['torch'].nn"), GuardKind.ID_MATCH, {"id": 140000000000003, "repr": "<module 'torch.nn'>"}),
            Guard(parse_source("L['self'].layers"), GuardKind.LENGTH_MATCH, {"length": 4}),
            Guard(Local("d"), GuardKind.DICT_KEYS, {"keys": [encode_value("a"), encode_value(1)]}),
            Guard(Local("self"), GuardKind.NN_MODULE, {"id": 140000000000004, "type": "torch.nn.modules.linear.Linear"}),
            Guard(parse_source("G['torch'].cos"), GuardKind.FUNCTION_MATCH, {"id": 140000000000005, "qualname": "torch.cos"}),
            Guard(parse_source("L['self'].layers[2].bias"), GuardKind.NOT_NONE, {}),
            Guard(parse_source("L['x'].size()[0]"), GuardKind.CONSTANT_MATCH, {"value": encode_value(8)}),
            Guard(parse_source("L['x'].stride()[1]"), GuardKind.EQUALS_MATCH, {"value": encode_value(1)}),
            Guard(None, GuardKind.SHAPE_EXPR, {"expr": "Eq(Mod(s0*s1, 8), 0)"}),
            Guard(None, GuardKind.GLOBAL_STATE, {
                "grad_enabled": True, "default_dtype": "float32", "autocast_cpu": False,
                "autocast_cuda": False, "deterministic": False,
            }),
        ),
        shape_relations=("s0 >= 2", "Ne(s1, 1)"),
    )  # fmt: skip
    (HERE / "guards_1.0.json").write_text(guards.dumps())


if __name__ == "__main__":
    main()
