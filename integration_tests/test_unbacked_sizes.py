"""Sizes that depend on tensor data (ADR 0046), end to end, against eager.

Boolean-mask indexing (``x[mask]``), ``nonzero``, ``torch.where(mask)`` and
``masked_select`` are captured with an unbacked size ``u0`` (the number of True
values) instead of breaking the graph, as torch.compile does: each program below
compiles with ``fullgraph=True`` into one graph under the ``eager``, ``aot_eager``
and ``inductor`` backends, gives eager's values and gradients for masks with some,
no and all values True, and a new count of True values never recompiles.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ember.aotgrad as aotgrad
import ember.dynamo as ed
from ember.dynamo.testing import CompileCounterWithBackend

BACKENDS = ["eager", "aot_eager", "inductor"]


def positive_sum(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return x[x > 0].sum() + x[m].sum()


def masked_mean(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return x[m].mean() * 2


def electra_style_bce(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """ElectraForPreTraining's loss: logits and labels of the active positions."""
    active = m.view(-1, x.shape[1]) == 1
    logits = x.view(-1, x.shape[1])[active]
    labels = (x.detach() > 0).long()[active]
    return nn.BCEWithLogitsLoss()(logits, labels.float())


def count_scaled(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    picked = x[m]
    return picked.sum() / (picked.shape[0] + 1) + picked.view(-1, 1).sum(0)


def rows(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return (x[m[:, 0]] * 3).sum(0)


def masked_write(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[m] = 0.5
    return y * x[m].sum()


def selected(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return torch.masked_select(x, m).exp().mean() + torch.nonzero(m).float().sum() * x.sum()


def where_index(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return x[torch.where(m)].sin().sum()


def returns_picked(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return x[m] * 2


PROGRAMS: list[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = [
    positive_sum, masked_mean, electra_style_bce, count_scaled, rows, masked_write, selected,
    where_index, returns_picked,
]


def masks(shape: tuple[int, ...]) -> list[torch.Tensor]:
    """Some, none, all and most values True: a new count on each call."""
    g = torch.Generator().manual_seed(0)
    return [
        torch.rand(shape, generator=g) > 0.5,
        torch.zeros(shape, dtype=torch.bool),
        torch.ones(shape, dtype=torch.bool),
        torch.rand(shape, generator=g) > 0.2,
    ]


def close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


def value_and_grad(fn: Callable[..., torch.Tensor], x: torch.Tensor, m: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.detach().requires_grad_(True)
    out = fn(x, m)
    out.sum().backward()
    assert x.grad is not None
    return out.detach(), x.grad


@pytest.fixture(autouse=True)
def _reset() -> Any:
    ed.reset()
    yield
    ed.reset()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_training_matches_eager_in_one_graph(fn: Callable[..., torch.Tensor], backend: str) -> None:
    cnt = CompileCounterWithBackend(backend)
    compiled = ed.compile(fn, backend=cnt, fullgraph=True)
    torch.manual_seed(0)
    for m in masks((4, 6)):
        x = torch.randn(4, 6)
        got, got_grad = value_and_grad(compiled, x, m)
        want, want_grad = value_and_grad(fn, x, m)
        close(got, want)
        close(got_grad, want_grad)
    assert cnt.frame_count == 1  # a new count of True values is no recompile


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_inference_matches_eager(fn: Callable[..., torch.Tensor], backend: str) -> None:
    cnt = CompileCounterWithBackend(backend)
    compiled = ed.compile(fn, backend=cnt, fullgraph=True)
    torch.manual_seed(1)
    with torch.no_grad():
        for m in masks((5, 3)):
            x = torch.randn(5, 3)
            close(compiled(x, m), fn(x, m))
    assert cnt.frame_count == 1


def _recording_aotgrad(graphs: list[torch.fx.GraphModule]) -> Any:
    """ember's aotgrad, no fallback to eager, appending every graph it compiles to ``graphs``."""

    def record(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        graphs.append(gm)
        return gm

    return aotgrad.aot_autograd(
        fw_compiler=record, bw_compiler=record,
        options=aotgrad.AotOptions(fallback_to_eager=False),
    )


def test_aotgrad_traces_forward_and_backward() -> None:
    """aotgrad compiles both graphs (no fallback to eager): the forward reads ``u0`` from
    the index's result, the backward gets it from the forward."""
    graphs: list[torch.fx.GraphModule] = []
    backend = _recording_aotgrad(graphs)
    compiled = ed.compile(count_scaled, backend=backend, fullgraph=True)
    for m in masks((3, 7)):
        x = torch.randn(3, 7)
        got, got_grad = value_and_grad(compiled, x, m)
        want, want_grad = value_and_grad(count_scaled, x, m)
        close(got, want)
        close(got_grad, want_grad)
    assert len(graphs) == 2  # one forward, one backward, for every count
    forward = graphs[0].code
    assert "aten.index.Tensor" in forward and "aten.sym_size.int" in forward


def scored_mean(x: torch.Tensor, w: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Work before the mask (a matmul and pointwise ops) and after its loss."""
    h = torch.tanh(x @ w).sin() * 2 + 1
    return (h[m].mean() * 3).exp() + h.sum() * 0


@pytest.mark.parametrize("grad", [False, True])
def test_inductor_compiles_around_the_mask(grad: bool, caplog: pytest.LogCaptureFixture) -> None:
    """inductor compiles the ops without data-dependent sizes (here the work before the
    mask) and runs the ones with them through ATen, saying so."""
    compiled = ed.compile(scored_mean, backend="inductor", fullgraph=True)
    torch.manual_seed(0)
    w = torch.randn(6, 6, requires_grad=grad)
    with caplog.at_level(logging.INFO, logger="ember.perf_hints"):
        for m in masks((5, 6)):
            x = torch.randn(5, 6)
            with torch.set_grad_enabled(grad):
                got, want = compiled(x, w, m), scored_mean(x, w, m)
                close(got, want)
                if grad:
                    (g,) = torch.autograd.grad(got, w)
                    (e,) = torch.autograd.grad(want, w)
                    close(g, e)
    messages = [r.getMessage() for r in caplog.records]
    assert any("compiled in parts" in t and "depend on tensor data" in t for t in messages)


class TokenTagger(nn.Module):
    """The loss of HF's older token-classification heads: only positions whose attention
    mask is 1 count."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.head = nn.Linear(16, 5)

    def forward(self, ids: torch.Tensor, attention: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.head(torch.tanh(self.embed(ids)))
        active = attention.view(-1) == 1
        active_logits = logits.view(-1, 5)[active]
        active_labels = labels.view(-1)[active]
        return F.cross_entropy(active_logits, active_labels)


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_token_loss_trains_as_eager(backend: str) -> None:
    torch.manual_seed(0)
    model = TokenTagger()
    cnt = CompileCounterWithBackend(backend)
    compiled = ed.compile(model, backend=cnt, fullgraph=True)
    for k, keep in enumerate([0.5, 1.0, 0.2, 0.9]):
        ids = torch.randint(0, 50, (3, 8))
        labels = torch.randint(0, 5, (3, 8))
        attention = (torch.rand(3, 8) < keep).long()
        attention[0, 0] = 1  # at least one active position (eager's mean of none is nan)
        results = []
        for fn in (compiled, model):
            model.zero_grad(set_to_none=True)
            loss = fn(ids, attention, labels)
            loss.backward()
            results.append([loss.detach()] + [p.grad.clone() for p in model.parameters()
                                              if p.grad is not None])
        assert len(results[0]) == len(results[1]) == 4, k  # the loss, 3 gradients
        for got, want in zip(*results, strict=True):
            close(got, want)
    assert cnt.frame_count == 1


def test_a_branch_on_the_count_breaks_the_graph() -> None:
    """Deciding on a data-dependent size is a graph break (an error with fullgraph=True),
    never a guess; the frame runs as eager does."""

    def branch(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        picked = x[m]
        if picked.shape[0] > 3:
            return picked.sum()
        return picked.mean()

    with pytest.raises(ed.Unsupported, match="depends on tensor data"):
        ed.compile(branch, backend="eager", fullgraph=True)(torch.randn(3, 3), torch.ones(3, 3, dtype=torch.bool))
    compiled = ed.compile(branch, backend="aot_eager")
    for m in masks((3, 3)):
        x = torch.randn(3, 3)
        close(compiled(x, m), branch(x, m))


def test_torch_compile_front_end_with_aotgrad() -> None:
    """torch.compile's own capture hands ember's backends graphs with torch's unbacked
    sizes and their range checks (``_assert_scalar(u0 <= 24)``): aotgrad traces them (the
    range is decided from the mask's element count), with eager's values and gradients."""
    import torch._dynamo

    graphs: list[torch.fx.GraphModule] = []
    backend = _recording_aotgrad(graphs)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(scored_mean, backend=backend, fullgraph=True)
        torch.manual_seed(0)
        w = torch.randn(6, 6, requires_grad=True)
        for m in masks((4, 6))[:1] + masks((4, 6))[2:]:  # eager's mean of none is nan
            x = torch.randn(4, 6)
            got, want = compiled(x, w, m), scored_mean(x, w, m)
            close(got, want)
            close(torch.autograd.grad(got, w)[0], torch.autograd.grad(want, w)[0])
    finally:
        torch._dynamo.reset()
    assert len(graphs) == 2
