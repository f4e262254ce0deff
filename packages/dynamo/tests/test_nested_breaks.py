"""A graph break inside a nested call of any kind (function, method of a
plain object, submodule ``__call__``, decorated forward, ``__call__`` of an
object) splits only the frame it happens in: the caller's graph runs up to
the call, the callee's frame is captured afresh (and split where it breaks),
and the caller resumes after it. Also a break inside an argument of a
pending call (``f(a, g(b))``: a NULL below the operands)."""

from __future__ import annotations

import functools
import io
from contextlib import redirect_stdout
from typing import Any

import pytest
import torch
from torch import nn

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def _reset():
    ed.reset()
    yield
    ed.reset()


def body(x: torch.Tensor) -> torch.Tensor:
    """4 ops, a break, 1 op."""
    y = (x.relu() * 2 + 1).exp()
    print("break")
    return y.sin()


class Inner(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return body(x)


def decorated(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(self, *args, **kwargs)

    return wrapper


class Decorated(nn.Module):
    @decorated
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return body(x)


class Helper:
    def run(self, x: torch.Tensor) -> torch.Tensor:
        return body(x)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return body(x)


HELPER = Helper()


class Outer(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.inner = Inner()
        self.deco = Decorated()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.cos()
        if self.kind == "function":
            y = body(x)
        elif self.kind == "submodule":
            y = self.inner(x)
        elif self.kind == "decorated":
            y = self.deco(x)
        elif self.kind == "method":
            y = HELPER.run(x)
        elif self.kind == "made_here":
            y = Helper().run(x)
        else:
            y = HELPER(x)
        return y + 1


@pytest.mark.parametrize("kind", ["function", "submodule", "decorated", "method", "made_here", "call"])
def test_break_inside_a_nested_call_splits_only_that_frame(kind: str) -> None:
    m = Outer(kind)
    cnt = CompileCounter()
    c = ed.compile(m, backend=cnt)
    x = torch.randn(4)
    with redirect_stdout(io.StringIO()) as out:
        got = c(x)
    torch.testing.assert_close(got, m(x))
    assert out.getvalue() == "break\n"
    # the caller before the call (cos), the callee before the break (4 ops)
    # and after it (sin), the caller after the call (add): every op in a graph
    assert cnt.op_count == 7, cnt.op_count
    assert cnt.frame_count == 4, cnt.frame_count
    with redirect_stdout(io.StringIO()):
        torch.testing.assert_close(c(x), m(x))
    assert cnt.frame_count == 4  # cached


def scaled(x: torch.Tensor) -> torch.Tensor:
    print("break")
    return x * 3


def test_break_inside_an_argument_of_a_pending_call() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.add(x.cos(), scaled(x.sin()), alpha=2) + 1

    cnt = CompileCounter()
    c = ed.compile(f, backend=cnt)
    x = torch.randn(3)
    with redirect_stdout(io.StringIO()):
        torch.testing.assert_close(c(x), f(x))
        torch.testing.assert_close(c(x), f(x))
    assert cnt.op_count == 5, cnt.op_count  # cos, sin | mul | add(alpha), add


def test_closure_callee_is_called_as_it_is_now() -> None:
    """The callee is read when the call runs, not baked in at the split: a
    closure made afresh per call (guarded by its code) keeps its own cells."""

    def make(k: float) -> Any:
        def scale(x: torch.Tensor) -> torch.Tensor:
            print("break")
            return x * k

        return scale

    def f(x: torch.Tensor, fn: Any) -> torch.Tensor:
        return fn(x + 1) - 1

    cnt = CompileCounter()
    c = ed.compile(f, backend=cnt)
    x = torch.randn(3)
    with redirect_stdout(io.StringIO()):
        torch.testing.assert_close(c(x, make(2.0)), f(x, make(2.0)))
        torch.testing.assert_close(c(x, make(5.0)), f(x, make(5.0)))


class ConfigFallback(nn.Module):
    """diffusers' ``ModelMixin.__getattr__``: a break with a value on the stack, then
    zero-argument ``super()``, which reads the frame's first local."""

    def __getattr__(self, name: str) -> Any:
        n = len(self.__dict__) + (print("looked up", name) or 0)
        if n < 0:
            return n
        return super().__getattr__(name)


class WithChild(ConfigFallback):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)


def test_a_resume_function_keeps_the_receiver_of_zero_argument_super_first() -> None:
    m = WithChild()
    getattr_compiled = ed.compile(ConfigFallback.__getattr__, backend="eager")
    with redirect_stdout(io.StringIO()) as out:
        for _ in range(2):
            assert getattr_compiled(m, "lin") is m.lin
    assert out.getvalue().count("looked up lin") == 4  # each call, as eager prints it
    with pytest.raises(AttributeError, match="missing"):
        getattr_compiled(m, "missing")
