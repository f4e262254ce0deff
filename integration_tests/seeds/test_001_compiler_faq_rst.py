"""Seed 001, the older ``torch.compiler_faq.rst`` (``001_5d90104a5040cb0d.txt``).

Examples seed 000 repeats word for word are tested there (README.md maps
them); these are the ones only this version has, with ember's names:
``import ember.dynamo as dynamo`` for ``torch._dynamo``, ``ember.dynamo.compile``
for ``torch.compile``, ``EMBER_COMPILE_DEBUG`` for ``TORCH_COMPILE_DEBUG``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember.dynamo
import ember.dynamo as dynamo
from ember.dynamo.testing import CompileCounter

from .fresh_process import run_example

# -- Why is compilation slow? ------------------------------------------------------


def test_compile_times_after_running() -> None:
    ember.dynamo.compile(lambda x: x.sin() + 1, backend="eager")(torch.randn(3))
    report = dynamo.compile_times()
    assert isinstance(report, str)
    assert "convert_frame" in report and "backend_compile" in report
    assert set(dynamo.compile_times(repr="dict")) >= {"convert_frame", "backend_compile"}


def test_compile_debug_writes_one_folder_per_frame_with_every_stage(tmp_path) -> None:
    run_example("""
        import torch
        import ember.dynamo

        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
        x = torch.randn(4, 8, requires_grad=True)
        ember.dynamo.compile(model, backend="inductor")(x).sum().backward()
    """, tmp_path, {"EMBER_COMPILE_DEBUG": "1", "EMBER_CACHE_DIR": str(tmp_path / "cache")})
    runs = list((tmp_path / "ember_debug").iterdir())
    assert len(runs) == 1, runs
    frames = [p for p in runs[0].iterdir() if p.is_dir()]
    assert len(frames) == 1, frames
    texts = {p.relative_to(frames[0]).as_posix(): p.read_text(errors="replace")
             for p in frames[0].rglob("*") if p.is_file() and p.suffix in (".txt", ".py", ".cpp")}
    joined = "\n".join(texts)
    assert "bytecode" in joined  # ember.dynamo
    assert "forward" in joined and "backward" in joined  # ember.aotgrad
    assert any('extern "C"' in text for text in texts.values()), sorted(texts)  # ember.inductor
    assert not list((tmp_path / "cache").rglob("debug")), "debug output outside the debug folder"


def test_inductor_trace_options_point_to_the_debug_folder() -> None:
    # "Each file in that debug trace can be enabled/disabled via torch._inductor.config.trace.*"
    with pytest.warns(UserWarning, match=r"options\['trace.graph_diagram'\]=True: .*EMBER_COMPILE_DEBUG=1"):
        compiled = ember.dynamo.compile(lambda x: x.sin(), options={"trace.graph_diagram": True})
    x = torch.randn(4)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), x.sin())


# -- Excessive Recompilation -------------------------------------------------------


def test_cache_size_limit_bounds_recompiles() -> None:
    dynamo.config.cache_size_limit = 3
    counter = CompileCounter()
    # static shapes: with the default dynamic=None the second size makes the dim dynamic
    fn = ember.dynamo.compile(lambda x: x * 2, backend=counter, dynamic=False)
    with pytest.warns(RuntimeWarning, match=r"hit cache_size_limit \(3\).*was 4, the graph assumed 3"):
        for n in range(1, 7):
            x = torch.randn(n)
            torch.testing.assert_close(fn(x), x * 2)
    assert counter.frame_count == 3


def test_compile_profiler_as_a_context_manager() -> None:
    from ember.dynamo import CompileProfiler

    def my_model():
        for n in (2, 3):
            torch.ones(n).sin()

    def my_model_with_inputs(x):
        return x.sin()

    with CompileProfiler() as prof:
        profiler_model = ember.dynamo.compile(my_model_with_inputs, backend=prof)
        for n in (2, 3, 4):
            profiler_model(torch.randn(n))
        # "setting TorchDynamo's cache limit to 1"
        assert dynamo.config.cache_size_limit == 1
    assert dynamo.config.cache_size_limit == 8
    report = prof.report()
    print(report)
    assert "L['x'].size()[0] was 3, the graph assumed 2" in report


# -- Identifying the cause of a graph break ------------------------------------------


def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    print("woo")
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_explain_four_tuple(capsys: pytest.CaptureFixture[str]) -> None:
    explanation, out_guards, graphs, ops_per_graph = dynamo.explain(toy_example, torch.randn(10), torch.ones(10))
    print(explanation)
    out = capsys.readouterr().out
    # Dynamo produced 3 graphs, with 2 graph break and 6 ops.
    assert "produced 3 graphs, with 2 graph breaks and 6 ops" in out
    assert "Break reasons:" in out
    assert "1. builtin `print` cannot be traced" in out
    assert 'print("woo")' in out and "if b.sum() < 0:" in out
    assert len(graphs) == 3 and len(ops_per_graph) == 3 and len(out_guards) == 3
    assert all(isinstance(g, torch.fx.GraphModule) for g in graphs)


# -- Does torch.func work with torch.compile? ----------------------------------------

def test_vmap_of_a_function_inside_compile() -> None:
    with pytest.warns(UserWarning, match="capture_func_transforms changes nothing in ember"):
        dynamo.config.capture_func_transforms = True

    def f(x):
        return torch.sin(x)

    @ember.dynamo.compile
    def g(x):
        return torch.vmap(f)(x)

    x = torch.randn(2, 3)
    torch.testing.assert_close(g(x), x.sin())
    counter = CompileCounter()  # captured: one graph, no break
    torch.testing.assert_close(ember.dynamo.compile(g.__wrapped__, backend=counter, fullgraph=True)(x), x.sin())
    assert counter.frame_count == 1


def test_limitation_tuple_inputs_fall_back_to_eager() -> None:
    dynamo.config.capture_func_transforms = True

    def fn(x):
        x1, x2 = x
        return x1 + x2

    def my_fn(x):
        return torch.func.vmap(fn)(x)

    x1 = torch.randn(3, 3, 3)
    x2 = torch.randn(3, 3, 3)
    # Unsupported, falls back to eager-mode PyTorch
    output = ember.dynamo.compile(my_fn)((x1, x2))
    torch.testing.assert_close(output, x1 + x2)


def test_limitation_keyword_arguments_fall_back_to_eager() -> None:
    dynamo.config.capture_func_transforms = True

    def fn(x, y):
        return (x + y).sum()

    def my_fn(x, y):
        return torch.func.grad(fn)(x, y=y)

    x = torch.randn(3, 3)
    y = torch.randn(3, 3)
    # Unsupported, falls back to eager-mode PyTorch
    output = ember.dynamo.compile(my_fn)(x, y)
    torch.testing.assert_close(output, torch.ones(3, 3))


some_list: list[int] = []


def test_limitation_observable_side_effects_fall_back_to_eager() -> None:
    dynamo.config.capture_func_transforms = True
    some_list.clear()

    def f(x, y):
        some_list.append(1)
        return x + y

    def my_fn(x, y):
        return torch.func.vmap(f)(x, y)

    x = torch.ones(2, 3)
    y = torch.randn(2, 3)
    # Unsupported, falls back to eager-mode PyTorch
    output = ember.dynamo.compile(my_fn)(x, y)
    torch.testing.assert_close(output, x + y)
    assert some_list == [1]  # the side effect happened once, as in eager


def test_limitation_vmap_over_stride_falls_back_to_eager() -> None:
    dynamo.config.capture_func_transforms = True

    def bad_fn(x):
        x.stride()
        return x

    def my_fn(x):
        return torch.func.vmap(bad_fn)(x)

    x = torch.randn(3, 3, 3)
    # Unsupported, falls back to eager-mode PyTorch
    output = ember.dynamo.compile(my_fn)(x)
    torch.testing.assert_close(output, x)


# -- Which NumPy features does torch.compile support? -----------------------------------


def test_numpy_semantics_and_the_documented_deviations() -> None:
    # NumPy 2 semantics inside the graph, with the four deviations the seed lists
    counter = CompileCounter()

    @ember.dynamo.compile(backend=counter)
    def numpy_fn(i8: np.ndarray, f32: np.ndarray, x: np.ndarray):
        nep50 = (i8 + 3, f32 * 2.5, i8 / 2, f32 + x)  # NEP 50: Python scalars are weak
        scalar = np.float32(3) * x[0, 0]  # a NumPy scalar: a 0-D array
        flipped = np.flip(x, 0)  # negative strides: a copy
        stepped = x[::-1, ::2]
        tril = np.tril_indices(3)  # an array, not a tuple of arrays
        return nep50, scalar, flipped, stepped, tril

    i8 = np.arange(6, dtype=np.int8)
    f32 = np.ones(6, dtype=np.float32)
    x = np.random.randn(6, 6)
    nep50, scalar, flipped, stepped, tril = numpy_fn(i8, f32, x)
    assert counter.frame_count == 1
    for got, expected in zip(nep50, (i8 + 3, f32 * 2.5, i8 / 2, f32 + x)):
        assert isinstance(got, np.ndarray) and got.dtype == expected.dtype
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert [a.dtype for a in nep50] == [np.int8, np.float32, np.float64, np.float64]
    assert isinstance(scalar, np.ndarray) and scalar.shape == () and scalar.dtype == np.float64
    np.testing.assert_allclose(scalar, np.float32(3) * x[0, 0])
    assert all(s >= 0 for s in flipped.strides) and all(s >= 0 for s in stepped.strides)
    np.testing.assert_array_equal(flipped, np.flip(x, 0))
    np.testing.assert_array_equal(stepped, x[::-1, ::2])
    assert isinstance(tril, np.ndarray)
    np.testing.assert_array_equal(tril, np.stack(np.tril_indices(3)))


def test_unsupported_numpy_features_fall_back_to_numpy() -> None:
    # non-numeric dtypes and ufunc methods: NumPy runs that piece, with a break reason
    def numpy_fn(x: np.ndarray, words: np.ndarray):
        return np.add.reduce(x * 2), words

    x = np.arange(6.0)
    words = np.array(["a", "b"])
    report = dynamo.explain(numpy_fn)(x, words)
    assert report.graph_count == 0 or report.graph_break_count >= 1
    assert any("add" in str(r) or "ufunc" in str(r) or "dtype" in str(r) for r in report.break_reasons), report
    got, same = ember.dynamo.compile(numpy_fn, backend="eager")(x, words)
    np.testing.assert_allclose(got, np.add.reduce(x * 2))
    assert same is words


# -- Can I execute NumPy code on CUDA via torch.compile? -------------------------------


def test_numpy_through_tensors_numpy_and_from_numpy() -> None:
    # CPU rendering of the cuda example: .numpy()/from_numpy are hints to the compiler
    counter = CompileCounter()

    @ember.dynamo.compile(backend=counter)
    def numpy_fn(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        X, Y = X.numpy(), Y.numpy()
        Z = np.sum(X[:, :, None] * Y[:, None, :], axis=(-2, -1))
        return torch.from_numpy(Z)

    X = torch.randn(1024, 64)
    Y = torch.randn(1024, 64)
    with torch.device("cpu"):
        Z = numpy_fn(X, Y)
    torch.testing.assert_close(Z, (X[:, :, None] * Y[:, None, :]).sum((-2, -1)), rtol=1e-4, atol=1e-4)
    assert counter.frame_count == 1
