"""What the zoo tests (transformers: test_zoo.py; vision and diffusion: test_vision_zoo.py)
share: one call of a case (outputs, and parameter gradients for training cases), the
comparison with eager, torch.compile's graph count, and the pytest marks of a case."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

from .zoo import ZooCase


def run(case: ZooCase, fn: Any) -> list[torch.Tensor]:
    """Outputs of one call of ``fn`` (and, for training, the parameter grads)."""
    model = case.model
    if case.mode == "inference":
        with torch.no_grad():
            return [t.detach() for t in case.outputs(fn(*case.args, **case.kwargs))]
    model.zero_grad(set_to_none=True)
    outs = case.outputs(fn(*case.args, **case.kwargs))
    outs[0].backward()
    grads = [
        p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
        for p in model.parameters()
    ]
    return [t.detach() for t in outs] + grads


def assert_same(got: list[torch.Tensor], want: list[torch.Tensor], *, atol: float = 1e-5) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=atol)


def torch_fullgraph_graphs(case: ZooCase) -> int | None:
    """torch.compile's graph count with fullgraph=True, or None if it fails."""
    cnt = torch._dynamo.testing.CompileCounter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run(case, torch.compile(case.model, backend=cnt, fullgraph=True))
    except Exception:
        return None
    finally:
        torch._dynamo.reset()
    return cnt.frame_count


def case_param(name: str, gaps: dict[str, str], slow: set[str]) -> Any:
    """``name`` as a pytest parameter: marked slow, and an expected failure (strict) with
    its reason where ``gaps`` names it."""
    marks: list[Any] = [pytest.mark.slow] if name in slow else []
    if name in gaps:
        marks.append(pytest.mark.xfail(strict=True, reason=gaps[name]))
    return pytest.param(name, marks=marks)
