"""FSDP2 (``torch.distributed.fsdp.fully_shard``) on two gloo CPU processes: ember
against eager FSDP2 (issues 18, 35).

torch 2.13 runs FSDP2 on CPU with gloo (all-gather and reduce-scatter of the
shards). The model is sharded as torchtitan does (every block, then the root),
and compiled in each spelling users write (``distributed/fsdp_worker.py``): the
whole sharded model, the block list in place, each block wrapped after sharding,
each block compiled before sharding. FSDP2's hooks run eagerly around each
block's compiled ``forward`` (ADR 0057), so every block's forward and backward is
a compiled graph on every rank, and training equals eager FSDP2 exactly (the
``aot_eager`` backend: aotgrad's graphs run by ATen, as eager runs them).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch.distributed

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with gloo is not built",
)

sys.path.insert(0, str(Path(__file__).parent / "distributed"))
import launch  # noqa: E402  (integration_tests/distributed/launch.py)

WORKER = Path(__file__).parent / "distributed" / "fsdp_worker.py"
BLOCKS = 3  # fsdp_worker.Net


def run_worker(tmp_path: Path, *args: str) -> dict[str, Any]:
    return launch.run_worker(WORKER, tmp_path, args[:2], args[2:], out_name="fsdp.json")


def assert_trains_like_eager(result: dict[str, Any]) -> None:
    assert result["compiled_losses"] == result["eager_losses"]
    assert result["max_param_diff"] == 0.0


def test_whole_sharded_model_compiles_every_block(tmp_path: Path) -> None:
    """``compile(model)``: the sharded blocks are breaks (their hooks run eagerly), and
    each block's forward is its own compiled frame; so is the head after them."""
    result = run_worker(tmp_path, "whole", "aot_eager")
    assert_trains_like_eager(result)
    # per rank: [dynamo graphs, aotgrad forward graphs, aotgrad backward graphs]
    assert result["graphs_per_rank"] == [[BLOCKS + 1] * 3] * 2
    # three block forwards (input x), then the root's head (the resumed loop's output)
    assert result["graph_inputs"][:BLOCKS] == [["x"]] * BLOCKS
    assert "forward hooks taking keyword arguments" in result["break_reasons"][0]


@pytest.mark.parametrize("spelling", ["regions", "per_block", "before"])
def test_blocks_compiled_one_by_one(tmp_path: Path, spelling: str) -> None:
    """``compile(model.blocks)``, ``model.blocks[i] = compile(block)`` after sharding,
    and each block compiled before ``fully_shard`` (torchtitan's order): the block's
    forward compiled, FSDP2's hooks around it; the root's head runs eagerly."""
    result = run_worker(tmp_path, spelling, "aot_eager")
    assert_trains_like_eager(result)
    assert result["graphs_per_rank"] == [[BLOCKS] * 3] * 2


def test_mixed_precision_and_checkpointed_blocks(tmp_path: Path) -> None:
    """``MixedPrecisionPolicy(param_dtype=bfloat16)`` (the blocks compute in bf16 on the
    all-gathered bf16 parameters) with each block's forward under
    ``torch.utils.checkpoint``: still one forward and one backward graph per block."""
    result = run_worker(tmp_path, "whole", "aot_eager", "mp", "ac")
    assert_trains_like_eager(result)
    assert result["graphs_per_rank"] == [[BLOCKS + 1] * 3] * 2


def test_distributed_checkpoint_restart_continues(tmp_path: Path) -> None:
    """Save with ``torch.distributed.checkpoint`` after the steps, load into a fresh
    sharded, compiled model and optimizer: the next losses are eager FSDP2's."""
    result = run_worker(tmp_path, "whole", "aot_eager", f"dcp={tmp_path / 'dcp'}")
    assert_trains_like_eager(result)
    assert result["graphs_per_rank"] == [[BLOCKS + 1] * 3] * 2  # before the restart
    assert result["eager_restart_losses"] == result["eager_continued_losses"]
    assert result["compiled_restart_losses"] == result["eager_restart_losses"]


@pytest.mark.slow  # C++ kernels built for four graphs per rank: minutes on a loaded 2-core machine
def test_whole_sharded_model_with_inductor(tmp_path: Path) -> None:
    result = run_worker(tmp_path, "whole", "inductor", "mp")
    for got, want in zip(result["compiled_losses"], result["eager_losses"], strict=True):
        assert got == pytest.approx(want, rel=2e-2, abs=1e-3)  # bf16 parameters and activations
    assert result["graphs_per_rank"] == [[BLOCKS + 1] * 3] * 2
