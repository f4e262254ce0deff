"""torch.func transforms in captured code: one graph node when the transformed function
is a function of its arguments alone, a graph break that says why otherwise; results
compared with eager."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import ember.dynamo
from ember.dynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    ember.dynamo.reset()


def _sin_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sin().sum()


CASES: dict[str, Callable[[torch.Tensor], Any]] = {
    "vmap": lambda x: torch.vmap(lambda r: r.sum(1))(x),
    "func.vmap in_dims": lambda x: torch.func.vmap(torch.sum, in_dims=1)(x),
    "grad": lambda x: torch.func.grad(_sin_sum)(x) * 2,
    "grad_and_value": lambda x: torch.func.grad_and_value(_sin_sum)(x),
    "jacrev": lambda x: torch.func.jacrev(torch.sin)(x[0, 0]),
    "vmap of grad": lambda x: torch.vmap(torch.func.grad(_sin_sum))(x),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_transform_is_one_node_of_one_graph(name: str, backend: str) -> None:
    fn = CASES[name]
    x = torch.randn(3, 4, 5)
    counter = CompileCounter() if backend == "eager" else None
    compiled = ember.dynamo.compile(fn, backend=counter or backend, fullgraph=True)
    torch.testing.assert_close(compiled(x), fn(x))
    if counter is not None:
        assert counter.frame_count == 1


def test_gradients_flow_through_a_captured_vmap() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.vmap(lambda r: (r * r).sum())(x)

    x = torch.randn(3, 4, requires_grad=True)
    ember.dynamo.compile(fn, backend="aot_eager", fullgraph=True)(x).sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, 2 * x.detach())


def _first(r: torch.Tensor) -> torch.Tensor:
    return r[0]


def _last(r: torch.Tensor) -> torch.Tensor:
    return r[-1]


def test_another_function_is_another_graph() -> None:
    def fn(f: Callable[..., Any], x: torch.Tensor) -> torch.Tensor:
        return torch.vmap(f)(x)

    counter = CompileCounter()
    compiled = ember.dynamo.compile(fn, backend=counter)
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(_first, x), x[:, 0])
    torch.testing.assert_close(compiled(_last, x), x[:, -1])
    assert counter.frame_count == 2  # the function's code is guarded


SCALE = torch.tensor(3.0)


def _scaled(r: torch.Tensor) -> torch.Tensor:
    return r * SCALE


def test_functions_that_close_over_values_are_graph_breaks() -> None:
    y = torch.randn(4)

    def closure(x: torch.Tensor) -> torch.Tensor:
        return torch.vmap(lambda r: r + y)(x)

    def reads_a_tensor_global(x: torch.Tensor) -> torch.Tensor:
        return torch.vmap(_scaled)(x)

    x = torch.randn(3, 4)
    for fn, why in (
        (closure, "which has closure cells or defaults"),
        (reads_a_tensor_global, "which reads the global `SCALE`"),
    ):
        torch.testing.assert_close(ember.dynamo.compile(fn, backend="eager")(x), fn(x))
        ember.dynamo.reset()
        reasons = [b.reason for b in ember.dynamo.explain(fn)(x).break_reasons]
        assert any(why in r for r in reasons), reasons


VMAPPED_SUM = torch.vmap(torch.sum)


def test_a_wrapper_made_at_run_time_is_not_the_function_it_wraps() -> None:
    # vmap(torch.sum) carries torch.sum's names (functools.wraps); it used to be
    # put in the graph as torch.sum itself, summing everything: a wrong result.
    def fn(x: torch.Tensor) -> torch.Tensor:
        return VMAPPED_SUM(x) + 1

    x = torch.randn(3, 4)
    torch.testing.assert_close(ember.dynamo.compile(fn, backend="eager")(x), x.sum(1) + 1)
    allowed = ember.dynamo.allow_in_graph(torch.vmap(torch.sum))
    counter = CompileCounter()
    got = ember.dynamo.compile(lambda x: allowed(x) + 1, backend=counter, fullgraph=True)(x)
    torch.testing.assert_close(got, x.sum(1) + 1)
    assert counter.frame_count == 1


def _scan(a: torch.Tensor, b: torch.Tensor, dim: int = 2, reverse: bool = False) -> Any:
    """transformers' Mamba under compilation: a linear recurrence as an associative scan."""
    from torch._higher_order_ops.associative_scan import associative_scan

    def combine_fn(left: Any, right: Any) -> Any:
        a_left, b_left = left
        a_right, b_right = right
        return a_left * a_right, a_right * b_left + b_right

    return associative_scan(combine_fn, (a, b), dim=dim, reverse=reverse, combine_mode="generic")


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("reverse", [False, True])
def test_associative_scan_is_one_node_of_one_graph(backend: str, reverse: bool) -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> Any:
        states = _scan(a.exp().neg(), b, reverse=reverse)
        return states[1].sum(-1) + 1

    a, b = torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 4)
    counter = CompileCounter() if backend == "eager" else None
    compiled = ember.dynamo.compile(f, backend=counter or backend, fullgraph=True)
    torch.testing.assert_close(compiled(a, b), f(a, b))
    a2, b2 = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)  # another length recompiles
    torch.testing.assert_close(compiled(a2, b2), f(a2, b2))
    if counter is not None:
        assert counter.frame_count >= 1 and counter.op_count >= 3


def test_associative_scan_of_a_closure_runs_eagerly() -> None:
    from torch._higher_order_ops.associative_scan import associative_scan

    def f(x: torch.Tensor, scale: float) -> torch.Tensor:
        def combine_fn(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
            return left + right * scale  # reads a cell: not pinned by guards

        return associative_scan(combine_fn, x, dim=0, combine_mode="generic")

    x = torch.randn(6, 3)
    with pytest.raises(Exception, match="closure cells"):
        ember.dynamo.compile(f, backend=CompileCounter(), fullgraph=True)(x, 2.0)
    ember.dynamo.reset()
    compiled = ember.dynamo.compile(f, backend=CompileCounter())
    torch.testing.assert_close(compiled(x, 2.0), f(x, 2.0))
    torch.testing.assert_close(compiled(x, 3.0), f(x, 3.0))
