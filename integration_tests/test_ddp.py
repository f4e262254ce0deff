"""DistributedDataParallel on two gloo processes: compiled DDP against eager DDP.

Both ways round (``compile(DDP(model))`` and ``DDP(compile(model))``) must give
eager DDP's losses and parameters after several SGD steps, with the captured
forward split into one graph per gradient bucket (the model has four
bucket-sized layers at the worker's ``bucket_cap_mb``).
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

WORKER = Path(__file__).parent / "distributed" / "ddp_worker.py"


def run_worker(tmp_path: Path, scenario: str, backend: str = "aot_eager") -> dict[str, Any]:
    return launch.run_worker(WORKER, tmp_path, [scenario, backend], out_name=f"{scenario}.json", one_thread=False)


@pytest.mark.parametrize("scenario", ["outer", "inner"])
def test_compiled_ddp_matches_eager_ddp(tmp_path: Path, scenario: str) -> None:
    result = run_worker(tmp_path, scenario)
    assert result["compiled_losses"] == result["eager_losses"]
    assert result["max_param_diff"] == 0.0
    # 4 Linear(64, 64) + Linear(64, 1), one bucket-sized layer per piece; the
    # small last layer shares the last piece: 4 graphs, parameters split 2/2/2/4
    assert result["graphs"] == 4
    assert result["params_per_graph"] == [2, 2, 2, 4]


@pytest.mark.slow
def test_compiled_ddp_with_inductor_matches_eager_ddp(tmp_path: Path) -> None:
    result = run_worker(tmp_path, "outer", backend="inductor")
    for got, want in zip(result["compiled_losses"], result["eager_losses"], strict=True):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert result["max_param_diff"] < 1e-5
    assert result["graphs"] == 4


def test_fullgraph_with_ddp_says_why(tmp_path: Path) -> None:
    error = run_worker(tmp_path, "fullgraph")["error"]
    assert error.startswith("Unsupported: ember.dynamo.compile(DistributedDataParallel(...), fullgraph=True)")
    assert "bucket" in error and "DDP(ember.dynamo.compile(model, fullgraph=True))" in error
