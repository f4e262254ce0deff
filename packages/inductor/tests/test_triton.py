"""The Triton backend on CPU tensors (Triton's interpreter): skeletons, dtypes, autotuning, modes.

The ops, fusions and models shared with the C++ backend run under both in
``test_pointwise``/``test_reduction``/``test_scheduler``/``test_layouts``/
``test_models`` and the OpInfo sweep; this file covers what only Triton has.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch._dynamo
from torch.fx.experimental.proxy_tensor import make_fx

from ember.inductor import (
    CompiledGraph,
    InductorError,
    InductorOptions,
    compile_graph,
    make_backend,
)

pytest.importorskip("triton")

Check = Callable[..., CompiledGraph]
BACKENDS = ("triton",)


def _sources(c: CompiledGraph) -> str:
    return "\n".join(c.report.kernel_sources.values())


def _opts(tmp_path: Path, **kw: Any) -> InductorOptions:
    return InductorOptions(cache_dir=str(tmp_path), fallback_on_error=False, cpu_backend="triton", **kw)


def _compile(fn: Callable[..., Any], inputs: list[torch.Tensor], opts: InductorOptions) -> CompiledGraph:
    c = compile_graph(make_fx(fn)(*inputs), inputs, opts)
    assert isinstance(c, CompiledGraph), c.report.eager_reason
    return c


def test_backend_needs_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    import triton.language.standard as std

    monkeypatch.setattr(std, "sum", object())  # as if triton was imported without TRITON_INTERPRET
    x = torch.randn(4)
    with pytest.raises(InductorError, match="TRITON_INTERPRET=1"):
        compile_graph(make_fx(lambda x: x + 1)(x), [x], InductorOptions(cpu_backend="triton"))


def test_unknown_cpu_backend_and_mode_are_errors() -> None:
    with pytest.raises(ValueError, match="known CPU backends are cpp, triton"):
        InductorOptions(cpu_backend="cuda")
    with pytest.raises(ValueError, match="known modes are default, reduce-overhead"):
        InductorOptions(mode="fast")


def test_pointwise_1d_and_tiled_2d(check: Check) -> None:
    x = torch.randn(96, 40)
    c = check(lambda x: (x.sin() * 2).relu() + 1, x)
    assert c.report.kernels == 1 and "YBLOCK" not in _sources(c)  # contiguous: one flat index
    c = check(lambda x: x.t().contiguous().exp(), x)
    src = _sources(c)
    assert "YBLOCK" in src and "ymask & xmask" in src  # a transpose: 2-D tiles


def test_broadcast_scalar_and_multi_output(check: Check) -> None:
    x, s = torch.randn(33, 17), torch.tensor(2.5)
    c = check(lambda x, s: (x * s, x.cos() + s, (x > s).sum(1)), x, s)
    assert c.report.kernels <= 2
    assert max(src.count("tl.store(") for src in c.report.kernel_sources.values()) >= 2


@pytest.mark.parametrize("cols", [100, 3000])  # one block per row (persistent), chunks (looped)
def test_reductions_persistent_and_looped(check: Check, cols: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(12, cols)
    x[3, 7] = float("nan")
    x[5, cols - 1] = float("nan")
    x[8] = float("-inf")
    i = torch.randint(-4, 5, (12, cols))

    def f(x: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.nan_to_num(x, nan=0.0, neginf=-1.0)
        return (
            x.amax(1), x.amin(1), x.argmax(1), x.argmin(1),
            y.sum(1), y.mean(1), y.var(1), y.std(1, correction=0),
            (y > 0).any(1), (y > -3).all(1), (1 + y / 1000).prod(1),
            i.amax(1), i.argmin(1), i.sum(1),
        )  # fmt: skip

    c = check(f, x, i, atol=1e-4, rtol=1e-4)
    looped = "for r0offset in range(" in _sources(c)
    assert looped == (cols > 1024)


def test_argmax_ties_take_the_first_index(check: Check) -> None:
    x = torch.zeros(3, 2000)
    x[0, [5, 1500]] = 1.0
    x[1, [1999, 10]] = -1.0
    check(lambda x: (x.argmax(1), x.argmin(1), x[:, :100].argmax(1)), x)


def test_variance_is_one_pass_welford(check: Check) -> None:
    # a large mean: one-pass E[x^2] - E[x]^2 would lose every digit here; Welford does not
    x = 1e4 + torch.randn(16, 4000, dtype=torch.float64)
    c = check(lambda x: (torch.var_mean(x, 1), x.float().var(1)), x, atol=1e-3, rtol=1e-3)
    src = _sources(c)
    assert "_m2 = " in src and src.count("tl.load(") == src.count("for r0offset") >= 1  # one read


def test_softmax_and_layernorm_fuse_into_one_kernel(check: Check) -> None:
    x, w, b = torch.randn(64, 300), torch.randn(300), torch.randn(300)
    c = check(lambda x: torch.softmax(x, -1), x)
    assert c.report.kernels == 1
    c = check(lambda x, w, b: torch.nn.functional.layer_norm(x, (300,), w, b).relu(), x, w, b, atol=1e-5, rtol=1e-4)
    assert c.report.kernels == 1 and c.report.extern_calls == 0


@pytest.mark.parametrize(
    "dtype", [torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float64]
)
def test_dtypes_load_and_store(check: Check, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = (torch.randn(20, 30) * 4).to(dtype)
    if dtype == torch.bool:
        check(lambda x: (x & ~x.t().contiguous().t(), x.to(torch.int32), x.any(1)), x)
    elif dtype.is_floating_point:
        tol = {torch.float16: 1e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-6)
        check(lambda x: ((x * 2).exp(), x.sum(1), x > 0, x.to(torch.float32)), x, atol=tol, rtol=tol)
    else:
        check(lambda x: (x * 3 + 1, x.sum(1), x.amax(0), x > 0, x.to(torch.float32)), x)


def test_int64_indexing_only_where_sizes_need_it(tmp_path: Path) -> None:
    small = torch.randn(1).expand(1000)
    huge = torch.randn(1).expand(2**31 + 5)  # stride 0: no memory; compiled, never run
    opts = _opts(tmp_path)
    for x, wide in ((small, False), (huge, True)):
        c = compile_graph(make_fx(lambda x: x + 1, tracing_mode="fake")(x), [x], opts)
        assert isinstance(c, CompiledGraph)
        assert ("tl.program_id(0).to(tl.int64)" in _sources(c)) == wide


def test_kernel_and_graph_caches(tmp_path: Path) -> None:
    x = torch.randn(40, 50)
    opts = _opts(tmp_path)
    first = _compile(lambda x: torch.softmax(x, -1) * 2, [x], opts)
    assert first.report.compiled == first.report.kernels and first.report.cached == 0
    assert list((tmp_path / "triton").rglob("*.py"))  # kernel modules beside the C++ libraries
    again = _compile(lambda x: torch.softmax(x, -1) * 2, [x], opts)
    assert again.report.graph_cached and again.report.cached == again.report.kernels
    torch.testing.assert_close(again(x), torch.softmax(x, -1) * 2)


def test_autotuning_benchmarks_once_and_caches_the_winner(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(40, 50)
    opts = _opts(tmp_path, mode="max-autotune-no-cudagraphs")
    fn = lambda x: (x.exp() + 1, x.sum(1))  # noqa: E731
    first = _compile(fn, [x], opts)
    for got, want in zip(first(x), fn(x)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    err = capfd.readouterr().err
    assert err.count("[ember.inductor] autotuned kernel") == first.report.kernels >= 1
    assert list((tmp_path / "triton_tune").rglob("*.json"))
    first(x)  # tuned once per launcher
    assert "autotuned" not in capfd.readouterr().err
    warm = _compile(fn, [x], opts)  # a new compile (as a new process would): winners from disk
    warm(x)
    assert "autotuned" not in capfd.readouterr().err


def test_max_autotune_tries_the_matmul_template(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    a, w, bias = torch.randn(48, 40), torch.randn(40, 24), torch.randn(24)
    opts = _opts(tmp_path, mode="max-autotune-no-cudagraphs")
    fn = lambda a, w, bias: (torch.addmm(bias, a, w).relu(), a @ w)  # noqa: E731
    c = _compile(fn, [a, w, bias], opts)
    assert "_ember_addmm(" in c.report.wrapper_source and "_ember_mm(" in c.report.wrapper_source
    for got, want in zip(c(a, w, bias), fn(a, w, bias)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    err = capfd.readouterr().err
    assert "autotuned mm (48, 40)x(40, 24)" in err and "autotuned addmm" in err


@pytest.mark.parametrize("shape", [(37, 50, 19), (64, 32, 128), (1, 5, 3)])
def test_matmul_template_matches_aten(shape: tuple[int, int, int]) -> None:
    from ember.inductor.codegen.triton_template import _configs, template_mm

    m, k, n = shape
    a, b, bias = torch.randn(m, k), torch.randn(n, k).t(), torch.randn(n)  # b: a strided view
    config = _configs(m, n, k, a.device)[0]
    torch.testing.assert_close(template_mm(a, b, None, config), a @ b, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(template_mm(a, b, bias, config), torch.addmm(bias, a, b), atol=1e-4, rtol=1e-4)


def test_modes_are_never_silent(tmp_path: Path) -> None:
    x = torch.randn(8)
    cases = [
        ("reduce-overhead", "triton", "asks for CUDA graphs; CUDA graphs need CUDA tensors: the graph on cpu"),
        ("max-autotune", "triton", "asks for CUDA graphs"),
        ("max-autotune", "cpp", "the C++ backend compiling the graph on cpu has nothing to tune"),
        ("max-autotune-no-cudagraphs", "cpp", "has nothing to tune"),
    ]
    for mode, backend, text in cases:
        opts = InductorOptions(cache_dir=str(tmp_path), fallback_on_error=False, cpu_backend=backend, mode=mode)
        with pytest.warns(UserWarning, match=re.escape(text)):
            compile_graph(make_fx(lambda x: x * 2)(x), [x], opts)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compile_graph(make_fx(lambda x: x * 3)(x), [x], _opts(tmp_path, mode="max-autotune-no-cudagraphs"))


def test_mode_and_options_reach_the_backend_from_both_frontends(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    with torch.no_grad():
        want = model(x)
    opts = {"cpu_backend": "triton", "cache_dir": str(tmp_path), "fallback_on_error": False}
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=make_backend(), options=opts)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), want, atol=1e-5, rtol=1e-5)
    assert list((tmp_path / "triton").rglob("*.py"))
    dynamo = pytest.importorskip("ember.dynamo")
    with pytest.warns(UserWarning, match="mode='reduce-overhead' asks for CUDA graphs"):
        compiled = dynamo.compile(model, backend="inductor", mode="reduce-overhead")
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="unknown options key"):
        make_backend().configure(None, {"max_autotun": True})  # type: ignore[attr-defined]


def test_gpu_kernels_check_indices_on_the_device_and_compile_for_sm90() -> None:
    """On a GPU, a gather's index check is a ``tl.device_assert`` (no flag read back after
    the kernel: no host sync, and CUDA graphs can record it), compiled in by ``debug=True``.
    Compiled for sm_90 here, without a GPU, by Triton's own ptxas, in a process without
    the interpreter."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parent / "triton_sm90_compile.py"
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    if run.returncode != 0 and "ptxas" in run.stderr.lower() and "not found" in run.stderr.lower():
        pytest.skip("this triton has no ptxas to compile for an NVIDIA GPU")
    assert run.returncode == 0, run.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines() if line)
    for graph in ("embedding", "gather_sum"):
        assert "asserts=True err_ptr=False ptx_assert=True" in lines[graph], run.stdout
    assert "asserts=False err_ptr=False ptx_assert=False" in lines["softmax"], run.stdout


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, torch.int16, torch.bool])
def test_a_constant_stored_into_any_dtype(dtype: torch.dtype, tmp_path: Path) -> None:
    """A plain literal (``1.0``, ``True``, ``3``) converted for the buffer's type: found by
    compiling OpInfo's kernels for sm_90 (``fill`` at float16 wrote ``1.0.to(tl.float16)``)."""
    if dtype == torch.bfloat16:
        from triton.runtime.interpreter import InterpreterBuilder

        if not hasattr(InterpreterBuilder, "get_bf16"):  # Triton 3.7's interpreter
            pytest.skip("this Triton's interpreter cannot make bfloat16 constants (no get_bf16)")
    x = torch.zeros(37, dtype=dtype)

    def fn(x: torch.Tensor) -> list[torch.Tensor]:
        return [torch.ops.aten.fill.Scalar(x, True), torch.ops.aten.fill.Scalar(x, 3)]

    c = _compile(fn, [x], _opts(tmp_path))
    for got, want in zip(c(x), fn(x)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want)


