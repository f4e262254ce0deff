"""``tensor.item()`` captured in the graph as an unbacked value (ADR 0060), as torch.compile
(2.13) captures it with ``fullgraph=True``.

ember.dynamo used to break the graph at every ``.item()``. Now an int read is an unbacked
symbolic int ``v<N>`` and a float read an unbacked symbolic float ``vf<N>``: one graph, no
guard on the value (a new value never recompiles), a decision on it (``if s > 0``) a graph
break. ember.aotgrad binds the value from the ``_local_scalar_dense`` node (the backward
gets it as a saved float); ember.inductor keeps a float operand in its 0-d tensor (ADR
0055: no host read) and runs the ops around an int value through ATen (ADR 0046).
``config.capture_scalar_outputs = False`` keeps the old break. Every result is compared
with eager.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

import ember.dynamo as ed
import ember.inductor.backends as backends
from ember.dynamo.config import config
from ember.dynamo.testing import CompileCounterWithBackend
from ember.inductor import CompiledGraph, InductorOptions, SplitGraph, make_backend
from ember.inductor.testing import recording

BACKENDS = ["eager", "aot_eager", "inductor"]


def scaled(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s = x.sum().item()  # a float read from data, used as a scalar operand
    return y * s + 1


def prefix(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    k = n.item()  # an int read from data, used as a size
    return x[:k] * 2


def _graph_has_item(cnt: CompileCounterWithBackend) -> bool:
    return any(n.op == "call_method" and n.target == "item" for g in cnt.graphs for n in g.graph.nodes)


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    ed.reset()
    yield
    config.reset()


@pytest.mark.parametrize("backend", BACKENDS)
def test_float_item_is_one_graph_and_no_value_recompiles(backend: str) -> None:
    cnt = CompileCounterWithBackend(backend)
    compiled = ed.compile(scaled, backend=cnt, fullgraph=True)
    gen = torch.Generator().manual_seed(0)
    for scale in (1.0, -3.0, 0.0, 250.0, 1e-3):
        x, y = torch.randn(8, generator=gen) * scale, torch.randn(8, generator=gen)
        torch.testing.assert_close(compiled(x, y), scaled(x, y))
    assert cnt.frame_count == 1
    assert _graph_has_item(cnt)


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_item_as_a_slice_bound_gives_an_unbacked_size(backend: str) -> None:
    cnt = CompileCounterWithBackend(backend)
    compiled = ed.compile(prefix, backend=cnt, fullgraph=True)
    x = torch.randn(6, 3)
    for k in (3, 0, 6, 10, 1, -2, -9, 2):  # 0, past the end and negative ends included
        got, want = compiled(x, torch.tensor(k)), prefix(x, torch.tensor(k))
        assert got.shape == want.shape, (k, got.shape, want.shape)
        torch.testing.assert_close(got, want)
    assert cnt.frame_count == 1
    assert _graph_has_item(cnt)


def conversions(x: torch.Tensor, y: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, ...]:
    s = float(x.sum())
    t = s * 2 + 1  # Python arithmetic on the value stays symbolic
    k = int(n)
    return y * t - s / 3, y[: k + 1] * 2, torch.zeros(3) + k


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_and_float_of_a_tensor_and_arithmetic_on_the_value(backend: str) -> None:
    cnt = CompileCounterWithBackend(backend)
    compiled = ed.compile(conversions, backend=cnt, fullgraph=True)
    for k in (2, 0, 7, -1):
        args = (torch.randn(4), torch.randn(5), torch.tensor(k))
        for got, want in zip(compiled(*args), conversions(*args), strict=True):
            assert got.shape == want.shape
            torch.testing.assert_close(got, want)
    assert cnt.frame_count == 1


def branch(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    z = y * 2
    s = x.sum().item()
    if s > 0:
        return z + 1
    return z - 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_decision_on_the_value_is_a_graph_break(backend: str) -> None:
    with pytest.raises(ed.Unsupported, match=r"data-dependent decision.*vf0 > 0.*`\.item\(\)`"):
        ed.compile(branch, backend=backend, fullgraph=True)(torch.ones(3), torch.randn(3))
    cnt = CompileCounterWithBackend(backend)
    compiled = ed.compile(branch, backend=cnt)
    for v in (1.0, -1.0, 2.0, -3.0):
        x, y = torch.full((3,), v), torch.randn(3)
        torch.testing.assert_close(compiled(x, y), branch(x, y))
    # split at the `if` (the graph before it returns the decision), one resume per side;
    # no guard on the value
    assert cnt.frame_count == 3


def zeros_of(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    return x.new_zeros(n.item())  # needs n >= 0, which tracing cannot decide


def test_an_undecidable_size_check_is_a_graph_break_not_a_guess() -> None:
    with pytest.raises(ed.Unsupported, match=r"v0 >= 0, which depends on tensor data"):
        ed.compile(zeros_of, backend="eager", fullgraph=True)(torch.randn(2), torch.tensor(3))
    compiled = ed.compile(zeros_of, backend="eager")
    for k in (3, 0, 5):
        torch.testing.assert_close(compiled(torch.randn(2), torch.tensor(k)), torch.zeros(k))
    with pytest.raises(RuntimeError):
        compiled(torch.randn(2), torch.tensor(-1))  # eager's error, not a result


def loss_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s = x.detach().sum().item()
    return (y * s).sin().sum()


def loss_prefix(x: torch.Tensor, y: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    z = (y * 2).sin()
    return (z[: n.item()] * x.detach().abs().max().item()).cos().sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_training_gradients_flow_around_the_value(backend: str) -> None:
    gen = torch.Generator().manual_seed(1)
    for fn, ks in ((loss_fn, (None, None, None)), (loss_prefix, (4, 0, 9))):
        cnt = CompileCounterWithBackend(backend)
        compiled = ed.compile(fn, backend=cnt, fullgraph=True)
        for k in ks:
            x = torch.randn(6, 3, generator=gen, requires_grad=True)
            y = torch.randn(6, 3, generator=gen, requires_grad=True)
            args: tuple[Any, ...] = (x, y) if k is None else (x, y, torch.tensor(k))
            ref = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
            got, want = compiled(*args), fn(*ref)
            got.backward()
            want.backward()
            torch.testing.assert_close(got, want)
            torch.testing.assert_close(y.grad, ref[1].grad)
            assert x.grad is None and ref[0].grad is None
        assert cnt.frame_count == 1, fn.__name__


def _inductor(backend: str, monkeypatch: pytest.MonkeyPatch) -> tuple[CompileCounterWithBackend, list[Any]]:
    if backend == "triton":
        pytest.importorskip("triton")
    seen: list[Any] = []
    monkeypatch.setattr(backends, "compile_graph", recording(backends.compile_graph, seen))
    return CompileCounterWithBackend(make_backend(InductorOptions(
        cpu_backend=backend, fallback_on_error=False))), seen


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_inductor_keeps_a_float_item_in_its_tensor_and_compiles_one_kernel(
    backend: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cnt, seen = _inductor(backend, monkeypatch)
    compiled = ed.compile(scaled, backend=cnt, fullgraph=True)
    gen = torch.Generator().manual_seed(2)
    with caplog.at_level(logging.INFO, logger="ember"):
        for _ in range(4):
            x, y = torch.randn(64, generator=gen), torch.randn(64, generator=gen)
            torch.testing.assert_close(compiled(x, y), scaled(x, y))
    assert cnt.frame_count == 1 and len(seen) == 1
    assert isinstance(seen[0], CompiledGraph), getattr(seen[0].report, "eager_reason", None)
    assert seen[0].report.kernels >= 1 and seen[0].report.extern_calls == 0
    hints = [r.getMessage() for r in caplog.records if r.name == "ember.perf_hints"
             and "eager" in r.getMessage()]
    assert not hints, hints


def prefix_after_work(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    y = ((x.sin() * 2 + 1).cos() - x).exp()
    k = n.item()
    return y[:k].sum(0) + y.mean(0)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_inductor_compiles_the_ops_around_an_int_item(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cnt, seen = _inductor(backend, monkeypatch)
    compiled = ed.compile(prefix_after_work, backend=cnt, fullgraph=True)
    x = torch.randn(6, 5)
    for k in (3, 0, 6, 11, -2):
        torch.testing.assert_close(compiled(x, torch.tensor(k)), prefix_after_work(x, torch.tensor(k)))
    assert cnt.frame_count == 1 and len(seen) == 1
    assert isinstance(seen[0], SplitGraph)
    assert any(run.compiled for run in seen[0].runs)


def test_capture_scalar_outputs_false_keeps_the_graph_break() -> None:
    config.capture_scalar_outputs = False
    with pytest.raises(ed.Unsupported, match=r"`Tensor\.item\(\)` needs the tensor's data.*"
                                             r"capture_scalar_outputs = False"):
        ed.compile(scaled, backend="eager", fullgraph=True)(torch.randn(3), torch.randn(3))
    cnt = CompileCounterWithBackend("eager")
    compiled = ed.compile(scaled, backend=cnt)
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(compiled(x, y), scaled(x, y))
    assert not _graph_has_item(cnt)


@pytest.mark.parametrize(("name", "value", "capture"), [
    ("TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS", "0", False),
    ("TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS", "1", True),
    ("EMBER_CAPTURE_SCALAR_OUTPUTS", "0", False),
])
def test_capture_scalar_outputs_environment_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, capture: bool
) -> None:
    monkeypatch.setenv(name, value)
    config.reset()
    assert config.capture_scalar_outputs is capture
    cnt = CompileCounterWithBackend("eager")
    compiled = ed.compile(scaled, backend=cnt)
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(compiled(x, y), scaled(x, y))
    assert _graph_has_item(cnt) is capture
    monkeypatch.setenv(name, "yes")
    with pytest.raises(ValueError, match=name):
        config.reset()
    monkeypatch.delenv(name)


def bool_item(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if (x > 0).all().item() else x


def test_a_bool_item_still_breaks_and_runs_right() -> None:
    compiled = ed.compile(bool_item, backend="eager")
    for x in (torch.ones(3), -torch.ones(3)):
        torch.testing.assert_close(compiled(x), bool_item(x))


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_inductor_training_compiles_forward_and_backward_around_a_float_item(
    backend: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # the backward needs the value: it gets the 0-d tensor it was read from (not a Python
    # float, which ember.inductor's kernels cannot take) and its kernels load it
    cnt, seen = _inductor(backend, monkeypatch)
    compiled = ed.compile(loss_fn, backend=cnt, fullgraph=True)
    gen = torch.Generator().manual_seed(3)
    with caplog.at_level(logging.INFO, logger="ember"):
        for _ in range(3):
            x = torch.randn(16, generator=gen, requires_grad=True)
            y = torch.randn(16, generator=gen, requires_grad=True)
            ry = y.detach().clone().requires_grad_()
            got, want = compiled(x, y), loss_fn(x.detach(), ry)
            got.backward()
            want.backward()
            torch.testing.assert_close(got, want)
            torch.testing.assert_close(y.grad, ry.grad)
    assert cnt.frame_count == 1
    assert len(seen) == 2 and all(isinstance(c, CompiledGraph) for c in seen), [
        getattr(c.report, "eager_reason", None) for c in seen]
    hints = [r.getMessage() for r in caplog.records if r.name == "ember.perf_hints"
             and "eager" in r.getMessage()]
    assert not hints, hints


def fill_and_arith(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # Gemma4AssistantMaskedEmbedder's pattern: a fill value from .item() and Python arithmetic
    m = x.min().item() - 1.0
    s = x.max().item()  # (a sum would be rounded otherwise by the compiled reduction)
    out = torch.full((4, 6), m, dtype=y.dtype)
    return out + y, y * (s * 2 + 1), 1.0 - s + y, y * -s, y.half() * (3 * s)


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_inductor_computes_python_arithmetic_and_fill_values_from_the_tensor(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cnt, seen = _inductor(backend, monkeypatch)
    compiled = ed.compile(fill_and_arith, backend=cnt, fullgraph=True)
    gen = torch.Generator().manual_seed(4)
    for scale in (1.0, 0.1, 30.0):
        x, y = torch.randn(4, 6, generator=gen) * scale, torch.randn(4, 6, generator=gen)
        for got, want in zip(compiled(x, y), fill_and_arith(x, y), strict=True):
            assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
    assert cnt.frame_count == 1 and len(seen) == 1
    assert isinstance(seen[0], CompiledGraph), getattr(seen[0].report, "eager_reason", None)


def bounds(x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, int]:
    a, b = n.tolist()  # an int tensor's values, one unbacked value each
    return x[:a] * b, n.sum().tolist() * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_tolist_of_an_int_tensor_is_captured(backend: str) -> None:
    cnt = CompileCounterWithBackend(backend)
    compiled = ed.compile(bounds, backend=cnt, fullgraph=True)
    x = torch.randn(4)
    for a, b in ((2, 3), (0, 1), (5, -2), (-1, 4)):
        n = torch.tensor([a, b])
        (got, got_sum), (want, want_sum) = compiled(x, n), bounds(x, n)
        torch.testing.assert_close(got, want)
        assert got_sum == want_sum and type(got_sum) is int
    assert cnt.frame_count == 1


def test_tolist_of_a_float_tensor_breaks_as_in_torch_compile() -> None:
    with pytest.raises(ed.Unsupported, match=r"Tensor\.tolist\(\)"):
        ed.compile(lambda x: x + len(x.tolist()), backend="eager", fullgraph=True)(torch.randn(3))


def returns_a_constant(x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    c = torch.tensor([[1.0, 0.5], [2.0, -1.0]])  # returned as it is: a constant of the graph
    y = ((x.sin() * 2 + 1).cos() - x).exp()
    return y[: n.item()] * 3, c


def test_a_graph_compiled_in_runs_returns_its_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    # fuzz seed 545: int(t.argmax()) captured; the split graph looked the constant up in the
    # values its runs made (KeyError: _tensor_constant0)
    cnt, seen = _inductor("cpp", monkeypatch)
    compiled = ed.compile(returns_a_constant, backend=cnt, fullgraph=True)
    x = torch.randn(5, 2)
    for k in (2, 0, 7):
        for got, want in zip(compiled(x, torch.tensor(k)), returns_a_constant(x, torch.tensor(k)),
                             strict=True):
            torch.testing.assert_close(got, want)
    assert isinstance(seen[0], SplitGraph)


def checked_size(x: torch.Tensor, n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    k = n.item()
    torch._check(k >= 0)  # torch's way to say the value is a size: new_zeros/arange trace
    return x.new_zeros(k) + 1, torch.arange(k) * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_check_bounds_a_value_and_is_checked_at_run_time(backend: str) -> None:
    cnt = CompileCounterWithBackend(backend)
    compiled = ed.compile(checked_size, backend=cnt, fullgraph=True)
    for k in (3, 0, 5):
        for got, want in zip(compiled(torch.randn(2), torch.tensor(k)),
                             checked_size(torch.randn(2), torch.tensor(k)), strict=True):
            torch.testing.assert_close(got, want)
    assert cnt.frame_count == 1
    with pytest.raises(RuntimeError):
        compiled(torch.randn(2), torch.tensor(-1))  # the check fails, as eager's does
    with pytest.raises(RuntimeError):
        checked_size(torch.randn(2), torch.tensor(-1))


def size_checked(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    k = n.item()
    torch._check_is_size(k)
    return x.new_zeros(k, 2) + x.sum()


def test_check_is_size_is_a_lower_bound_of_zero() -> None:
    cnt = CompileCounterWithBackend("aot_eager")
    compiled = ed.compile(size_checked, backend=cnt, fullgraph=True)
    x = torch.randn(3)
    for k in (4, 0, 1):
        torch.testing.assert_close(compiled(x, torch.tensor(k)), size_checked(x, torch.tensor(k)))
    assert cnt.frame_count == 1
