"""NumPy code in captured frames (``config.trace_numpy``): arrays and NumPy calls traced
into the graph through ``torch._numpy``. Every result is compared with NumPy run
eagerly on the same arrays (dtype included: NumPy's promotion rules are the point);
graph counts say the code was captured, not run eagerly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch

import ember.dynamo
from ember.dynamo.testing import CompileCounter, CompileCounterWithBackend

BACKENDS = ["eager", "aot_eager", "inductor"]


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    ember.dynamo.reset()
    ember.dynamo.config.reset()


def run(fn: Callable[..., Any], *args: Any, backend: str = "eager", graphs: int = 1) -> Any:
    """``fn`` compiled and eager on ``args``: results must match in value, type and dtype."""
    expected = fn(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    counter = CompileCounterWithBackend(backend)
    got = ember.dynamo.compile(fn, backend=counter)(*args)
    assert_same(got, expected)
    assert counter.frame_count == graphs
    return got


def assert_same(got: Any, expected: Any) -> None:
    if isinstance(expected, (tuple, list)):
        assert type(got) is type(expected) and len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e)
        return
    if isinstance(expected, np.generic):
        # NumPy scalars are 0-D arrays under compile (the seed's first deviation)
        assert isinstance(got, np.ndarray) and got.shape == (), type(got)
        assert got.dtype == expected.dtype
        np.testing.assert_allclose(got, expected, rtol=1e-6)
        return
    if isinstance(expected, np.ndarray):
        assert isinstance(got, np.ndarray), type(got)
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-6)
        return
    assert got == expected


@pytest.mark.parametrize("backend", BACKENDS)
def test_numpy_in_numpy_out(backend: str) -> None:
    def f(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.sum(x[:, :, None] * y[:, None, :], axis=(-2, -1))

    run(f, np.random.randn(32, 8), np.random.randn(32, 8), backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_methods_attributes_and_functions(backend: str) -> None:
    def f(x: np.ndarray) -> tuple[np.ndarray, ...]:
        a = x.T.reshape(-1, 2).mean(axis=0)
        b = np.linalg.norm(x, axis=1)
        c = np.where(x > 0, x, 0.0) + np.exp(-np.abs(x)) * x.shape[0]
        d = np.concatenate([x, x * 2], axis=1).astype(np.float32)
        return a, b, c, d

    run(f, np.random.randn(6, 4), backend=backend)


def test_nep50_promotion() -> None:
    # NumPy 2: a Python scalar does not widen an array; a NumPy array does
    def f(i8: np.ndarray, f32: np.ndarray, f64: np.ndarray) -> tuple[np.ndarray, ...]:
        return i8 + 3, f32 * 2.5, f32 + f64, i8 / 2, i8 * 1.5

    run(f, np.arange(6, dtype=np.int8), np.ones(6, dtype=np.float32), np.ones(6))


def test_numpy_scalars_are_zero_d_arrays() -> None:
    def f(x: np.ndarray) -> tuple[np.ndarray, ...]:
        return np.sum(x), np.float32(3) * x, x.max()

    got = run(f, np.random.randn(5))
    assert got[0].shape == ()


def test_negative_strides_are_copies() -> None:
    def f(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.flip(x, 0) + 1, x[::-1] * 2

    run(f, np.arange(12.0).reshape(4, 3))
    # an input with a negative stride is read through a copy
    base = np.arange(10.0)
    run(lambda x: x * 3, base[::-2])


def test_int_arrays_and_integer_division() -> None:
    def f(x: np.ndarray) -> tuple[np.ndarray, ...]:
        return x // 3, x % 3, x / 4, np.cumsum(x)

    run(f, np.arange(-6, 6, dtype=np.int64))


def test_returning_an_input_gives_the_same_array() -> None:
    x = np.ones(3)
    out = ember.dynamo.compile(lambda a, b: (a, b + 1), backend="eager")(x, np.ones(2))
    assert out[0] is x


def test_in_place_updates_write_through_to_the_input() -> None:
    def f(x: np.ndarray) -> np.ndarray:
        x += 1
        x[0] = -5.0
        return x * 2

    x = np.arange(4.0)
    expected_x = x.copy()
    expected = f(expected_x)
    counter = CompileCounter()
    got = ember.dynamo.compile(f, backend=counter)(x)
    np.testing.assert_allclose(got, expected)
    np.testing.assert_allclose(x, expected_x)
    assert counter.frame_count == 1


def test_read_only_arrays() -> None:
    x = np.arange(6.0)
    x.flags.writeable = False
    run(lambda a: a * a, x)


def test_guards_recompile_on_dtype_shape_and_layout() -> None:
    counter = CompileCounter()
    f = ember.dynamo.compile(lambda a: a * 2 + 1, backend=counter)
    x = np.ones((3, 4))
    f(x)
    f(np.zeros((3, 4)))
    assert counter.frame_count == 1
    for new in (np.ones((3, 4), dtype=np.float32), np.ones((5, 4)), np.ones((4, 3)).T):
        out = f(new)
        assert out.dtype == new.dtype and out.shape == new.shape
        np.testing.assert_allclose(out, new * 2 + 1)
    assert counter.frame_count == 4


def test_tensor_numpy_and_from_numpy_are_hints() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        a = x.numpy()
        return torch.from_numpy(np.tanh(a) * 2) + 1

    x = torch.randn(8)
    counter = CompileCounter()
    got = ember.dynamo.compile(f, backend=counter)(x)
    torch.testing.assert_close(got, f(x))
    assert counter.frame_count == 1


def test_numpy_of_a_tensor_requiring_grad_breaks_as_eager_raises() -> None:
    def f(x: torch.Tensor) -> Any:
        return x.numpy()

    with pytest.raises(RuntimeError, match="requires grad"):
        ember.dynamo.compile(f, backend="eager")(torch.randn(3, requires_grad=True))


def test_graph_break_materializes_arrays() -> None:
    def f(x: np.ndarray) -> np.ndarray:
        y = x * 2
        print("break")
        return np.sum(y, axis=0)

    run(f, np.random.randn(4, 3), graphs=2)


def test_trace_numpy_false_breaks_with_a_reason() -> None:
    ember.dynamo.config.trace_numpy = False
    report = ember.dynamo.explain(lambda x: np.sum(x * 2))(np.ones(3))
    assert report.graph_count == 0
    assert any("ndarray" in str(r) or "NumPy" in str(r) for r in report.break_reasons), report


def test_random_stays_numpy() -> None:
    def f(x: np.ndarray) -> np.ndarray:
        return x + np.random.rand(*x.shape)

    np.random.seed(0)
    expected = f(np.zeros(4))
    np.random.seed(0)
    got = ember.dynamo.compile(f, backend="eager")(np.zeros(4))
    np.testing.assert_allclose(got, expected)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_wrap_numpy_gradients_match_torch(backend: str) -> None:
    @ember.dynamo.compile(backend=backend, fullgraph=True)
    @ember.dynamo.wrap_numpy
    def f(x: Any, y: Any) -> Any:
        return np.mean(np.tanh(x) * y), x * 2

    x = torch.randn(5, 3, requires_grad=True)
    y = torch.randn(5, 3)
    loss, doubled = f(x, y)
    assert isinstance(loss, torch.Tensor) and isinstance(doubled, torch.Tensor)
    loss.backward()
    x2 = x.detach().clone().requires_grad_()
    (torch.tanh(x2) * y).mean().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(doubled, x.detach() * 2)


def test_wrap_numpy_eagerly_converts_through_numpy() -> None:
    f = ember.dynamo.wrap_numpy(lambda x: np.cumsum(x))
    out = f(torch.arange(4.0))
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, torch.tensor([0.0, 1.0, 3.0, 6.0]))


def test_wrap_numpy_graph_break_resumes_in_a_graph() -> None:
    counter = CompileCounter()

    @ember.dynamo.compile(backend=counter)
    @ember.dynamo.wrap_numpy
    def f(x: Any) -> Any:
        prod = x * 3
        print("break")
        return np.sum(prod, axis=0)

    x = torch.randn(4, 3)
    out = f(x)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, (x * 3).sum(0))
    assert counter.frame_count >= 2  # before and after the break


def test_numpy_on_constants_folds_to_python_scalars() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        n = int(np.prod(x.shape))
        return x.reshape(n) * np.sqrt(4.0)

    x = torch.randn(2, 3)
    counter = CompileCounter()
    got = ember.dynamo.compile(f, backend=counter)(x)
    torch.testing.assert_close(got, f(x))
    assert counter.frame_count == 1


def test_non_numeric_arrays_pass_through_to_numpy() -> None:
    def f(x: np.ndarray, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x * 2, words

    words = np.array(["a", "b"])
    counter = CompileCounter()
    got, same = ember.dynamo.compile(f, backend=counter)(np.arange(3.0), words)
    assert same is words
    np.testing.assert_allclose(got, np.arange(3.0) * 2)
    assert counter.frame_count == 1


def test_default_device_other_than_cpu_warns() -> None:
    x = np.arange(4.0)
    with torch.device("meta"), pytest.warns(UserWarning, match="on the CPU"):
        got = ember.dynamo.compile(lambda a: a + 1, backend="eager")(x)
    np.testing.assert_allclose(got, x + 1)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_one_array_passed_twice_is_one_tensor(backend: str) -> None:
    # (inductor: see the report of issue 17: a kernel marks an aliased input __restrict__)
    def f(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a += 1
        return b * 2

    g = ember.dynamo.compile(f, backend=backend)
    y = np.zeros(3)
    np.testing.assert_allclose(g(y, y.copy()), np.zeros(3))
    x, ex = np.zeros(3), np.zeros(3)
    np.testing.assert_allclose(g(x, x), f(ex, ex))
    np.testing.assert_allclose(x, ex)


@pytest.mark.parametrize("backend", BACKENDS)
def test_writing_an_array_read_through_a_copy_is_left_to_numpy(backend: str) -> None:
    def f(x: np.ndarray) -> np.ndarray:
        x += 1
        return x * 2

    base, expected_base = np.arange(4.0), np.arange(4.0)
    got = ember.dynamo.compile(f, backend=backend)(base[::-1])
    np.testing.assert_allclose(got, f(expected_base[::-1]))
    np.testing.assert_allclose(base, expected_base)  # written through the view, as NumPy does
    read_only = np.arange(3.0)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        ember.dynamo.compile(f, backend=backend)(read_only)
    report = ember.dynamo.explain(f)(np.arange(4.0)[::-1])
    assert any("through a copy" in str(r) for r in report.break_reasons)