@pytest.mark.slow
def test_opinfo_kernels_compile_for_sm90() -> None:
    """Every kernel the OpInfo sweep's elementwise and reduction ops generate for a GPU, at
    float32, float16, bfloat16, int64 and bool, compiles to an sm_90 cubin (~6 min)."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parent / "triton_sm90_compile.py"
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    run = subprocess.run(
        [sys.executable, str(script), "--opinfo", "float32,float16,bfloat16,int64,bool"],
        capture_output=True, text=True, env=env, timeout=1800,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert ", failed 0," in run.stdout


def test_interpreted_loops_take_scalar_arguments_as_numpy_holds_them() -> None:
    """Triton 3.6's interpreter holds a scalar kernel argument as a one-element 1-D array and
    its ``__index__`` is ``int()`` of that array, which NumPy refuses from 2.4: every looped
    reduction (``range(0, r0numel, RBLOCK)``) failed with the GPU image's Triton 3.6 and
    NumPy 2.5. Interpreted kernel modules get a ``range`` that reads the element itself."""
    import numpy as np
    from triton.runtime.interpreter import _implicit_cvt

    from ember.inductor.codegen.triton_runtime import interpreted_range

    scalar = _implicit_cvt(10)  # what the interpreter passes for r0numel=10
    assert scalar.handle.data.shape == (1,)
    if tuple(int(v) for v in np.__version__.split(".")[:2]) >= (2, 4):
        with pytest.raises(TypeError, match="0-dimensional"):
            int(scalar.handle.data)  # Triton 3.6's __index__
    assert list(interpreted_range(0, scalar, 4)) == [0, 4, 8]
    assert list(interpreted_range(3)) == [0, 1, 2]
