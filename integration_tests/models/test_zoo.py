"""The transformers model zoo under ember.dynamo, against eager and torch.compile.

For every model in ``zoo.ZOO``, in one process:

- ``torch.compile(model, fullgraph=True)`` (a counting backend) tells whether
  PyTorch captures it whole, and in how many graphs;
- ``ember.dynamo.compile(model, fullgraph=True)`` must then succeed too, with
  no more graphs than torch.compile, and give eager's outputs (and, for the
  training case, eager's loss and gradients);
- ``backend="inductor"`` must match eager on every model.

``CAPTURE_GAPS`` lists the models ember cannot yet capture whole; their test is
a strict xfail, so a model that starts passing must be taken off the list.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import torch

pytest.importorskip("transformers")

import torch._dynamo
import torch._dynamo.testing

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounter, CompileCounterWithBackend

from . import zoo
from .zoo_harness import assert_same, case_param, run, torch_fullgraph_graphs

#: models ember cannot yet compile with fullgraph=True where torch.compile can, and why
CAPTURE_GAPS: dict[str, str] = {}
#: models whose inductor run does not yet match eager (or raises), and why
INDUCTOR_GAPS: dict[str, str] = {}

NAMES = [m.name for m in zoo.ZOO]
SLOW = {m.name for m in zoo.ZOO if m.slow}


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    ed.reset()
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    ed.reset()
    torch._dynamo.reset()


@pytest.mark.parametrize("name", [case_param(n, CAPTURE_GAPS, SLOW) for n in NAMES])
def test_fullgraph_wherever_torch_compile(name: str) -> None:
    case = zoo.build(name)
    want = run(case, case.model)
    torch_graphs = torch_fullgraph_graphs(case)
    if torch_graphs is None:
        pytest.skip("torch.compile(fullgraph=True) fails on this model too")
    cnt = CompileCounter()
    compiled = ed.compile(case.model, backend=cnt, fullgraph=True)
    assert_same(run(case, compiled), want)
    assert cnt.frame_count <= torch_graphs, (cnt.frame_count, torch_graphs)
    assert_same(run(case, compiled), want)  # the cached entry serves the second call


def torch_graphs(case: zoo.ZooCase) -> int:
    """torch.compile's graph count without fullgraph."""
    cnt = torch._dynamo.testing.CompileCounter()
    try:
        run(case, torch.compile(case.model, backend=cnt))
    finally:
        torch._dynamo.reset()
    return cnt.frame_count


#: models torch.compile captures only in pieces (its fullgraph=True fails)
SPLIT = [n for n in NAMES if n in ("longt5",)]


@pytest.mark.parametrize("name", [case_param(n, {}, SLOW) for n in SPLIT])
def test_graphs_where_torch_compile_splits(name: str) -> None:
    """Where torch.compile runs a frame eagerly and captures the frames it calls,
    ember captures them too (never 0 graphs), in no more graphs, matching eager."""
    case = zoo.build(name)
    want = run(case, case.model)
    expected = torch_graphs(case)
    assert expected > 0
    cnt = CompileCounter()
    compiled = ed.compile(case.model, backend=cnt)
    assert_same(run(case, compiled), want)
    assert 0 < cnt.frame_count <= expected, (cnt.frame_count, expected)
    assert_same(run(case, compiled), want)


@pytest.mark.parametrize("name", [case_param(n, INDUCTOR_GAPS, SLOW) for n in NAMES])
def test_inductor_matches_eager(name: str) -> None:
    case = zoo.build(name)
    want = run(case, case.model)
    cnt = CompileCounterWithBackend("inductor")
    assert_same(run(case, ed.compile(case.model, backend=cnt)), want)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_electra_loss_mask_counts_share_one_graph(backend: str) -> None:
    """ElectraForPreTraining's loss keeps the positions whose attention mask is 1
    (``logits.view(...)[active_loss]``): captured whole as torch.compile captures it, with
    eager's loss and gradients, and one graph for every count of padded positions (ADR 0046)."""
    case = zoo.build("electra_train")
    torch_graphs = torch_fullgraph_graphs(case)
    cnt = CompileCounterWithBackend(backend)
    compiled = ed.compile(case.model, backend=cnt, fullgraph=True)
    ids = case.kwargs["input_ids"]
    for padded in (0, 5, 11, 2):
        mask = torch.ones_like(ids)
        mask[:, ids.shape[1] - padded:] = 0
        mask[1, :1] = 0
        case.kwargs["attention_mask"] = mask
        assert_same(run(case, compiled), run(case, case.model))
    assert cnt.frame_count == torch_graphs == 1
