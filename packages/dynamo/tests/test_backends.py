"""Backend resolution: registry, entry points, callables, errors."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import ember.dynamo
from ember.dynamo import InvalidBackendError, lookup_backend
from ember.dynamo.backends import _REGISTRY


def test_eager_ships_here_and_returns_forward() -> None:
    assert "eager" in ember.dynamo.list_backends()
    gm = torch.fx.symbolic_trace(torch.nn.ReLU())
    assert lookup_backend("eager") is ember.dynamo.eager
    assert ember.dynamo.eager(gm, [torch.randn(2)]) == gm.forward


def test_entry_points_are_listed() -> None:
    from importlib.metadata import entry_points

    names = {ep.name for ep in entry_points(group="ember.backends")}
    assert names <= set(ember.dynamo.list_backends())


def test_register_backend_by_name_and_bare() -> None:
    try:

        @ember.dynamo.register_backend("twice")
        def twice(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Any:
            return gm.forward

        @ember.dynamo.register_backend
        def my_backend(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Any:
            return gm.forward

        assert lookup_backend("twice") is twice
        assert lookup_backend("my_backend") is my_backend
        assert {"twice", "my_backend"} <= set(ember.dynamo.list_backends())
    finally:
        _REGISTRY.pop("twice", None)
        _REGISTRY.pop("my_backend", None)


def test_callable_passes_through() -> None:
    def mine(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Any:
        return gm.forward

    assert lookup_backend(mine) is mine


def test_errors() -> None:
    with pytest.raises(InvalidBackendError, match="unknown ember backend 'nope'; installed backends: .*eager"):
        lookup_backend("nope")
    with pytest.raises(TypeError, match="backend must be a name or a callable"):
        lookup_backend(3)  # type: ignore[arg-type]


def test_counting_backends() -> None:
    from ember.dynamo.testing import CompileCounterWithBackend, EagerAndRecordGraphs

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) + 1

    x = torch.randn(3)
    cnt = CompileCounterWithBackend("eager")
    torch.testing.assert_close(ember.dynamo.compile(f, backend=cnt)(x), f(x))
    assert (cnt.frame_count, cnt.op_count) == (1, 2)
    rec = EagerAndRecordGraphs()
    ember.dynamo.compile(f, backend=rec)(x)
    assert len(rec.graphs) == 1 and len(rec.example_inputs[0]) == 1
    rec.clear()
    assert rec.frame_count == 0 and rec.graphs == []
    ember.dynamo.reset()
