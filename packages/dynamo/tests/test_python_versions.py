"""What differs between CPython versions, tested on whichever one runs the
suite (``tools/test.sh`` on 3.11, ``tools/test_pythons.sh`` on 3.12 and 3.13)."""

from __future__ import annotations

import torch

import ember.dynamo
from ember.dynamo import convert_frame
from ember.dynamo.testing import CompileCounter


def branchy(x: torch.Tensor) -> torch.Tensor:
    y = x.cos()
    if y.sum() > 0:  # a break: 3.13 wants an exact bool at the jump
        return y + 1
    if not (y.sum() < -100):  # a break at `not`
        return y - 1
    return y * 2


def test_data_dependent_branches_take_the_eager_branch() -> None:
    cnt = CompileCounter()
    f = ember.dynamo.compile(branchy, backend=cnt)
    for x in (torch.zeros(4), torch.full((4,), 3.0), torch.full((4,), -500.0)):
        torch.testing.assert_close(f(x), branchy(x))
    assert cnt.frame_count >= 2


class Base(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sin()


class Child(Base):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 2 + super().forward(x)


def test_super_is_traced_into_one_graph() -> None:
    """3.12+ compiles these to ``LOAD_SUPER_ATTR``, which once made the frame eager."""
    m = Child()
    cnt = CompileCounter()
    x = torch.randn(3)
    torch.testing.assert_close(ember.dynamo.compile(m, backend=cnt, fullgraph=True)(x), m(x))
    assert cnt.frame_count == 1


def test_closures_and_keyword_calls_after_a_break() -> None:
    def f(x: torch.Tensor, scale: float) -> torch.Tensor:
        def inner(t: torch.Tensor, k: float = 1.0) -> torch.Tensor:
            return t * scale * k

        y = inner(x, k=2.0)
        ember.dynamo.graph_break()
        return inner(y, k=0.5) + torch.nn.functional.softmax(y, dim=0)

    cnt = CompileCounter()
    x = torch.randn(5)
    torch.testing.assert_close(ember.dynamo.compile(f, backend=cnt)(x, 3.0), f(x, 3.0))
    assert cnt.frame_count == 2


def test_an_unsupported_python_runs_frames_eagerly(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    reason = "ember.dynamo reads the bytecode of CPython 3.11 to 3.13; this is cpython 3.99.0"
    monkeypatch.setattr(convert_frame, "UNSUPPORTED_PYTHON", reason)
    cnt = CompileCounter()
    x = torch.randn(4)
    torch.testing.assert_close(ember.dynamo.compile(branchy, backend=cnt)(x), branchy(x))
    assert cnt.frame_count == 0
    assert "3.11 to 3.13" in str(ember.dynamo.explain(branchy)(x))
