"""The native graph runner (ADR 0068): each C++ graph's wrapper run as a native program.

Every program here is compiled once and run both ways — the native program and the
generated Python wrapper it was translated from (the reference) — on the same inputs,
and both are compared with eager PyTorch: values, strides, which inputs were written,
what is returned as the caller's own tensor, and the errors raised.
"""

from __future__ import annotations

import operator
import threading
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from ember.inductor import (
    CompiledGraph,
    InductorOptions,
    KernelIndexError,
    compile_graph,
    native_runner,
)
from ember.inductor.errors import InputMismatchError
from ember.ir.updates import inputs_written, set_input_updates

from .conftest import CACHE
from .test_symbolic import Builder

aten = torch.ops.aten

OPTIONS = InductorOptions(cache_dir=CACHE, fallback_on_error=False)


@pytest.fixture(autouse=True)
def _runner(monkeypatch: pytest.MonkeyPatch) -> None:
    """Translation failures are errors here, and the runner module is built before the test."""
    monkeypatch.setenv("EMBER_NATIVE_RUNNER", "strict")
    if native_runner.runner_module(wait=True) is None:
        pytest.fail(f"the native runner could not be built: {native_runner.runner_error()}")


def _both(fn: Callable[..., Any], *inputs: Any, gm: torch.fx.GraphModule | None = None) -> tuple[CompiledGraph, CompiledGraph]:
    """``fn`` compiled twice: natively, and as its Python wrapper."""
    gm = gm if gm is not None else make_fx(fn)(*inputs)
    native = compile_graph(gm, list(inputs), OPTIONS)
    assert isinstance(native, CompiledGraph) and native.runs_natively
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMBER_NATIVE_RUNNER", "0")
        python = compile_graph(gm, list(inputs), OPTIONS)
    assert isinstance(python, CompiledGraph) and not python.runs_natively
    return native, python


def _same(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        assert a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride(), (a.stride(), b.stride())
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, equal_nan=True)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


def _run_both(fn: Callable[..., Any], *inputs: torch.Tensor) -> None:
    native, python = _both(fn, *inputs)
    expected = fn(*[x.clone() for x in inputs])
    got_native = native(*[x.clone() for x in inputs])
    got_python = python(*[x.clone() for x in inputs])
    _same(got_native, got_python)
    torch.testing.assert_close(got_native, expected, atol=1e-5, rtol=1e-5)


