from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_flatten

from ember.inductor import CompiledGraph, InductorOptions, compile_graph

CACHE = os.environ.get(
    "EMBER_TEST_CACHE", str(Path(tempfile.gettempdir()) / f"ember-inductor-tests-{os.getuid()}")
)


@pytest.fixture
def options() -> InductorOptions:
    return InductorOptions(cache_dir=CACHE, fallback_on_error=False)


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
def check() -> Callable[..., CompiledGraph]:
    return _check


@pytest.fixture
def compile_fn() -> Callable[..., CompiledGraph]:
    return _compile_fn
