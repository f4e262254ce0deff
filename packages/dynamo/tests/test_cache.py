"""The runtime's cache, recompiles, cache limit, stances and run mode.

These drive the runtime with a small stand-in capture (``FakeConvert``: it
guards every tensor argument with TENSOR_MATCH and every int with
CONSTANT_MATCH and returns the original code), so they test the cache
logic independently of the bytecode interpreter.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pytest
import torch

import ember.dynamo
import ember.guards
from ember.dynamo import api
from ember.dynamo.api import STATE
from ember.dynamo.cache import RecompileError
from ember.dynamo.convert_frame import FrameState, GuardedCode
from ember.dynamo.errors import Unsupported
from ember.dynamo.function_entry import CompiledFunction, Runtime
from ember.ir import Guard, GuardKind, GuardSet, Local, encode_value, tensor_payload


class FakeConvert:
    """Capture stand-in: guards tensors and ints, keeps the code, counts calls."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.calls: list[FrameState] = []
        self.fail = fail

    def __call__(self, state: FrameState, compiler: Any, options: Any, hooks: Any) -> GuardedCode:
        self.calls.append(state)
        if self.fail is not None:
            raise self.fail
        guards = []
        for name, value in state.f_locals.items():
            if isinstance(value, torch.Tensor):
                guards.append(Guard(Local(name), GuardKind.TENSOR_MATCH, tensor_payload(value)))
            elif isinstance(value, int):
                guards.append(Guard(Local(name), GuardKind.CONSTANT_MATCH, {"value": encode_value(value)}))
        gs = GuardSet(guards)
        check_fn = ember.guards.compile(gs, state.f_locals, state.f_globals)
        return GuardedCode(state.code, check_fn, gs, [], [])


def runtime_with(convert: FakeConvert, **options: Any) -> Runtime:
    return Runtime(
        ember.dynamo.eager, ember.dynamo.config.to_options(**options), convert=convert, state=STATE
    )


def compiled(fn: Any, convert: FakeConvert, **options: Any) -> CompiledFunction:
    runtime = runtime_with(convert, **options)
    return CompiledFunction(fn, runtime)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


@pytest.fixture(autouse=True)
def _clean_state() -> Any:
    yield
    ember.dynamo.set_stance("default")
    ember.dynamo.reset()


def test_hit_after_first_call() -> None:
    conv = FakeConvert()
    f = compiled(add, conv)
    x, y = torch.randn(4), torch.randn(4)
    for _ in range(3):
        torch.testing.assert_close(f(x, y), x + y)
    assert len(conv.calls) == 1
    assert conv.calls[0].f_locals.keys() == {"x", "y"}
    assert conv.calls[0].fn_name == "add"


def test_recompile_on_new_shape_is_logged_with_reason(caplog: pytest.LogCaptureFixture) -> None:
    conv = FakeConvert()
    f = compiled(add, conv)
    f(torch.randn(4), torch.randn(4))
    with caplog.at_level(logging.INFO, logger="ember.recompiles"):
        f(torch.randn(8), torch.randn(8))
    assert len(conv.calls) == 2
    assert "recompiling `add`" in caplog.text
    assert "because L['x'].size()[0] was 8, the graph assumed 4" in caplog.text
    f(torch.randn(4), torch.randn(4))
    f(torch.randn(8), torch.randn(8))
    assert len(conv.calls) == 2


def test_kwargs_and_defaults_are_bound() -> None:
    def scaled(x: torch.Tensor, k: int = 2, *, bias: int = 1) -> torch.Tensor:
        return x * k + bias

    conv = FakeConvert()
    f = compiled(scaled, conv)
    x = torch.randn(3)
    torch.testing.assert_close(f(x), x * 2 + 1)
    assert conv.calls[0].f_locals == {"x": x, "k": 2, "bias": 1}
    torch.testing.assert_close(f(x, bias=1), x * 2 + 1)
    assert len(conv.calls) == 1
    torch.testing.assert_close(f(x, k=3), x * 3 + 1)
    assert len(conv.calls) == 2