def _attention_block(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    qkv = F.linear(x, w, b)  # an extern addmm on views
    q, k, v = qkv.view(2, 8, 3, 4, 8).permute(2, 0, 3, 1, 4)
    a = F.scaled_dot_product_attention(q, k, v)  # keyword arguments, a tuple result
    return F.layer_norm(a.transpose(1, 2).reshape(2, 8, 32) + x, (32,))


def _convnet(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    y = F.relu(F.conv2d(x, w1, padding=1))  # list and bool constants, a None bias
    y = F.max_pool2d(y, 2)  # a tuple result, one part used
    return torch.cat([F.conv2d(y, w2, groups=2), y[:, :4]], 1).mean((2, 3))


def _mixed(x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x.cumsum(0)  # an extern without a lowering here
    z = torch.index_put(x, (idx,), torch.ones(idx.shape[0], x.shape[1]), accumulate=True)  # Tensor?[]
    return y, z * 2, x.t(), (y.sum() > 0).to(torch.int64)


@pytest.mark.parametrize("fn,inputs", [
    (_attention_block, lambda: (torch.randn(2, 8, 32), torch.randn(96, 32) / 6, torch.randn(96))),
    (_convnet, lambda: (torch.randn(2, 4, 8, 8), torch.randn(8, 4, 3, 3), torch.randn(8, 4, 1, 1))),
    (_mixed, lambda: (torch.randn(6, 5), torch.tensor([0, 2, 2, 5]))),
], ids=["attention", "convnet", "mixed"])
def test_native_and_python_wrappers_agree_with_eager(fn: Callable[..., Any], inputs: Callable[[], tuple[torch.Tensor, ...]]) -> None:
    torch.manual_seed(0)
    _run_both(fn, *inputs())


def test_a_graph_returning_its_input_returns_the_callers_object() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x + y

    x, y = torch.randn(4), torch.randn(4)
    native, _ = _both(f, x, y)
    out = native(x, y)
    assert out[0] is x
    torch.testing.assert_close(out[1], x + y)


def test_a_boxed_call_empties_the_list_and_the_inputs_live_on_in_the_result() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.view(2, 8), x.sin()

    native, _ = _both(f, torch.randn(16))
    x = torch.randn(16)
    x.tag = "mine"  # type: ignore[attr-defined]
    args = [x]
    view, s = native.call_boxed(args)
    assert args == []
    torch.testing.assert_close(s, x.sin())
    assert view._base is x and view.data_ptr() == x.data_ptr()


def test_an_input_written_in_place_reaches_the_callers_tensor() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x + y

    x, y = torch.randn(8), torch.randn(8)
    gm = make_fx(f)(x.clone(), y)
    native, python = _both(f, x.clone(), y, gm=gm)
    a, b = x.clone(), x.clone()
    _same(native(a, y), python(b, y))
    torch.testing.assert_close(a, x * 2)
    torch.testing.assert_close(b, x * 2)


def test_a_kernel_index_error_is_raised_natively_and_the_graph_runs_again() -> None:
    weight = torch.randn(10, 32)

    def f(ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, weight) * 2

    good = torch.randint(0, 10, (3, 4))
    native, python = _both(f, good)
    bad = good.clone()
    bad[1, 2] = 10
    for c in (native, python):
        with pytest.raises(KernelIndexError, match="index out of range in generated kernel"):
            c(bad)
    _same(native(good), f(good))


def test_an_error_after_an_input_was_written_says_so() -> None:
    """A kernel writes input ``x`` in place (an update, as aotgrad names one), then a
    later kernel's index error: the exception carries the note (ember.ir.updates) that
    running the graph again would write ``x`` twice, from both wrappers."""

    def f(x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        new = x * 2
        return new, F.embedding(ids, new.sum(1, keepdim=True).expand(10, 4).contiguous()) + 1

    x, ids = torch.randn(10, 4), torch.randint(0, 10, (3,))
    gm = make_fx(f)(x.clone(), ids)
    set_input_updates(gm, [(0, 0)])
    native, python = _both(f, x.clone(), ids, gm=gm)
    assert "computed in place" in python.report.wrapper_source
    a, b = x.clone(), x.clone()
    _same(native(a, ids), python(b, ids))
    torch.testing.assert_close(a, x * 2)
    bad = torch.tensor([1, 11, 2])
    verdicts = []
    for c in (native, python):
        with pytest.raises(KernelIndexError) as info:
            c(x.clone(), bad)
        verdicts.append(inputs_written(info.value))
    assert verdicts == [True, True]


def test_a_warning_inside_the_program_is_a_python_warning() -> None:
    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return torch.index_put(x, (idx,), torch.ones(idx.shape[0]), accumulate=True).cumsum(0)

    x, idx = torch.randn(6), torch.tensor([0, 2, 2])
    native, _ = _both(f, x, idx)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.testing.assert_close(native(x, idx), f(x, idx))
    assert not [w for w in seen if "ember" in str(w.message)]


def test_symbolic_sizes_are_computed_per_call() -> None:
    """A graph over ``x: [a, b]`` (fake symbolic inputs, as ember.dynamo makes them): sizes
    bound from the input, size expressions in allocations, views and kernel arguments, a
    size returned, an extern at symbolic sizes, and a transposed input copied into the
    compiled layout (the ``_input`` slow path)."""
    b = Builder()
    x = b.input("x", ["a", "b"], {"a": 4, "b": 6})
    n = b.call(aten.sym_size.int, x, 0)
    m = b.call(aten.sym_size.int, x, 1)
    nm = b.call(operator.mul, n, m)
    mean = b.call(aten.mean.dim, x, [1], True)
    flat = b.call(aten.view.default, b.call(aten.sub.Tensor, x, mean), [nm])
    gram = b.call(aten.mm.default, x, b.call(aten.t.default, x))
    gm = b.module(flat, nm, b.call(aten.cumsum.default, gram, 0))
    native, python = _both(lambda t: t, *b.inputs, gm=gm)
    assert native.report.symbolic
    for shape in [(4, 6), (2, 3), (9, 17)]:
        t = torch.randn(*shape)
        got = native(t)
        _same(got, python(t))
        torch.testing.assert_close(got[0], (t - t.mean(1, keepdim=True)).reshape(-1))
        assert got[1] == shape[0] * shape[1]
        torch.testing.assert_close(got[2], (t @ t.t()).cumsum(0), atol=1e-4, rtol=1e-5)
    t = torch.randn(7, 3).t()
    _same(native(t), python(t))
    with pytest.raises(InputMismatchError):
        native(torch.randn(3, 4, 5))


def test_threads_run_one_program_at_once() -> None:
    """The GIL is released while a program runs: two threads calling it at once each
    get their own results."""

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ w).sum(1)

    w = torch.randn(64, 64)
    native, _ = _both(f, torch.randn(32, 64), w)
    inputs = [torch.randn(32, 64) for _ in range(4)]
    results: dict[int, list[torch.Tensor]] = {i: [] for i in range(4)}

    def work(i: int) -> None:
        for _ in range(50):
            results[i].append(native(inputs[i], w))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        for r in results[i]:
            torch.testing.assert_close(r, f(inputs[i], w))


def test_the_runner_off_runs_the_python_wrapper(monkeypatch: pytest.MonkeyPatch) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.exp() + 1

    monkeypatch.setenv("EMBER_NATIVE_RUNNER", "0")
    x = torch.randn(4)
    c = compile_graph(make_fx(f)(x), [x], OPTIONS)
    assert isinstance(c, CompiledGraph) and not c.runs_natively
    torch.testing.assert_close(c(x), f(x))


def test_a_wrong_input_count_is_an_error_naming_it() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * y

    native, _ = _both(f, torch.randn(3), torch.randn(3))
    with pytest.raises((ValueError, TypeError)):
        native._call([torch.randn(3)])


def test_a_statement_it_does_not_know_keeps_the_python_wrapper() -> None:
    ns = {"_inputs_written": None}
    with pytest.raises(native_runner.Untranslatable, match="statement"):
        native_runner.translate("def call(args):\n    while True:\n        pass\n    return []\n", ns, [])
    with pytest.raises(native_runner.Untranslatable):
        native_runner.translate("def call(args):\n    x = print(1)\n    return [x]\n", ns, [])


def test_a_graph_compiled_while_the_runner_is_built_switches_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first process on a machine builds the runner in a thread: graphs compiled
    meanwhile run their Python wrappers and switch on their first call after the build."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 3).relu()

    x = torch.randn(8)
    monkeypatch.setenv("EMBER_NATIVE_RUNNER", "1")
    module = native_runner.runner_module()
    with monkeypatch.context() as m:
        m.setattr(native_runner, "runner_module", lambda wait=False: None)
        m.setattr(native_runner, "building", lambda: True)
        c = compile_graph(make_fx(f)(x), [x], OPTIONS)
        assert isinstance(c, CompiledGraph) and not c.runs_natively
        torch.testing.assert_close(c(x), f(x))
        assert not c.runs_natively
    assert native_runner.runner_module() is module
    torch.testing.assert_close(c(x), f(x))
    assert c.runs_natively
    torch.testing.assert_close(c(x), f(x))
