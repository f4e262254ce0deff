"""Seed 004, the older TorchDynamo FAQ (``004_7a62711aaa6d1a42.txt``).

Examples seeds 000/001 already hold are tested there (README.md maps them);
these are the ones only this FAQ has, with ember's names: ``ember.dynamo`` for
``torch._dynamo``, ``EMBER_DEBUG_FUNCTION`` for ``TORCHDYNAMO_DEBUG_FUNCTION``,
``EMBER_REPRO_AFTER`` / ``EMBER_REPRO_DIR`` for ``TORCHDYNAMO_REPRO_*``.
"""

from __future__ import annotations

import logging

import pytest
import torch

import ember.dynamo
from ember.dynamo.testing import CompileCounter

from .fresh_process import run_example

# -- TorchDynamo Errors --------------------------------------------------------------


def test_verbose_gives_the_full_stack_of_an_internal_error(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "a full stack trace to both the error in torchdynamo and the user code"
    monkeypatch.delenv("EMBER_STRICT")  # the tests' EMBER_STRICT=1 would win over suppress_errors
    ember.dynamo.config.verbose = True
    ember.dynamo.config.suppress_errors = True

    def broken_backend(gm, example_inputs):
        raise RuntimeError("backend bug")

    def user_code(x):
        return x.sin() + 1

    x = torch.randn(3)
    with caplog.at_level(logging.WARNING, logger="ember.dynamo"):
        torch.testing.assert_close(ember.dynamo.compile(user_code, backend=broken_backend)(x), user_code(x))
    record = next(r for r in caplog.records if "eagerly" in r.getMessage())
    assert "user_code" in record.getMessage()
    assert record.exc_info is not None
    text = logging.Formatter().formatException(record.exc_info)
    assert "broken_backend" in text and "backend bug" in text and "ember/dynamo" in text


@pytest.mark.parametrize("level", [logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR])
def test_log_level(level: int, caplog: pytest.LogCaptureFixture) -> None:
    # DEBUG: every instruction; INFO: each compiled function's bytecode and graph;
    # WARNING (default): graph breaks; ERROR: errors only.
    ember.dynamo.config.log_level = level

    def toy_example(a, b):
        x = a / (torch.abs(a) + 1)
        print("woo")
        return x * b

    with caplog.at_level(logging.DEBUG, logger="ember"):
        ember.dynamo.compile(toy_example, backend="eager")(torch.randn(4), torch.randn(4))
    names = {r.name for r in caplog.records}
    assert ("ember.graph_breaks" in names) == (level <= logging.WARNING)
    assert ("ember.bytecode" in names) == (level <= logging.INFO)
    assert any(r.levelno == logging.DEBUG for r in caplog.records) == (level <= logging.DEBUG)


def test_debug_function_compiles_only_functions_with_that_name(tmp_path) -> None:
    proc = run_example("""
        import torch
        import ember.dynamo
        from ember.dynamo.testing import CompileCounter

        counter = CompileCounter()

        def suspect(x):
            return x.sin() + 1

        def innocent(x):
            return x.cos() * 2

        for fn in (suspect, innocent):
            ember.dynamo.compile(fn, backend=counter)(torch.randn(3))
        print("graphs", counter.frame_count, ["sin" in [n.target for n in g.graph.nodes] for g in counter.graphs])
    """, tmp_path, {"EMBER_DEBUG_FUNCTION": "suspect"})
    assert "graphs 1 [True]" in proc.stdout, proc.stdout


def test_replay_record_enabled_is_accepted_with_a_reason() -> None:
    with pytest.warns(UserWarning, match="replay_record_enabled"):
        ember.dynamo.config.replay_record_enabled = True


# -- TorchInductor Errors: the minifier ---------------------------------------------

_BROKEN_SIGMOID = """
    import torch
    import ember.dynamo
    from ember.inductor import register_lowering

    @register_lowering(torch.ops.aten.sigmoid.default)
    def broken_sigmoid(ctx, node, x):   # a planted inductor bug: sigmoid(x) computed as x
        return x

    class Gated(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)

        def forward(self, x):
            h = self.a(x)
            return h * torch.sigmoid(h) + 1

    torch.manual_seed(0)
    try:
        ember.dynamo.compile(Gated(), backend="inductor")(torch.randn(4, 8)).sum().backward()
    except Exception as exc:
        print("raised", type(exc).__name__)
"""


def test_repro_after_aot_with_inductor_writes_repro_py(tmp_path) -> None:
    run_example(_BROKEN_SIGMOID, tmp_path, {
        "EMBER_REPRO_AFTER": "aot", "EMBER_REPRO_LEVEL": "4",
        "EMBER_REPRO_DIR": str(tmp_path / "repro"), "EMBER_CACHE_DIR": str(tmp_path / "cache")})
    repros = list((tmp_path / "repro").rglob("repro.py"))
    assert repros, sorted(str(p) for p in (tmp_path / "repro").rglob("*"))
    # the repro compiles the minified ATen graph with inductor's aot graph compiler
    assert "ember.inductor.backends:compile_aten_graph" in repros[0].read_text()


@pytest.mark.slow  # test_minifier_e2e covers EMBER_REPRO_AFTER=dynamo by default
def test_repro_after_dynamo_with_inductor_writes_repro_py(tmp_path) -> None:
    run_example(_BROKEN_SIGMOID, tmp_path, {
        "EMBER_REPRO_AFTER": "dynamo", "EMBER_REPRO_LEVEL": "4",
        "EMBER_REPRO_DIR": str(tmp_path / "repro"), "EMBER_CACHE_DIR": str(tmp_path / "cache")})
    repros = list((tmp_path / "repro").rglob("repro.py"))
    assert repros, sorted(str(p) for p in (tmp_path / "repro").rglob("*"))


# -- Excessive Recompilation -------------------------------------------------------


def test_compile_profiler_as_a_backend() -> None:
    from ember.dynamo import CompileProfiler

    prof = CompileProfiler()

    def my_model(x):
        return x.sin() * 2

    profiler_model = ember.dynamo.compile(my_model, backend=prof)
    for n in (2, 3, 2):
        torch.testing.assert_close(profiler_model(torch.ones(n)), my_model(torch.ones(n)))
    report = prof.report()
    assert "Graphs compiled: 2" in report
    assert "Recompiles: 1" in report
    assert "L['x'].size()[0] was 3, the graph assumed 2" in report


# -- Why are you recompiling in production? ------------------------------------------


def test_frozen_toy_example() -> None:
    counter = CompileCounter()

    def toy_example(a, b):
        return a / (torch.abs(a) + 1) * b

    compiled = ember.dynamo.compile(toy_example, backend=counter)
    compiled(torch.randn(10), torch.randn(10))
    frozen_toy_example = ember.dynamo.run(compiled)
    frozen_toy_example(torch.randn(10), torch.randn(10))
    frozen_toy_example(torch.randn(3), torch.randn(3))
    assert counter.frame_count == 1
