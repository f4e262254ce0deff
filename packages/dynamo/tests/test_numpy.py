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
    # (no Python scalar in the NumPy code: torch._numpy would make it a tensor on the
    # default device, a break; a frame without a graph may come from the frame cache)
    x = np.arange(4.0)
    counter = CompileCounter()
    with torch.device("meta"), pytest.warns(UserWarning, match="on the CPU"):
        got = ember.dynamo.compile(lambda a: a * a, backend=counter)(x)
    np.testing.assert_allclose(got, x * x)
    assert counter.frame_count == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_array_passed_twice_is_one_tensor(backend: str) -> None:
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


# -- a sweep of NumPy calls, each compared with NumPy (value, dtype, shape); where
# torch._numpy would differ (dtype), the call is a break and NumPy runs it
rng = np.random.default_rng(0)
f64 = rng.standard_normal((4, 5))
f32 = f64.astype(np.float32)
i64 = rng.integers(-5, 5, (4, 5))
i8 = i64.astype(np.int8)
u8 = np.abs(i64).astype(np.uint8)
b = f64 > 0
pos = np.abs(f64) + 0.5
def _setitem_column(a: np.ndarray) -> np.ndarray:
    a[:, 0] = 9.0
    return a


SWEEP: dict[str, Callable[[], tuple[Callable[..., Any], tuple[np.ndarray, ...]]]] = {
 "i64_pow": lambda: (lambda a: a ** 2, (i64,)),
 "floordiv_neg": lambda: (lambda a: a // -3, (i64,)),
 "mod_neg": lambda: (lambda a: a % -3, (i64,)),
 "f_mod": lambda: (lambda a: np.fmod(a, 3), (i64,)),
 "sqrt_int": lambda: (lambda a: np.sqrt(np.abs(a)), (i64,)),
 "exp_f32": lambda: (lambda a: np.exp(a), (f32,)),
 "mean_int": lambda: (lambda a: np.mean(a, axis=0), (i64,)),
 "sum_bool": lambda: (lambda a: a.sum(), (b,)),
 "sum_i8": lambda: (lambda a: np.sum(a, axis=1), (i8,)),
 "prod_u8": lambda: (lambda a: np.prod(a, axis=1), (u8,)),
 "std": lambda: (lambda a: np.std(a, axis=1, ddof=1), (f64,)),
 "var_f32": lambda: (lambda a: a.var(), (f32,)),
 "argmax": lambda: (lambda a: np.argmax(a, axis=1), (f64,)),
 "cumprod": lambda: (lambda a: np.cumprod(a, axis=0), (i8,)),
 "matmul": lambda: (lambda a, c: a @ c.T, (f64, f32)),
 "dot": lambda: (lambda a, c: np.dot(a, c.T), (i64, f64)),
 "einsum": lambda: (lambda a, c: np.einsum("ij,kj->ik", a, c), (f64, f64)),
 "where3": lambda: (lambda a: np.where(a > 0, a, -1), (i64,)),
 "clip": lambda: (lambda a: np.clip(a, -1, 2), (i64,)),
 "round": lambda: (lambda a: np.round(a * 10, 1), (f64,)),
 "around_half": lambda: (lambda a: np.round(np.array([0.5, 1.5, 2.5, -0.5]) + a[0, :4] * 0), (f64,)),
 "sort": lambda: (lambda a: np.sort(a, axis=1), (f64,)),
 "argsort": lambda: (lambda a: np.argsort(a, axis=0), (f64,)),
 "transpose": lambda: (lambda a: np.transpose(a) + 1, (f64,)),
 "reshape_F": lambda: (lambda a: a.reshape(5, 4) * 2, (f64,)),
 "ravel": lambda: (lambda a: a.T.ravel(), (f64,)),
 "stack": lambda: (lambda a, c: np.stack([a, c], axis=-1), (f64, f32)),
 "vstack": lambda: (lambda a, c: np.vstack([a, c]), (i8, u8)),
 "linspace": lambda: (lambda a: a[0] + np.linspace(0, 1, 5), (f64,)),
 "arange": lambda: (lambda a: a[0] + np.arange(5), (i8,)),
 "zeros_like": lambda: (lambda a: np.zeros_like(a) + np.ones((4, 5)), (f32,)),
 "eye": lambda: (lambda a: a[:4, :4] @ np.eye(4), (f64,)),
 "full": lambda: (lambda a: np.full((4, 5), 7) + a, (i8,)),
 "maximum": lambda: (lambda a, c: np.maximum(a, c), (i8, f32)),
 "log1p": lambda: (lambda a: np.log1p(a), (pos,)),
 "tanh_int": lambda: (lambda a: np.tanh(a), (i8,)),
 "bool_ops": lambda: (lambda a, c: (a & c) | ~a, (b, b)),
 "cmp_mixed": lambda: (lambda a, c: a < c, (i64, f32)),
 "any_all": lambda: (lambda a: (np.any(a, axis=0), np.all(a, axis=1)), (b,)),
 "astype_int": lambda: (lambda a: (a * 3.7).astype(np.int32), (f64,)),
 "astype_u8_wrap": lambda: (lambda a: (a * 100).astype(np.uint8), (i64,)),
 "float32_scalar": lambda: (lambda a: a * np.float32(2), (f32,)),
 "float64_scalar_f32": lambda: (lambda a: a * np.float64(2), (f32,)),
 "expand_dims": lambda: (lambda a: np.expand_dims(a, 0).shape, (f64,)),
 "outer": lambda: (lambda a: np.outer(a[0], a[1]), (f64,)),
 "diff": lambda: (lambda a: np.diff(a, axis=1), (i64,)),
 "tril": lambda: (lambda a: np.tril(a), (f64,)),
 "norm": lambda: (lambda a: np.linalg.norm(a), (f32,)),
 "inv": lambda: (lambda a: np.linalg.inv(a[:4, :4] + 4 * np.eye(4)), (f64,)),
 "fft": lambda: (lambda a: np.fft.fft(a).real, (f64,)),
 "setitem_slice": lambda: (_setitem_column, (f64.copy(),)),
 "iadd_int_into_float": lambda: (lambda a: (a.__iadd__(2), a)[1], (f64.copy(),)),
 "fancy_idx": lambda: (lambda a: a[[0, 2], 1:3], (f64,)),
 "neg_idx_setitem": lambda: (lambda a: np.concatenate([a[-1:], a[:-1]]), (i64,)),
 "true_divide_u8": lambda: (lambda a: a / a.max(), (u8,)),
 "int_div_scalar_rev": lambda: (lambda a: 10 / (np.abs(a) + 1), (i64,)),
 "square_int": lambda: (lambda a: np.square(a), (i8,)),
 "power_neg_float": lambda: (lambda a: np.power(np.abs(a) + 1.0, -1), (i64,)),
 "mean_f32_keep": lambda: (lambda a: a.mean(axis=1, keepdims=True), (f32,)),
 "max_ret": lambda: (lambda a: a.max(axis=0), (i8,)),
 "unique": lambda: (lambda a: np.unique(a), (i64,)),
 "nonzero": lambda: (lambda a: np.nonzero(a), (i64,)),
 "boolmask": lambda: (lambda a: a[a > 0], (f64,)),
}


@pytest.mark.parametrize("name", list(SWEEP))
def test_numpy_call_matches_numpy(name: str) -> None:
    fn, args = SWEEP[name]()
    expected = fn(*[a.copy() for a in args])
    got = ember.dynamo.compile(fn, backend="eager")(*[a.copy() for a in args])
    assert_same(got, expected)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SWEEP))
