"""Python floats that change between calls: automatic dynamic floats (ADR 0044).

A float read from the frame starts as a constant of the graph; once another value
fails its guard, the recompile takes it as a graph input, so further values reuse
the graph. Every compiled call is compared with eager bit for bit; compile counts
are asserted.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounter, CompileCounterWithBackend

VALUES = (0.5, 0.25, 0.125, 1.5, -2.5, 3.5, 1e-3, 5.5, 0.1, 7.25)
BACKENDS = ("eager", "aot_eager", "inductor")


@pytest.fixture(autouse=True)
def _reset() -> None:
    ed.reset()


def _counter(backend: str) -> CompileCounter:
    return CompileCounter() if backend == "eager" else CompileCounterWithBackend(backend)


def _same(got: Any, want: Any, exact: bool = True) -> None:
    """Bit for bit (``exact``), or close: ember.inductor's fused C++ kernels of the first,
    static graph (the float a constant) may round differently from eager."""
    if not exact:
        torch.testing.assert_close(got, want)
        return
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if isinstance(w, torch.Tensor):
            assert g.dtype == w.dtype and torch.equal(g, w), (g, w)
        else:
            assert type(g) is type(w) and g == w, (g, w)


def scalar_ops(x: torch.Tensor, t: float) -> tuple[torch.Tensor, ...]:
    return (x * t + t ** 2, torch.clamp(x, min=t), x.pow(t), torch.add(x, x, alpha=t),
            x - t / 3.0 * 7.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_argument_compiles_twice_over_ten_values(backend: str) -> None:
    cnt = _counter(backend)
    compiled = ed.compile(scalar_ops, backend=cnt)
    x = torch.rand(16) + 0.1
    for i, t in enumerate(VALUES):
        _same(compiled(x, t), scalar_ops(x, t), exact=i > 0 or backend != "inductor")
    assert cnt.frame_count == 2


@pytest.mark.parametrize("backend", ("aot_eager", "inductor"))
def test_gradients_with_a_dynamic_float(backend: str) -> None:
    def f(x: torch.Tensor, t: float) -> torch.Tensor:
        return (x * t).sin() * t ** 2 + torch.clamp(x, max=t)

    cnt = _counter(backend)
    compiled = ed.compile(f, backend=cnt)
    for i, t in enumerate((0.3, 0.7, -1.1, 2.5)):
        x = torch.linspace(-1, 1, 12, requires_grad=True)
        xe = x.detach().clone().requires_grad_()
        out, want = compiled(x, t), f(xe, t)
        exact = i > 0 or backend != "inductor"
        _same(out, want, exact)
        (g,) = torch.autograd.grad(out.sum(), x)
        (ge,) = torch.autograd.grad(want.sum(), xe)
        _same(g, ge, exact)
    assert cnt.frame_count == 2


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16))
@pytest.mark.parametrize("backend", BACKENDS)
def test_reduced_precision_tensor_and_float(dtype: torch.dtype, backend: str) -> None:
    # the float must reach the ops as a Python float: with a 0-d float64 tensor in its
    # place, ``t / x`` and ``lerp(x, y, t)`` of a float16/bfloat16 ``x`` differ from eager
    # for these values (on CPU too; checked below)
    def f(x: torch.Tensor, t: float) -> tuple[torch.Tensor, ...]:
        return x * t, x + t, t / x, torch.lerp(x, x * 2, t), x.abs().pow(t), torch.clamp(x, max=t)

    cnt = _counter(backend)
    compiled = ed.compile(f, backend=cnt)
    x = (torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    values = (0.7, 2.2288886574201108, 1.09340628514368, -0.3, 1.5)
    as_tensor = [f(x, torch.tensor(t, dtype=torch.float64)) for t in values]  # type: ignore[arg-type]
    assert not all(torch.equal(a, b) for t, outs in zip(values, as_tensor, strict=True)
                   for a, b in zip(outs, f(x, t), strict=True))
    for i, t in enumerate(values):
        _same(compiled(x, t), f(x, t), exact=i > 0 or backend != "inductor")
    assert cnt.frame_count == 2


def test_item_across_a_graph_break() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        s = x.sum().item()
        ed.graph_break()
        return y * s + s

    cnt = CompileCounter()
    compiled = ed.compile(f, backend=cnt)
    y = torch.randn(5)
    for k in range(10):
        x = torch.randn(4) + k
        _same(compiled(x, y), f(x, y))
    # the graph before the break once, and the resume function's graph twice (its float
    # input, a value on the stack, was a constant, then became dynamic)
    assert cnt.frame_count == 3


def test_float_in_python_control_flow_recompiles_on_a_changed_branch() -> None:
    def f(x: torch.Tensor, t: float) -> torch.Tensor:
        if t > 0.5:
            return x * t
        return x - t

    cnt = CompileCounter()
    compiled = ed.compile(f, backend=cnt)
    x = torch.randn(6)
    for t in (0.3, 0.4, 0.7, 0.2, 0.9, 0.4, 0.5, math.nextafter(0.5, 1.0), 0.5):
        _same(compiled(x, t), f(x, t))
    # 0.3 a constant; then `t <= 0.5` and `t > 0.5`, each guarded as a relation on L['t']
    assert cnt.frame_count == 3


def test_branch_on_float_arithmetic_pins_the_float() -> None:
    # `t * 3.0 > 1.0` would be guarded as `f0 > 0.333333333333333` (sympy folds the
    # arithmetic), which decides t = nextafter(1/3, 1) otherwise than Python: such a
    # decision pins the float instead (guarded by value), so no call takes a stale branch
    def f(x: torch.Tensor, t: float) -> torch.Tensor:
        if t * 3.0 > 1.0:
            return x * t
        return x - t

    compiled = ed.compile(f, backend=CompileCounter())
    x = torch.randn(6)
    last_false = 0.33333333333333337  # the largest t with t * 3.0 == 1.0
    first_true = math.nextafter(last_false, 1.0)
    assert not last_false * 3.0 > 1.0 and first_true * 3.0 > 1.0
    for t in (0.1, 0.2, last_false, first_true, 1.0 / 3.0, last_false, first_true, 0.9):
        _same(compiled(x, t), f(x, t))


def test_float_used_as_a_python_constant_is_pinned() -> None:
    def f(x: torch.Tensor, t: float) -> torch.Tensor:
        return x.new_full((3,), round(t, 1)) + x * t

    compiled = ed.compile(f, backend=CompileCounter())
    x = torch.randn(3)
    for t in (0.31, 0.46, 0.52, 0.46, 0.31):
        _same(compiled(x, t), f(x, t))


def test_float_global_and_attribute() -> None:
    class Scale(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = 1.0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.scale

    m = Scale()
    cnt = CompileCounter()
    compiled = ed.compile(m, backend=cnt)
    x = torch.randn(4)
    for s in VALUES:
        m.scale = s
        _same(compiled(x), m(x))
    assert cnt.frame_count == 2


def test_specialize_float_compiles_each_value() -> None:
    cnt = CompileCounter()
    compiled = ed.compile(scalar_ops, backend=cnt, options={"specialize_float": True})
    x = torch.rand(4)
    for t in VALUES[:5]:
        _same(compiled(x, t), scalar_ops(x, t))
    assert cnt.frame_count == 5


def test_dynamic_false_keeps_floats_constant() -> None:
    cnt = CompileCounter()
    compiled = ed.compile(scalar_ops, backend=cnt, dynamic=False)
    x = torch.rand(4)
    for t in VALUES[:4]:
        _same(compiled(x, t), scalar_ops(x, t))
    assert cnt.frame_count == 4


def test_recompile_message_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    compiled = ed.compile(scalar_ops, backend=CompileCounter())
    x = torch.rand(4)
    with caplog.at_level(logging.DEBUG, logger="ember.recompiles"):
        ed.set_logs(recompiles=True)
        try:
            for t in (0.5, 0.75, 0.875):
                compiled(x, t)
        finally:
            ed.set_logs()
    lines = [r.getMessage() for r in caplog.records if r.name == "ember.recompiles"]
    assert any("L['t'] was 0.75, the graph assumed 0.5" in m for m in lines), lines
    assert any("L['t']" in m and "float" in m for m in lines if "dynamic" in m), lines
    assert all("\n" not in m for m in lines)


def _nan_inf(fn: Callable[..., Any]) -> None:
    compiled = ed.compile(fn, backend=CompileCounter())
    x = torch.randn(4)
    for t in (0.5, 0.25, float("inf"), float("nan"), -0.0, 3.0):
        got, want = compiled(x, t), fn(x, t)
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)


def test_non_finite_values_after_the_float_became_dynamic() -> None:
    _nan_inf(lambda x, t: x * t + t)


def test_aotgrad_traces_a_dynamic_float_once_as_a_tensor_input() -> None:
    import ember.aotgrad as aotgrad

    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        graphs.append(gm)
        return gm

    def f(x: torch.Tensor, t: float) -> tuple[torch.Tensor, ...]:
        return x * t + t ** 2, torch.clamp(x, min=t), x - t / 3.0 * 7.0, torch.add(x, x, alpha=-t)

    backend = aotgrad.aot_autograd(fw_compiler=keep, bw_compiler=keep)
    cnt = CompileCounterWithBackend(backend)
    compiled = ed.compile(f, backend=cnt)
    x = torch.rand(8)
    with torch.no_grad():
        for t in VALUES:
            _same(compiled(x, t), f(x, t))
    assert cnt.frame_count == 2
    assert len(graphs) == 2  # the static graph, then one for every later value
    targets = {n.target for n in graphs[1].graph.nodes}
    assert torch.ops.aten._local_scalar_dense.default in targets


def test_inductor_runs_a_dynamic_float_graph_eagerly_with_a_reason(
        caplog: pytest.LogCaptureFixture) -> None:
    # ``alpha`` has no tensor form (ember.inductor compiles the float's arithmetic and
    # comparison operands: integration_tests/test_dynamic_floats_compiled.py, ADR 0055)
    def f(x: torch.Tensor, t: float) -> torch.Tensor:
        return torch.add(x, x, alpha=t) + 1.0

    compiled = ed.compile(f, backend="inductor")
    x = torch.rand(8)
    with caplog.at_level(logging.INFO, logger="ember.perf_hints"):
        for t in VALUES[:4]:
            out = compiled(x, t)
            if t != VALUES[0]:
                _same(out, f(x, t))
    assert any("dynamic Python float" in r.getMessage() for r in caplog.records)


def python_float_ops(x: torch.Tensor, t: float) -> tuple[Any, ...]:
    return (x * abs(t), x * -t, x * (t % 1.0), 2.0 ** t * x, t ** x, torch.where(x > 0, x, t),
            x.masked_fill(x > 0, t), x + torch.full((4,), t), torch.lerp(x, x + 1, t),
            x.clamp(-abs(t), abs(t)), x + torch.linspace(0, t, 4), t * 2)


def decided_float_ops(x: torch.Tensor, t: float) -> tuple[Any, ...]:
    return (x * math.sqrt(t), x * int(t), x * round(t, 2), x * torch.tensor(t), x * 2 if t == 0.5 else x)


@pytest.mark.parametrize("backend", ("eager", "aot_eager"))
def test_python_arithmetic_on_a_dynamic_float(backend: str) -> None:
    cnt = _counter(backend)
    compiled = ed.compile(python_float_ops, backend=cnt)
    x = torch.randn(4)
    for t in (0.5, 0.25, 0.75, 1.5, 2.25, 0.3):
        _same(compiled(x, t), python_float_ops(x, t))
    assert cnt.frame_count == 2


def test_floats_decided_on_are_pinned_and_stay_correct() -> None:
    cnt = CompileCounter()
    compiled = ed.compile(decided_float_ops, backend=cnt)
    x = torch.randn(4)
    values = (0.5, 0.25, 0.75, 1.5, 2.25, 0.5)
    for t in values:
        _same(compiled(x, t), decided_float_ops(x, t))
    assert cnt.frame_count == len(set(values))  # every value compiles once; 0.5 is reused