def test_varargs_bound_like_python() -> None:
    def total(*xs: torch.Tensor, **named: torch.Tensor) -> torch.Tensor:
        return sum(xs, torch.zeros(2)) + sum(named.values(), torch.zeros(2))

    conv = FakeConvert()
    f = compiled(total, conv)
    a, b = torch.ones(2), torch.ones(2)
    torch.testing.assert_close(f(a, b, c=a), torch.full((2,), 3.0))
    assert conv.calls[0].f_locals == {"xs": (a, b), "named": {"c": a}}


def test_wrong_arguments_raise_pythons_error() -> None:
    f = compiled(add, FakeConvert())
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'y'"):
        f(torch.randn(2))


def test_cache_size_limit_warns_once_then_runs_eagerly(caplog: pytest.LogCaptureFixture) -> None:
    conv = FakeConvert()
    f = compiled(add, conv, cache_size_limit=2)
    f(torch.randn(1), torch.randn(1))
    f(torch.randn(2), torch.randn(2))
    with pytest.warns(RuntimeWarning, match=r"cache_size_limit \(2\) for `add`") as record:
        out = f(torch.randn(3), torch.randn(3))
    assert "L['x'].size()[0] was 3, the graph assumed 2" in str(record[0].message)
    assert out.shape == (3,)
    assert len(conv.calls) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(torch.randn(5), torch.randn(5))  # no second warning
    f(torch.randn(1), torch.randn(1))  # cached entries still serve their inputs
    assert len(conv.calls) == 2


def test_fail_on_recompile_names_the_guard() -> None:
    conv = FakeConvert()
    f = compiled(add, conv)
    f(torch.randn(4), torch.randn(4))
    ember.dynamo.set_stance("fail_on_recompile")
    f(torch.randn(4), torch.randn(4))  # a hit is fine
    with pytest.raises(RecompileError, match=r"L\['x'\].size\(\)\[0\] was 6, the graph assumed 4"):
        f(torch.randn(6), torch.randn(6))


def test_stance_context_manager_restores() -> None:
    with ember.dynamo.set_stance("force_eager"):
        assert STATE.stance == "force_eager"
    assert STATE.stance == "default"
    with pytest.raises(ValueError, match="unknown stance 'fast'"):
        ember.dynamo.set_stance("fast")


def test_force_eager_compiles_nothing() -> None:
    conv = FakeConvert()
    f = compiled(add, conv)
    with ember.dynamo.set_stance("force_eager"):
        torch.testing.assert_close(f(torch.ones(2), torch.ones(2)), torch.full((2,), 2.0))
    assert conv.calls == []


def test_run_mode_uses_cache_but_never_compiles() -> None:
    conv = FakeConvert()
    f = compiled(add, conv)
    f(torch.randn(4), torch.randn(4))
    with ember.dynamo.run():
        f(torch.randn(4), torch.randn(4))
        out = f(torch.randn(7), torch.randn(7))
    assert out.shape == (7,)
    assert len(conv.calls) == 1
    runner = api.run(f)
    runner(torch.randn(9), torch.randn(9))
    assert len(conv.calls) == 1
    f(torch.randn(9), torch.randn(9))
    assert len(conv.calls) == 2


def test_reset_forgets_entries() -> None:
    conv = FakeConvert()
    f = compiled(add, conv)
    f(torch.randn(4), torch.randn(4))
    ember.dynamo.reset()
    f(torch.randn(4), torch.randn(4))
    assert len(conv.calls) == 2


def test_unsupported_frame_runs_eagerly_and_is_not_retried(caplog: pytest.LogCaptureFixture) -> None:
    conv = FakeConvert(fail=Unsupported("builtin `print` cannot be traced"))
    f = compiled(add, conv)
    with caplog.at_level(logging.INFO, logger="ember.graph_breaks"):
        torch.testing.assert_close(f(torch.ones(2), torch.ones(2)), torch.full((2,), 2.0))
    assert "running it eagerly: builtin `print` cannot be traced" in caplog.text
    f(torch.ones(2), torch.ones(2))
    assert len(conv.calls) == 1


def test_fullgraph_raises_unsupported() -> None:
    f = compiled(add, FakeConvert(fail=Unsupported("nope")), fullgraph=True)
    with pytest.raises(Unsupported, match="nope"):
        f(torch.ones(2), torch.ones(2))


