"""Modules whose class has a Python ``__init__``, made inside ``forward``.

transformers' ``ACT2FN["gelu"]`` makes a ``GELUActivation`` (its ``__init__``
picks the function) on every read; models call it in ``forward``
(DeBERTa's pooler). ember traces such an ``__init__`` over a new module,
runs torch.nn's constructor and the attribute writes for real on it, and keeps
the module only when the ``__init__`` changed nothing else — otherwise it is
a graph break with the reason, and the result is eager's either way.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def _reset():
    ed.reset()
    yield
    ed.reset()


class Activation(nn.Module):
    def __init__(self, exact: bool = True, scale: float = 1.0) -> None:
        super().__init__()
        self.act = F.gelu if exact else self._approx
        self.scale = scale

    def _approx(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x) * self.scale


class Scaled(Activation):
    def __init__(self, factor: float) -> None:
        super().__init__(exact=False, scale=factor)
        self.inner = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(super().forward(x))


def one_graph(fn: Any, *args: Any) -> CompileCounter:
    cnt = CompileCounter()
    c = ed.compile(fn, backend=cnt, fullgraph=True)
    for _ in range(2):
        torch.testing.assert_close(c(*args), fn(*args))
    assert cnt.frame_count == 1
    return cnt


def test_a_module_with_a_python_init_made_in_forward_is_one_graph() -> None:
    one_graph(lambda x: Activation()(x) + Activation(exact=False, scale=2.0)(x), torch.randn(4, 5))


def test_an_init_chain_through_user_classes_and_a_torch_submodule() -> None:
    one_graph(lambda x: Scaled(3.0)(x), torch.randn(4, 5))


def test_transformers_act2fn_in_forward() -> None:
    transformers = pytest.importorskip("transformers")
    acts = transformers.activations.ACT2FN

    def fn(x: torch.Tensor) -> torch.Tensor:
        return acts["gelu"](x) + acts["gelu_python"](x) + acts["quick_gelu"](x)

    one_graph(fn, torch.randn(3, 8))


def test_a_module_made_in_forward_and_returned_is_rebuilt() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, nn.Module]:
        act = Activation(exact=False, scale=4.0)
        return act(x), act

    c = ed.compile(fn, backend="eager", fullgraph=True)
    x = torch.randn(3)
    out, act = c(x)
    torch.testing.assert_close(out, fn(x)[0])
    assert type(act) is Activation and act.scale == 4.0 and act.act.__func__ is Activation._approx


MADE = {"count": 0}


class Counted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        MADE["count"] += 1  # visible outside the module: every call must do it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


REGISTRY: list[str] = []


class Registered(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        REGISTRY.append("made")  # a list the frame already wrote to before

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 3


def test_an_init_writing_a_list_the_frame_already_tracks_is_not_kept() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, nn.Module]:
        REGISTRY.append("call")
        m = Registered()
        return m(x), m

    explained = ed.explain(fn)(torch.ones(2))
    assert any("changes state outside" in str(b.reason) for b in explained.break_reasons)
    REGISTRY.clear()
    out, m = ed.compile(fn, backend="eager")(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 3.0))
    assert REGISTRY == ["call", "made"] and type(m) is Registered


class WithWeights(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class StoresATensor(nn.Module):
    def __init__(self, t: Any) -> None:
        super().__init__()
        self.t = t * 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.t


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda x: Counted()(x), "changes state outside"),
        (lambda x: StoresATensor(3)(x), ""),
    ],
)
def test_an_init_that_is_not_kept_breaks_and_stays_correct(make: Any, reason: str) -> None:
    x = torch.randn(3)
    explained = ed.explain(make)(x)
    if reason:
        assert explained.graph_break_count >= 1
        assert any(reason in str(b.reason) for b in explained.break_reasons), explained.break_reasons
    before = MADE["count"]
    torch.testing.assert_close(ed.compile(make, backend="eager")(x), make(x))
    if reason:
        assert MADE["count"] == before + 2  # the compiled call made it once, as eager did


def test_an_init_that_makes_parameters_breaks_with_the_reason() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return WithWeights()(x).shape[0] * x

    explained = ed.explain(fn)(torch.randn(3))
    assert any("parameters" in str(b.reason) for b in explained.break_reasons), explained.break_reasons
    torch.testing.assert_close(ed.compile(fn, backend="eager")(torch.randn(2, 3)).shape, torch.Size([2, 3]))


def test_an_init_storing_a_tensor_breaks() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return StoresATensor(x.sum())(x)

    explained = ed.explain(fn)(torch.randn(3))
    assert explained.graph_break_count >= 1
    x = torch.randn(3)
    torch.testing.assert_close(ed.compile(fn, backend="eager")(x), fn(x))


class ChannelsFirstNorm(nn.LayerNorm):
    """transformers' SqueezeBertLayerNorm: a subclass calling its base's forward by name."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 1)
        x = nn.LayerNorm.forward(self, x)
        return x.permute(0, 2, 1)


class ConvViaBase(nn.Conv1d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.Conv1d.forward(self, x).relu()


def test_a_torch_module_forward_called_by_its_class_name_is_inlined() -> None:
    norm, conv = ChannelsFirstNorm(8).eval(), ConvViaBase(8, 4, 3).eval()
    with torch.no_grad():
        norm.weight.normal_()
    one_graph(lambda x: conv(norm(x)), torch.randn(2, 8, 5))
