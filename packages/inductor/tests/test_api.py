"""Public API behaviour: logging, input checks, the backend without aotgrad, eager fallback."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ember.inductor import (
    CompiledGraph,
    EagerGraph,
    InductorError,
    InductorOptions,
    InputMismatchError,
    compile_graph,
    make_backend,
)


def test_output_code_is_logged(
    caplog: pytest.LogCaptureFixture, options: InductorOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMBER_LOGS", "output_code")
    x = torch.randn(16)
    with caplog.at_level(logging.INFO, logger="ember.output_code"):
        compile_graph(make_fx(lambda x: x.exp() + 1)(x), [x], options)
    text = caplog.text
    assert "def call(args):" in text and 'extern "C" void ember_kernel' in text


def test_debug_dir_gets_generated_code(tmp_path: Path, options: InductorOptions) -> None:
    import dataclasses

    x = torch.randn(16)
    opts = dataclasses.replace(options, debug_dir=str(tmp_path))
    compile_graph(make_fx(lambda x: x.sin())(x), [x], opts)
    assert list(tmp_path.rglob("output_code.py")) and list(tmp_path.rglob("kernel0.cpp"))


def test_wrong_shape_is_a_clear_error(compile_fn: Callable[..., CompiledGraph]) -> None:
    c = compile_fn(lambda x: x * 2, torch.randn(4, 8))
    with pytest.raises(
        InputMismatchError, match=r"input 0 has size \(2, 8\).*compiled for \(4, 8\)"
    ):
        c(torch.randn(2, 8))


def test_non_contiguous_input_is_accepted(compile_fn: Callable[..., CompiledGraph]) -> None:
    c = compile_fn(lambda x: x * 2, torch.randn(4, 8))
    y = torch.randn(8, 4).t()
    torch.testing.assert_close(c(y), y * 2)


def test_input_compiled_expanded_accepts_a_materialized_copy(
        compile_fn: Callable[..., CompiledGraph]) -> None:
    # the backward of a model that saved an expanded mask: compiled for stride 0, called
    # with the same values laid out densely (the zoo's bert under training)
    x = torch.randn(4, 1).expand(4, 8)
    c = compile_fn(lambda x: x * 2, x)
    dense = x.contiguous()
    torch.testing.assert_close(c(dense), dense * 2)
    other = torch.randn(4, 8)  # not the same along the expanded dim: cannot run in this graph
    with pytest.raises(InputMismatchError, match=r"input 0 differs along dims \[1\]"):
        c(other)


def test_non_tensor_input_runs_eagerly(options: InductorOptions) -> None:
    gm = make_fx(lambda x: x * 2)(torch.randn(3))
    compiled = compile_graph(gm, [3], options)
    assert isinstance(compiled, EagerGraph)
    assert "int" in (compiled.report.eager_reason or "")


def test_backend_without_aotgrad_is_inference_only(
    monkeypatch: pytest.MonkeyPatch, options: InductorOptions
) -> None:
    monkeypatch.setitem(sys.modules, "ember.aotgrad", None)  # import raises ImportError
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
    x = torch.randn(2, 8)
    backend = make_backend(options)
    gm = torch.fx.symbolic_trace(model)
    with torch.no_grad():
        compiled = backend(gm, [x])
        torch.testing.assert_close(compiled(x), model(x))
    assert isinstance(compiled, CompiledGraph) and compiled.report.kernels == 1
    with pytest.raises(InductorError, match="ember-aotgrad"):
        backend(gm, [x.requires_grad_()])


def test_backend_trusts_frontend_guards_for_layouts() -> None:
    # The inference path skips the compiled graph's own input check because the frontend
    # guards sizes and strides: a transposed input, a re-strided parameter and a new batch
    # size must each still give eager's result (by recompiling, not by reading wrong strides).
    ed = pytest.importorskip("ember.dynamo")
    import ember.inductor

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
    for compiled in (
        ed.compile(model, backend="inductor"),
        torch.compile(model, backend=ember.inductor.backend),
    ):
        with torch.no_grad():
            x = torch.randn(4, 8)
            torch.testing.assert_close(compiled(x), model(x))
            xt = torch.randn(8, 4).t()
            torch.testing.assert_close(compiled(xt), model(xt))
            x6 = torch.randn(6, 8)
            torch.testing.assert_close(compiled(x6), model(x6))
            w = model[0].weight
            w.data = w.data.t().contiguous().t()
            torch.testing.assert_close(compiled(x), model(x))


def test_torch_profiler_sees_the_graph_and_each_kernel(
    compile_fn: Callable[..., CompiledGraph],
) -> None:
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    c = compile_fn(lambda x, w: (x @ w).relu().sum(1) + x.cos().sum(1), x, w)
    want = (x @ w).relu().sum(1) + x.cos().sum(1)
    with torch.profiler.profile() as prof:
        got = c(x, w)
    torch.testing.assert_close(got, want)
    names = {e.name for e in prof.events()}
    kernels = {f"ember_kernel_{name}" for name in c.report.kernel_sources}
    assert kernels and kernels <= names, (kernels, names)
    assert "aten::mm" in names
    assert sum(n.startswith("ember_graph_") for n in names) == 1
    # outside the profiler the plain wrapper runs, with the same result
    torch.testing.assert_close(c(x, w), want)


def test_recorded_graphs_sees_what_a_frontend_compiles() -> None:
    # ember.inductor.testing: the graphs behind a frontend, for tests that check kernels
    import ember.inductor.backends as backends
    from ember.inductor.testing import recorded_graphs

    real = backends.compile_graph
    x = torch.randn(8, 8)
    with recorded_graphs() as graphs:
        compiled = torch.compile(lambda t: (t.sin() + 1).relu(), backend=backends.inductor)
        torch.testing.assert_close(compiled(x), (x.sin() + 1).relu())
    assert backends.compile_graph is real
    assert len(graphs) == 1 and graphs[0].report.kernels == 1
