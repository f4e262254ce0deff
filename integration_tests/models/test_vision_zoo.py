"""The vision-and-diffusion zoo under ember.dynamo, against eager and torch.compile.

For every model in ``vision_zoo.ZOO``, as ``test_zoo.py`` does for transformers:

- ``torch.compile(model, fullgraph=True)`` (a counting backend) tells whether PyTorch
  captures it whole, and in how many graphs;
- ``ember.dynamo.compile(model, fullgraph=True)`` must then succeed too, with no more
  graphs than torch.compile, with eager's outputs (for a training case, eager's loss
  and gradients), without a warning, on a first and a second call;
- ``backend="inductor"`` must match eager.

Runs in the vision environment (``tools/setup_vision.sh``, ``tools/test_vision.sh``);
skipped where torchvision, timm or diffusers is missing. ``CAPTURE_GAPS`` and
``INDUCTOR_GAPS`` name what does not work yet, as strict xfails.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import torch

pytest.importorskip("torchvision")
pytest.importorskip("timm")
pytest.importorskip("diffusers")

import torch._dynamo
import torch._dynamo.testing

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounter, CompileCounterWithBackend

from . import vision_zoo
from .zoo_harness import assert_same, case_param, run, torch_fullgraph_graphs

#: models ember cannot yet compile with fullgraph=True where torch.compile can, and why
CAPTURE_GAPS: dict[str, str] = {}
#: models whose inductor run does not yet match eager (or raises), and why
INDUCTOR_GAPS: dict[str, str] = {}

NAMES = [m.name for m in vision_zoo.ZOO]
SLOW = {m.name for m in vision_zoo.ZOO if m.slow}


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    ed.reset()
    torch._dynamo.reset()
    yield
    ed.reset()
    torch._dynamo.reset()


def _ember_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "ember" in str(w.message)]


@pytest.mark.parametrize("name", [case_param(n, CAPTURE_GAPS, SLOW) for n in NAMES])
def test_fullgraph_wherever_torch_compile(name: str) -> None:
    case = vision_zoo.build(name)
    want = run(case, case.model)
    torch_graphs = torch_fullgraph_graphs(case)
    if torch_graphs is None:
        pytest.skip("torch.compile(fullgraph=True) fails on this model too")
    cnt = CompileCounter()
    compiled = ed.compile(case.model, backend=cnt, fullgraph=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_same(run(case, compiled), want, atol=1e-4)
        assert_same(run(case, compiled), want, atol=1e-4)  # the cached entry serves the second call
    assert cnt.frame_count <= torch_graphs, (cnt.frame_count, torch_graphs)
    assert not _ember_warnings(caught)


@pytest.mark.parametrize("name", [case_param(n, INDUCTOR_GAPS, SLOW) for n in NAMES])
def test_inductor_matches_eager(name: str) -> None:
    case = vision_zoo.build(name)
    want = run(case, case.model)
    cnt = CompileCounterWithBackend("inductor")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_same(run(case, ed.compile(case.model, backend=cnt)), want, atol=1e-4)
    assert cnt.frame_count >= 1
    assert not _ember_warnings(caught)
