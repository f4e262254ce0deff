"""Tensor parallelism (``parallelize_module`` with ``ColwiseParallel``/``RowwiseParallel``)
on two gloo CPU processes: ember against eager DTensor TP (issue 35, ADR 0069).

The model (``distributed/tp_worker.py``) is compiled whole with ``fullgraph=True``: one
graph over DTensors per rank (the parallel styles' hooks are nodes of it), which
ember.aotgrad desugars into a forward and a backward graph over the local shards, the
all-reduces of the row-parallel outputs (forward) and of the column-parallel inputs'
gradients (backward) among their nodes as ``_c10d_functional`` calls. Training equals
eager TP's exactly on the ``eager`` and ``aot_eager`` backends (ATen runs the graphs as
eager runs the ops), and to rounding with inductor's kernels. Also: a forward calling
DTensor's API itself (an all-gather node), sequence parallelism (all-gathers and
reduce-scatters), batches of other sizes after training (one symbolic graph more), and
FSDP2 + TP on a 2x2 mesh of four processes.
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

WORKER = Path(__file__).parent / "distributed" / "tp_worker.py"
ALL_REDUCE = ["_c10d_functional.all_reduce.default", "_c10d_functional.wait_tensor.default"]


def run_worker(tmp_path: Path, *args: str) -> dict[str, Any]:
    return launch.run_worker(WORKER, tmp_path, args[:1], args[1:], out_name="tp.json")


def test_tp_model_one_graph_with_the_eager_backend(tmp_path: Path) -> None:
    result = run_worker(tmp_path, "eager")
    assert result["compiled_losses"] == result["eager_losses"]
    assert result["max_param_diff"] == 0.0
    assert result["sharded_params"] == 8  # the up and down projections' weights and biases
    assert result["graphs_per_rank"] == [[1, 0, 0]] * 2


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_tp_model_forward_and_backward_graphs_with_collectives(tmp_path: Path, optimizer: str) -> None:
    result = run_worker(tmp_path, "aot_eager", optimizer, *(("sizes",) if optimizer == "adam" else ()))
    assert result["compiled_losses"] == result["eager_losses"]
    assert result["max_param_diff"] == 0.0
    if optimizer == "adam":
        # then three other batch sizes: one more graph (a symbolic batch size), as eager
        assert result["other_sizes"] == [0.0] * 3
        assert result["graphs_per_rank"] == [[2, 2, 2]] * 2
        return
    # per rank: one dynamo graph, one aotgrad forward, one backward
    assert result["graphs_per_rank"] == [[1, 1, 1]] * 2
    # two blocks: the row-parallel outputs all-reduced in the forward, the
    # column-parallel inputs' gradients in the backward
    assert result["collectives"] == {"forward": ALL_REDUCE * 2, "backward": ALL_REDUCE * 2}


def test_dtensor_api_in_the_forward_all_gathers_in_the_graph(tmp_path: Path) -> None:
    """``DTensor.from_local(x, mesh, [Shard(0)]).redistribute(mesh, [Replicate()])`` in the
    model's own forward: an all-gather node in the forward graph, the rest as above."""
    result = run_worker(tmp_path, "aot_eager", "gather")
    assert result["compiled_losses"] == result["eager_losses"]
    assert result["max_param_diff"] == 0.0
    assert result["graphs_per_rank"] == [[1, 1, 1]] * 2
    gather = ["_c10d_functional.all_gather_into_tensor.default", "_c10d_functional.wait_tensor.default"]
    assert result["collectives"]["forward"] == gather + ALL_REDUCE * 2
    assert result["collectives"]["backward"] == ALL_REDUCE * 2


def test_sequence_parallel_all_gathers_and_reduce_scatters_in_the_graphs(tmp_path: Path) -> None:
    """torchtitan's plan with sequence parallelism (the norm ``SequenceParallel``, the
    activations sharded on the sequence between blocks): the all-gather before ``up`` and
    the reduce-scatter after ``down`` in both graphs, and in the backward the all-reduce of
    each replicated norm parameter's gradient."""
    result = run_worker(tmp_path, "aot_eager", "sp")
    assert result["compiled_losses"] == result["eager_losses"]
    assert result["max_param_diff"] == 0.0
    assert result["graphs_per_rank"] == [[1, 1, 1]] * 2
    wait = "_c10d_functional.wait_tensor.default"
    gather_scatter = ["_c10d_functional.all_gather_into_tensor.default", wait,
                      "_c10d_functional.reduce_scatter_tensor.default", wait] * 2
    assert result["collectives"]["forward"] == gather_scatter
    assert result["collectives"]["backward"] == gather_scatter + ALL_REDUCE * 4


def test_fsdp2_and_tp_on_a_2x2_mesh_of_four_processes(tmp_path: Path) -> None:
    """torchtitan's 2-d parallelism: each block tensor-parallel over one mesh dimension and
    FSDP2-sharded over the other. FSDP2's hooks run eagerly (ADR 0057), each block's
    forward is a frame of its own, and inside it the TP DTensors are captured and
    desugared (ADR 0069): per rank one graph, forward and backward per block, and one for
    the head; training equals eager FSDP2+TP."""
    result = run_worker(tmp_path, "aot_eager", "adam", "fsdp")
    assert result["compiled_losses"] == result["eager_losses"]
    assert result["max_param_diff"] == 0.0
    assert result["graphs_per_rank"] == [[3, 3, 3]] * 4


@pytest.mark.slow  # C++ kernels built for a forward and a backward graph: a minute on a loaded 2-core machine
def test_tp_model_with_inductor(tmp_path: Path) -> None:
    result = run_worker(tmp_path, "inductor", "adam")
    for got, want in zip(result["compiled_losses"], result["eager_losses"], strict=True):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert result["max_param_diff"] < 1e-5
    assert result["graphs_per_rank"] == [[1, 1, 1]] * 2
    assert result["collectives"] == {"forward": ALL_REDUCE * 2, "backward": ALL_REDUCE * 2}
