"""explain() reports and the CompileProfiler backend."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import ember.dynamo


@pytest.fixture(autouse=True)
def _reset() -> Any:
    yield
    ember.dynamo.reset()


def two_ops(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) * 2


def with_print(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = torch.cos(x)
    print("woo")
    return a + torch.sin(y)


def test_explain_single_graph() -> None:
    x = torch.randn(3)
    out = ember.dynamo.explain(two_ops)(x)
    torch.testing.assert_close(out.result, two_ops(x))
    assert (out.graph_count, out.graph_break_count, out.op_count) == (1, 0, 2)
    assert out.ops_per_graph == [["<torch.relu>", "<_operator.mul>"]]
    assert len(out.out_guards) == 1
    text = str(out)
    assert text.startswith("Graph Count: 1\nGraph Break Count: 0\nOp Count: 2\n")
    assert "local 'x' TENSOR_MATCH" in text


def test_explain_reports_break_reason_with_user_stack(capsys: pytest.CaptureFixture[str]) -> None:
    x, y = torch.randn(3), torch.randn(3)
    out = ember.dynamo.explain(with_print)(x, y)
    assert "woo" in capsys.readouterr().out
    torch.testing.assert_close(out.result, with_print(x, y))
    assert out.graph_break_count == 1
    reason = out.break_reasons[0]
    assert "builtin `print` cannot be traced" in reason.reason
    assert reason.user_stack[-1].name == "with_print"
    assert reason.user_stack[-1].line.strip() == 'print("woo")'
    assert 'print("woo")' in str(out)


def test_explain_accepts_compiled_function() -> None:
    compiled = ember.dynamo.compile(two_ops, backend="eager")
    out = ember.dynamo.explain(compiled)(torch.randn(2))
    assert out.graph_count == 1


def test_compile_profiler_reports_recompile_reasons() -> None:
    prof = ember.dynamo.CompileProfiler()
    f = ember.dynamo.compile(two_ops, backend=prof)
    f(torch.randn(3))
    f(torch.randn(3))
    f(torch.randn(4))
    f(torch.randn(4, dtype=torch.float64))
    assert (prof.frame_count, prof.op_count) == (3, 6)
    report = prof.report()
    assert "Graphs compiled: 3 (ops: 6)" in report
    assert "Recompiles: 2" in report
    assert "L['x'].size()[0] was 4, the graph assumed 3" in report
    assert "L['x'].dtype was torch.float64, the graph assumed torch.float32" in report


def test_compile_profiler_ignores_other_runtimes() -> None:
    prof = ember.dynamo.CompileProfiler()
    other = ember.dynamo.compile(two_ops, backend="eager")
    other(torch.randn(3))
    other(torch.randn(5))
    assert prof.records == []


def toy_example(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def toy_example_woo(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a / (torch.abs(a) + 1)
    print("woo")
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_explain_toy_example_counts_resume_graphs(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = torch.randn(10), torch.randn(10)
    out = ember.dynamo.explain(toy_example)(a, b)
    torch.testing.assert_close(out.result, toy_example(a, b))
    assert (out.graph_count, out.graph_break_count) == (2, 1)
    assert out.ops_per_graph[0] == [
        "<torch.abs>",
        "<_operator.add>",
        "<_operator.truediv>",
        "<method sum>",
        "<_operator.lt>",
    ]
    assert out.break_reasons[0].user_stack[-1].line.strip() == "if b.sum() < 0:"
    woo = ember.dynamo.explain(toy_example_woo)(a, b)
    assert "woo" in capsys.readouterr().out
    assert (woo.graph_count, woo.graph_break_count) == (3, 2)


def _passthrough(fn: Any) -> Any:
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


class _Decorated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    @_passthrough
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).relu()


def test_explain_of_a_decorated_bound_method_keeps_self() -> None:
    # explain unwrapped `__wrapped__`, which through a bound method is the plain function:
    # `self` was dropped (TypeError: missing 1 required positional argument)
    m, x = _Decorated(), torch.randn(2, 4)
    out = ember.dynamo.explain(m.forward)(x)
    assert out.graph_count == 1 and out.graph_break_count == 0
    torch.testing.assert_close(out.result, m(x))


def test_explain_of_an_optimizer_step_reports_its_graph() -> None:
    # explain(opt.step)() raised IndexError (the unwrapped step had no optimizer)
    m = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m(torch.randn(2, 4)).sum().backward()
    want = [p.detach() - 0.1 * p.grad for p in m.parameters()]
    out = ember.dynamo.explain(opt.step)()
    assert out.graph_count == 1 and out.op_count > 0
    for p, w in zip(m.parameters(), want, strict=True):
        torch.testing.assert_close(p.detach(), w)