def test_numpy_call_matches_numpy_on_inductor(name: str) -> None:
    fn, args = SWEEP[name]()
    expected = fn(*[a.copy() for a in args])
    got = ember.dynamo.compile(fn, backend="inductor")(*[a.copy() for a in args])
    assert_same(got, expected)


def test_dtype_differences_from_numpy_are_breaks() -> None:
    def f(a: np.ndarray) -> np.ndarray:
        return np.tanh(a) + 1

    a = np.arange(6, dtype=np.int8)
    report = ember.dynamo.explain(f)(a)
    assert any("where NumPy gives float16" in str(r) for r in report.break_reasons), report
    run(f, a, graphs=1)  # `+ 1` on NumPy's float16 result is still captured


def test_python_int_out_of_range_raises_as_numpy_does() -> None:
    with pytest.raises(OverflowError):
        ember.dynamo.compile(lambda a: a + 300, backend="eager")(np.arange(3, dtype=np.int8))


SCALE = np.float64(2.0)


def test_numpy_scalars_promote_as_arrays() -> None:
    def f(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return a * SCALE, np.float32(3) * a

    run(f, np.ones(3, dtype=np.float32))


# -- common NumPy programs: loops, masks, linalg results, lists, dicts, dtypes ---------


def _accumulate_rows(X: np.ndarray) -> np.ndarray:
    total = np.zeros(X.shape[1])
    for i in range(X.shape[0]):
        total += X[i]
    return total


def _mask_and_copies(X: np.ndarray) -> tuple[Any, ...]:
    Y = X.copy()
    Y[Y > 0] = 0.0
    return Y, X.flatten(), np.zeros_like(X), np.empty(X.shape).shape


def _linalg(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    A = X[:3, :3] @ X[:3, :3].T + np.eye(3)
    w, _ = np.linalg.eigh(A)
    return w, np.linalg.solve(A, np.ones(3))


def _dict_and_dtypes(X: np.ndarray) -> dict[str, Any]:
    return {"int": X.astype(int), "kind": X.dtype.kind, "is_f64": X.dtype == np.float64}


PROGRAMS: dict[str, Callable[[np.ndarray], Any]] = {
    "accumulate rows": _accumulate_rows,
    "mask and copies": _mask_and_copies,
    "linalg results": _linalg,
    "split into a list": lambda X: [p.sum(axis=0) for p in np.split(X, 2, axis=0)],
    "dict and dtypes": _dict_and_dtypes,
    "enumerate rows": lambda X: np.stack([r * i for i, r in enumerate(X)]),
    "views": lambda X: (X.T.ravel()[::2], np.ascontiguousarray(X.T), X.reshape(-1)[:5]),
}


def _same(got: Any, want: Any) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys()
        for k in want:
            _same(got[k], want[k])
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, type(want)) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    else:
        assert_same(got, want)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_common_numpy_programs(name: str, backend: str) -> None:
    fn = PROGRAMS[name]
    X = np.random.default_rng(0).standard_normal((4, 6))
    counter = CompileCounterWithBackend(backend)
    _same(ember.dynamo.compile(fn, backend=counter)(X.copy()), fn(X.copy()))
    assert counter.frame_count == 1


def test_out_arguments_are_left_to_numpy() -> None:
    def f(x: np.ndarray, buf: np.ndarray) -> np.ndarray:
        np.add(x, 1, out=buf)
        x.sum(axis=0, out=buf[0])
        return buf * 2

    x, buf, ebuf = np.ones((2, 2)), np.zeros((2, 2)), np.zeros((2, 2))
    expected = f(x.copy(), ebuf)
    report = ember.dynamo.explain(f)(x.copy(), np.zeros((2, 2)))
    assert sum("`out=`" in str(r) for r in report.break_reasons) == 2, report
    np.testing.assert_allclose(ember.dynamo.compile(f, backend="eager")(x, buf), expected)
    np.testing.assert_allclose(buf, ebuf)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tensor_changed_in_place_and_passed_twice_runs_in_program_order(backend: str) -> None:
    # compiled for distinct inputs, then called with one tensor for both: inductor's kernel
    # read `b` after writing `a` in an order of its own ([2, 2, 0] for [2, 2, 2])
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(torch.tensor(1.0, dtype=torch.float64))
        return b * torch.tensor(2.0, dtype=torch.float64)

    g = ember.dynamo.compile(f, backend=backend)
    y = torch.zeros(3, dtype=torch.float64)
    torch.testing.assert_close(g(y, y.clone()), torch.zeros(3, dtype=torch.float64))
    x, ex = torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    torch.testing.assert_close(g(x, x), f(ex, ex))
    torch.testing.assert_close(x, ex)
