"""What decides whether a graph is recorded into CUDA graphs, tested on CPU graphs.

The recording and replaying themselves need a GPU: ``test_cuda.py``.
"""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ember.inductor.cudagraphs import mutated_inputs, refusal


def test_mutated_inputs_follow_views_to_the_input() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        x[1:].mul_(2)  # through a view
        z.add_(1)
        return x + y

    gm = make_fx(fn)(torch.randn(4), torch.randn(4), torch.randn(4))
    assert mutated_inputs(gm) == {0, 2}


def test_a_pure_graph_mutates_nothing() -> None:
    gm = make_fx(lambda x, y: (x * y).sum())(torch.randn(3), torch.randn(3))
    assert mutated_inputs(gm) == set()


def test_refusal_names_the_reason() -> None:
    pure = make_fx(lambda x: x * 2)(torch.randn(3))
    assert refusal(pure, symbolic=False, index_checks=False) in (
        None,
        "Triton's interpreter runs its kernels on the host (TRITON_INTERPRET=1)",
    )
    assert "symbolic sizes" in str(refusal(pure, symbolic=True, index_checks=False))
    assert "check gathered indices on the host" in str(refusal(pure, symbolic=False, index_checks=True))



def test_masks_and_data_dependent_ops_are_host_syncs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    x = torch.randn(5)
    for fn in (
        lambda x: x[x > 0].sum(),  # a mask index
        lambda x: torch.nonzero(x),
    ):
        gm = make_fx(fn)(x)
        why = refusal(gm, symbolic=False, index_checks=False)
        assert why is not None and "reads values back to the host" in why, gm.code
    scalar = torch.fx.symbolic_trace(lambda x: x * torch.ops.aten._local_scalar_dense.default(x.sum()))
    assert "reads values back" in str(refusal(scalar, symbolic=False, index_checks=False))
    gathered = make_fx(lambda x: x[torch.tensor([0, 2])] * 2)(x)  # integer indices: no sync
    assert refusal(gathered, symbolic=False, index_checks=False) is None
