"""Activation-checkpointing regions (``meta["recompute"]`` on torch-level nodes): their
values are recomputed in backward, not saved, by both partitioners; gradients are eager's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.fx as fx
from torch import nn

from ember import ir
from ember.aotgrad import default_partition, min_cut_rematerialization_partition, nop_compiler
from ember.aotgrad.api import aot_module
from ember.aotgrad.partition import Partition


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(16, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc1(x))
        h = torch.relu(self.fc2(h))  # the checkpointed part: fc2 and relu
        return self.fc3(h).square().mean()


def traced(checkpointed: bool) -> fx.GraphModule:
    gm = fx.symbolic_trace(Block())
    for node in gm.graph.nodes:
        if checkpointed and node.name in ("fc2", "relu"):
            node.meta["recompute"] = 1
    return gm


def partition_of(gm: fx.GraphModule, partition_fn, x: torch.Tensor) -> tuple[Partition, list[torch.Tensor]]:
    compiled = aot_module(gm, nop_compiler, nop_compiler, partition_fn)
    compiled(x).backward()
    part = compiled._compiled.last_partition
    assert part is not None
    grads = [p.grad.clone() for p in gm.parameters()]
    return part, grads


def saved_numel(part: Partition) -> int:
    nodes = {n.name: n for n in part.backward.graph.nodes if n.op == "placeholder"}
    return sum(nodes[name].meta["val"].numel() for name in part.saved)


@pytest.mark.parametrize("partition_fn", [default_partition, min_cut_rematerialization_partition])
def test_a_region_is_recomputed_not_saved(partition_fn) -> None:
    x = torch.randn(32, 16)
    eager = Block()
    eager(x).backward()
    plain, _ = partition_of(traced(False), partition_fn, x)
    part, grads = partition_of(traced(True), partition_fn, x)
    assert saved_numel(part) < saved_numel(plain)
    # nothing the region computes is saved; the backward recomputes its matmul
    forward = {n.name: n for n in part.forward.graph.nodes}
    assert not [name for name in part.saved if forward[name].meta.get("recompute")]
    mms = [n for n in part.backward.graph.nodes if n.target in (torch.ops.aten.addmm.default,
                                                               torch.ops.aten.mm.default)]
    assert any(n.meta.get("recompute") == 1 for n in mms)
    for got, want in zip(grads, [p.grad for p in eager.parameters()], strict=True):
        torch.testing.assert_close(got, want)


def test_a_random_op_in_a_region_is_saved_not_redrawn() -> None:
    class Dropped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return nn.functional.dropout(self.fc(x), 0.5, training=True).sum()

    gm = fx.symbolic_trace(Dropped())
    for node in gm.graph.nodes:
        if node.op in ("call_module", "call_function"):
            node.meta["recompute"] = 1
    compiled = aot_module(gm, nop_compiler, nop_compiler)
    x = torch.randn(4, 8)
    torch.manual_seed(5)
    compiled(x).backward()
    part = compiled._compiled.last_partition
    assert part is not None
    assert not [n for n in part.backward.graph.nodes
                if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                and torch.Tag.nondeterministic_seeded in n.target.tags]
    # eager's gradient with the same draw
    eager = Dropped()
    eager.load_state_dict(gm.state_dict())
    torch.manual_seed(5)
    eager(x).backward()
    torch.testing.assert_close(gm.fc.weight.grad, eager.fc.weight.grad)


def test_the_region_mark_survives_the_graph_ir(tmp_path: Path) -> None:
    gm = traced(True)
    ir.save(ir.from_fx(gm, [torch.randn(2, 16)]), tmp_path / "g")
    loaded = ir.load(tmp_path / "g")
    assert loaded.version == ir.GRAPH_VERSION and loaded.node("fc2").recompute == 1
    lines = {line.split()[0]: line for line in str(loaded).splitlines()[1:] if line.startswith("  %")}
    assert lines["%fc2:"].endswith("# recompute 1") and "recompute" not in lines["%fc1:"]
    back = ir.to_fx(loaded)
    marks = {n.name: n.meta.get("recompute") for n in back.graph.nodes}
    assert marks["fc2"] == 1 and marks["relu"] == 1 and marks["fc1"] is None
    # and the saved graph trains with the region recomputed, as the live one does
    x = torch.randn(32, 16)
    part, _ = partition_of(back, min_cut_rematerialization_partition, x)
    plain, _ = partition_of(traced(False), min_cut_rematerialization_partition, x)
    assert saved_numel(part) < saved_numel(plain)


def test_a_bad_region_mark_is_a_format_error() -> None:
    text = ir.dumps(ir.from_fx(fx.symbolic_trace(nn.Tanh()), [torch.randn(2)]))
    bad = text.replace('"op": "call_function"', '"op": "call_function", "recompute": 0', 1)
    assert bad != text
    with pytest.raises(ir.FormatError, match="recompute"):
        ir.loads(bad)