def test_internal_errors_run_eagerly_unless_strict(caplog: pytest.LogCaptureFixture) -> None:
    f = compiled(add, FakeConvert(fail=KeyError("boom")), strict=True)
    with pytest.raises(KeyError):
        f(torch.ones(2), torch.ones(2))
    g = compiled(add, FakeConvert(fail=KeyError("boom")), strict=False)
    with caplog.at_level(logging.WARNING, logger="ember.dynamo"):
        torch.testing.assert_close(g(torch.ones(2), torch.ones(2)), torch.full((2,), 2.0))
    assert "running it eagerly" in caplog.text and "KeyError: 'boom'" in caplog.text


def test_closure_cells_are_guarded_as_locals() -> None:
    def make(k: int) -> Any:
        def scaled(x: torch.Tensor) -> torch.Tensor:
            return x * k

        return scaled

    conv = FakeConvert()
    f2 = compiled(make(2), conv)
    x = torch.ones(2)
    torch.testing.assert_close(f2(x), x * 2)
    assert conv.calls[0].f_locals["x"] is x
    assert conv.calls[0].closure is not None
    assert conv.calls[0].closure[0].cell_contents == 2


def test_same_code_different_closure_shares_cache_but_not_entries() -> None:
    def make(k: int) -> Any:
        def scaled(x: torch.Tensor) -> torch.Tensor:
            return x * k

        return scaled

    conv = FakeConvert()
    runtime = runtime_with(conv)
    f2, f3 = CompiledFunction(make(2), runtime), CompiledFunction(make(3), runtime)
    x = torch.ones(2)
    torch.testing.assert_close(f2(x), x * 2)
    torch.testing.assert_close(f3(x), x * 3)  # k is guarded as L['k']: a miss, not a wrong hit
    assert len(conv.calls) == 2
    torch.testing.assert_close(f2(x), x * 2)
    assert len(conv.calls) == 2


def test_recursion_guard_inside_compile_runs_eagerly() -> None:
    inner_conv = FakeConvert()
    inner = compiled(add, inner_conv)
    seen: list[bool] = []

    class CallsInner(FakeConvert):
        def __call__(self, state: FrameState, compiler: Any, options: Any, hooks: Any) -> GuardedCode:
            seen.append(ember.dynamo.is_compiling())
            inner(torch.ones(1), torch.ones(1))  # a compiled function used while compiling
            return super().__call__(state, compiler, options, hooks)

    outer = compiled(add, CallsInner())
    outer(torch.ones(2), torch.ones(2))
    assert seen == [True]
    assert inner_conv.calls == []
    assert ember.dynamo.is_compiling() is False


def test_wrap_function_shares_the_cache() -> None:
    conv = FakeConvert()
    runtime = runtime_with(conv)
    a = runtime.wrap_function(add)
    b = runtime.wrap_function(add)
    a(torch.ones(2), torch.ones(2))
    b(torch.ones(2), torch.ones(2))
    assert len(conv.calls) == 1
    assert len(runtime.table.get(add.__code__).entries) == 1


def test_compile_times_are_recorded() -> None:
    f = compiled(add, FakeConvert())
    f(torch.ones(2), torch.ones(2))
    times = ember.dynamo.compile_times(repr="dict")
    assert len(times["convert_frame"]) == 1
    assert "convert_frame" in ember.dynamo.compile_times()


def test_positional_only_and_keyword_calls_bind_like_python() -> None:
    def f(x: torch.Tensor, k: int = 2, /, s: int = 1, *, t: int = 0) -> torch.Tensor:
        return x * k + s + t

    conv = FakeConvert()
    c = compiled(f, conv)
    x = torch.ones(2)
    torch.testing.assert_close(c(x), f(x))
    torch.testing.assert_close(c(x, 3, s=2, t=1), f(x, 3, s=2, t=1))
    assert conv.calls[-1].f_locals == {"x": x, "k": 3, "s": 2, "t": 1}
    with pytest.raises(TypeError, match="positional-only"):
        c(x, k=3)
