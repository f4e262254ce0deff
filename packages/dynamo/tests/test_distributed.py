"""Splitting a captured graph at DDP gradient-bucket boundaries (one process, no DDP).

The two-process DDP tests are in ``integration_tests/test_ddp.py``.
"""

from __future__ import annotations

import torch
from torch import nn

import ember.dynamo
from ember.dynamo.distributed import split_at_ddp_buckets, split_for_ddp
from ember.dynamo.testing import CompileCounter


def layers(n: int, width: int = 32) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(n) for m in (nn.Linear(width, width), nn.ReLU())])


def captured(model: nn.Module, x: torch.Tensor) -> torch.fx.GraphModule:
    counter = CompileCounter()
    ember.dynamo.compile(model, backend=counter)(x)
    assert counter.frame_count == 1
    return counter.graphs[0]


def test_split_pieces_hold_one_bucket_each_and_compute_the_same() -> None:
    model, x = layers(3), torch.randn(4, 32)
    gm = captured(model, x)
    layer_bytes = (32 * 32 + 32) * 4
    split, count = split_for_ddp(gm, layer_bytes)
    assert count == 3
    pieces = [m for name, m in split.named_children() if name.startswith("submod_")]
    assert [len(list(p.parameters())) for p in pieces] == [2, 2, 2]
    torch.testing.assert_close(split(x)[0], model(x), rtol=0, atol=0)


def test_a_cap_larger_than_the_model_keeps_one_graph() -> None:
    model, x = layers(3), torch.randn(4, 32)
    split, count = split_for_ddp(captured(model, x), 1 << 30)
    assert count == 1
    assert not any(name.startswith("submod_") for name, _ in split.named_children())


def test_graphs_outside_a_ddp_forward_are_not_split() -> None:
    counter = CompileCounter()
    model, x = layers(3), torch.randn(4, 32)
    compiled = ember.dynamo.compile(model, backend=split_at_ddp_buckets(counter, fullgraph=False))
    torch.testing.assert_close(compiled(x), model(x))
    assert counter.frame_count == 1
