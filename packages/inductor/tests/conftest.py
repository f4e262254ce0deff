"""Fixtures of ember.inductor's tests.

``check``/``compile_fn`` compile with the backend of the test's ``backend``
parameter: ``cpp``, and ``triton`` (Triton kernels on CPU tensors, in Triton's
interpreter) for modules that set ``BACKENDS = ("cpp", "triton")`` or tests
marked ``@pytest.mark.backends(...)``.
"""

from __future__ import annotations

import os

# Triton's interpreter runs only if this is set before triton is first imported.
os.environ.setdefault("TRITON_INTERPRET", "1")

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_flatten

from ember.inductor import CompiledGraph, InductorOptions, compile_graph
from ember.inductor.testing import recording

CACHE = os.environ.get(
    "EMBER_TEST_CACHE", str(Path(tempfile.gettempdir()) / f"ember-inductor-tests-{os.getuid()}")
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "backends(*names): the code generators a test runs with (default: the module's BACKENDS)"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("backends")
    names = marker.args if marker else getattr(metafunc.module, "BACKENDS", ("cpp",))
    metafunc.parametrize("backend", names)


@pytest.fixture
def backend() -> str:  # parametrized by pytest_generate_tests
    return "cpp"


def backend_options(backend: str = "cpp") -> InductorOptions:
    return InductorOptions(cache_dir=CACHE, fallback_on_error=False, cpu_backend=backend)


@pytest.fixture
def options(backend: str) -> InductorOptions:
    return backend_options(backend)


def _compile_fn(
    fn: Callable[..., Any], *inputs: Any, options: InductorOptions | None = None
) -> CompiledGraph:
    gm = make_fx(fn)(*inputs)
    compiled = compile_graph(
        gm, list(inputs), options or InductorOptions(cache_dir=CACHE, fallback_on_error=False)
    )
    assert isinstance(compiled, CompiledGraph), compiled.report.eager_reason
    return compiled


def _check(
    fn: Callable[..., Any], *inputs: Any, atol: float = 1e-5, rtol: float = 1e-5, **kw: Any
) -> CompiledGraph:
    """Compile ``fn`` at ATen level and compare every output (values, dtype, strides) with eager."""
    compiled = _compile_fn(fn, *inputs, **kw)
    expected = fn(*inputs)
    got = compiled(*inputs)
    exp_flat = tree_flatten(expected)[0]
    got_flat = tree_flatten(got)[0]
    assert len(exp_flat) == len(got_flat)
    for e, g in zip(exp_flat, got_flat):
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        assert g.shape == e.shape, (g.shape, e.shape)
        torch.testing.assert_close(g, e, atol=atol, rtol=rtol, equal_nan=True)
        if e.is_contiguous() or e.dim() <= 1:
            continue
        assert g.stride() == e.stride(), (g.stride(), e.stride())
    return compiled


@pytest.fixture
def check(options: InductorOptions) -> Callable[..., CompiledGraph]:
    def run(fn: Callable[..., Any], *inputs: Any, **kw: Any) -> CompiledGraph:
        kw.setdefault("options", options)
        return _check(fn, *inputs, **kw)

    return run


@pytest.fixture
def compile_fn(options: InductorOptions) -> Callable[..., CompiledGraph]:
    def run(fn: Callable[..., Any], *inputs: Any, **kw: Any) -> CompiledGraph:
        kw.setdefault("options", options)
        return _compile_fn(fn, *inputs, **kw)

    return run


@pytest.fixture
def reports(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every graph ``ember.inductor.backends`` compiles in the test, in order."""
    import torch._dynamo

    import ember.inductor.backends as backends

    torch._dynamo.reset()  # each test's torch.compile starts fresh (recompile limits are per process)
    seen: list[Any] = []

    monkeypatch.setattr(backends, "compile_graph", recording(backends.compile_graph, seen))
    return seen
