"""A graph that writes its inputs in place is guarded by ``NO_ALIASING`` (ADR 0062) instead
of a per-call Python pass (``AliasChecked``): a cached call pays only the guard check, and a
call whose written input shares memory with another input still gets eager's result (it
fails that guard and recompiles; the entry captured from aliased inputs keeps
``AliasChecked`` and runs the FX graph in program order for them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

import ember.dynamo
from ember import ir
from ember.dynamo import api
from ember.dynamo.eager_fallback import AliasChecked

BACKENDS = ["eager", "aot_eager", "inductor"]


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    # no entry or stored frame of ``f`` from another test: each call below either hits an
    # entry made here or recompiles
    monkeypatch.setenv("EMBER_FRAME_CACHE", "0")
    ember.dynamo.reset()


@pytest.fixture
def events() -> Iterator[list[Any]]:
    seen: list[Any] = []
    api.STATE.listeners.append(seen.append)
    try:
        yield seen
    finally:
        api.STATE.listeners.remove(seen.append)


def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.add_(torch.tensor(1.0, dtype=torch.float64))
    return b * torch.tensor(2.0, dtype=torch.float64)


def _zeros() -> torch.Tensor:
    return torch.zeros(3, dtype=torch.float64)


def _entries(events: list[Any]) -> list[Any]:
    return [e.guarded for e in events if e.guarded is not None]


@pytest.mark.parametrize("backend", BACKENDS)
def test_cached_call_is_guarded_not_wrapped(backend: str, events: list[Any]) -> None:
    g = ember.dynamo.compile(f, backend=backend)
    a, b = _zeros(), _zeros()
    for _ in range(3):
        g(a, b)
    (guarded,) = _entries(events)
    (alias,) = [x for x in guarded.guard_set.guards if x.kind is ir.GuardKind.NO_ALIASING]
    assert alias.payload == {"sources": ["L['a']", "L['b']"], "written": [0]}
    assert not isinstance(guarded.graphs[0].compiled, AliasChecked)
    assert a.tolist() == [3.0, 3.0, 3.0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pattern", ["same tensor", "views of one storage", "a view through view()"])
def test_aliased_call_after_a_distinct_one_gets_eagers_result(backend: str, pattern: str, events: list[Any]) -> None:
    g = ember.dynamo.compile(f, backend=backend)
    y = _zeros()
    torch.testing.assert_close(g(y, y.clone()), _zeros())

    def pair(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if pattern == "same tensor":
            v = x[:3]
            return v, v
        if pattern == "views of one storage":
            return x[:3], x[3:]
        return x[:3], x[:3].view(3)

    x, ex = torch.zeros(6, dtype=torch.float64), torch.zeros(6, dtype=torch.float64)
    for _ in range(3):  # the aliased entry is cached too, and stays correct
        out, want = g(*pair(x)), f(*pair(ex))
        torch.testing.assert_close(out, want)
        torch.testing.assert_close(x, ex)
    # distinct inputs again: still eager's result (whichever entry runs)
    a, b, ea, eb = _zeros(), torch.ones(3, dtype=torch.float64), _zeros(), torch.ones(3, dtype=torch.float64)
    torch.testing.assert_close(g(a, b), f(ea, eb))
    torch.testing.assert_close(a, ea)
    kinds = [e.kind for e in events]
    assert kinds.count("recompile") == 1, kinds  # the aliased call failed NO_ALIASING once
    recompile = next(e for e in events if e.kind == "recompile")
    assert "shared memory with" in (recompile.reason or ""), recompile.reason


def test_first_call_aliased_keeps_the_per_call_check(events: list[Any]) -> None:
    g = ember.dynamo.compile(f, backend="inductor")
    x, ex = _zeros(), _zeros()
    torch.testing.assert_close(g(x, x), f(ex, ex))
    (guarded,) = _entries(events)
    assert not any(x.kind is ir.GuardKind.NO_ALIASING for x in guarded.guard_set.guards)
    assert isinstance(guarded.graphs[0].compiled, AliasChecked)
    a, b, ea, eb = _zeros(), torch.ones(3, dtype=torch.float64), _zeros(), torch.ones(3, dtype=torch.float64)
    torch.testing.assert_close(g(a, b), f(ea, eb))
    torch.testing.assert_close(a, ea)


def test_explain_names_the_inputs(events: list[Any]) -> None:
    g = ember.dynamo.compile(f, backend="eager")
    g(_zeros(), _zeros())
    (guarded,) = _entries(events)
    x = _zeros()
    why = guarded.check_fn.explain({"a": x, "b": x}, f.__globals__)
    assert why is not None
    assert "L['a'] shared memory with L['b']" in why and "writes L['a'] in place" in why


def test_read_only_and_unaliased_graphs_get_no_guard(events: list[Any]) -> None:
    def reads(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b

    def writes_one_input(a: torch.Tensor) -> torch.Tensor:
        return a.mul_(2)

    ember.dynamo.compile(reads, backend="eager")(_zeros(), _zeros())
    ember.dynamo.compile(writes_one_input, backend="eager")(_zeros())
    for guarded in _entries(events):
        assert not any(x.kind is ir.GuardKind.NO_ALIASING for x in guarded.guard_set.guards)


def test_native_check_runs_the_alias_test(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, events: list[Any]) -> None:
    monkeypatch.setenv("EMBER_NATIVE_GUARDS", "eager")
    monkeypatch.setenv("EMBER_STRICT", "1")  # a native verdict that differs raises
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    g = ember.dynamo.compile(f, backend="inductor")
    a, b = _zeros(), _zeros()
    g(a, b)
    g(a, b)  # the first check call compiles it (EMBER_NATIVE_GUARDS=eager)
    (guarded,) = _entries(events)
    check = guarded.check_fn
    assert check.native_fn is not None, check.native_error
    assert check.native_fn({"a": a, "b": b}, f.__globals__) is True
    assert check.native_fn({"a": a, "b": a}, f.__globals__) is False
    assert check.native_fn({"a": a[1:], "b": a[:1]}, f.__globals__) is False
    x, ex = _zeros(), _zeros()
    torch.testing.assert_close(g(x, x), f(ex, ex))
    torch.testing.assert_close(x, ex)
