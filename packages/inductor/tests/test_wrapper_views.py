"""The wrapper's cheap views (``codegen/wrapper.py``) give eager's results.

A view of a weight is made once and reused while the weight keeps its storage;
a buffer reusing a dead one is viewed only where an extern op reads it. Both
must follow what the user does to the weights between calls.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import ember.inductor.backends as backends
from ember.inductor.codegen.wrapper_runtime import _const_view
from ember.inductor.testing import recording

dynamo = pytest.importorskip("ember.dynamo")


@pytest.fixture
def graphs(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every graph compiled in the test (its wrapper source: ``.report.wrapper_source``)."""
    seen: list[Any] = []
    monkeypatch.setattr(backends, "compile_graph", recording(backends.compile_graph, seen))
    return seen


def _sources(graphs: list[Any]) -> list[str]:
    return [c.report.wrapper_source or "" for c in graphs]


def test_weight_views_follow_the_weights(graphs: list[Any]) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)
    compiled = dynamo.compile(model, backend="inductor")
    with torch.no_grad():
        for _ in range(2):  # the second call reuses the views made by the first
            torch.testing.assert_close(compiled(x), model(x))
        assert any("_const_view(" in s for s in _sources(graphs)), _sources(graphs)
        model[0].weight.mul_(2.0)  # in place: the cached view shares the storage
        torch.testing.assert_close(compiled(x), model(x))
    # with grad: the view of a weight that requires grad is made afresh, so grads flow
    out = compiled(x)
    out.sum().backward()
    ref = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    ref.load_state_dict(model.state_dict())
    ref(x).sum().backward()
    torch.testing.assert_close(model[2].weight.grad, ref[2].weight.grad)


def test_a_weight_given_new_storage_is_viewed_again() -> None:
    cache: dict[int, Any] = {}
    w = torch.randn(8, 4)
    first = _const_view(cache, 0, w, (4, 8), (1, 4), 0)
    assert _const_view(cache, 0, w, (4, 8), (1, 4), 0) is first
    w.data = torch.randn(8, 4)  # what ``param.data = ...`` does: same object, new storage
    again = _const_view(cache, 0, w, (4, 8), (1, 4), 0)
    assert again is not first
    torch.testing.assert_close(again, w.t())


def test_outputs_viewing_a_weight_are_fresh_tensors(graphs: list[Any]) -> None:
    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(6, 4), requires_grad=False)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return x @ self.w.t(), self.w.t()

    model = Head()
    compiled = dynamo.compile(model, backend="inductor")
    x = torch.randn(3, 4)
    first = compiled(x)[1]
    second = compiled(x)[1]
    assert first is not second  # a caller may change one's metadata without the other
    first.t_()
    torch.testing.assert_close(compiled(x)[1], model.w.t())
    torch.testing.assert_close(compiled(x)[0], x @ model.w.t())


class Attention(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.ln, self.qkv, self.proj, self.heads = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d), heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax((q @ k.transpose(-2, -1)) * 0.25, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return x + self.proj(torch.relu(y) * 2.0)


def test_reused_buffers_read_by_extern_ops(graphs: list[Any]) -> None:
    torch.manual_seed(0)
    layer = Attention().eval()
    x = torch.randn(2, 6, 32)
    compiled = dynamo.compile(layer, backend="inductor")
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(compiled(x), layer(x), atol=1e-5, rtol=1e-5)
    assert any("(viewed where read)" in s for s in _sources(graphs)), _sources(graphs)
