"""`with ember.dynamo.optimize(backend):` -- frame capture through the PEP 523 hook."""

from __future__ import annotations

import operator
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import ember.dynamo
from ember.dynamo import api, frame_hook
from ember.dynamo.testing import CompileCounter

pytestmark = pytest.mark.skipif(
    frame_hook.unavailable() is not None, reason=f"frame hook: {frame_hook.unavailable()}"
)


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    ember.dynamo.reset()
    assert api.STATE.hook_runtimes == []
    hook = frame_hook.loaded()
    assert hook is None or hook.get_callback() is None


def cos_sin(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.cos(x) + torch.sin(y)


def outer(x: torch.Tensor) -> torch.Tensor:
    return cos_sin(x, x) * 2


def test_frames_inside_the_block_are_captured_and_cached() -> None:
    cnt = CompileCounter()
    x = torch.randn(4)
    with ember.dynamo.optimize(cnt):
        torch.testing.assert_close(outer(x), (torch.cos(x) + torch.sin(x)) * 2)
        torch.testing.assert_close(outer(x), (torch.cos(x) + torch.sin(x)) * 2)
    assert (cnt.frame_count, cnt.op_count) == (1, 4)
    outer(x)  # outside the block: plain Python
    assert cnt.frame_count == 1


def test_keyword_defaults_and_varargs_are_passed_through() -> None:
    def shifted(x: torch.Tensor, *rest: torch.Tensor, b: float = 1.0, **named: torch.Tensor) -> torch.Tensor:
        out = x + b
        for r in rest:
            out = out + r
        for v in named.values():
            out = out * v
        return out

    cnt = CompileCounter()
    x = torch.ones(2)
    with ember.dynamo.optimize(cnt):
        got = shifted(x, x, b=2.0, scale=torch.full((2,), 3.0))
    torch.testing.assert_close(got, torch.full((2,), 12.0))
    assert cnt.frame_count == 1


def test_module_forward_is_captured() -> None:
    mod = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = mod

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x) + 1

    w = Wrapper()
    cnt = CompileCounter()
    x = torch.randn(2, 3)
    with ember.dynamo.optimize(cnt):
        got = w(x)
    torch.testing.assert_close(got, w(x))
    assert cnt.frame_count == 1


def test_disabled_function_runs_eagerly_inside_the_block(capsys: pytest.CaptureFixture[str]) -> None:
    @ember.dynamo.disable
    def noisy(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    cnt = CompileCounter()
    with ember.dynamo.optimize(cnt):
        torch.testing.assert_close(noisy(torch.ones(2)), torch.full((2,), 3.0))
    assert cnt.frame_count == 0


def test_exceptions_propagate_and_the_hook_is_removed() -> None:
    def bad(x: torch.Tensor, n: str) -> torch.Tensor:
        return x * int(n)  # ValueError from the user's code for n="x"

    with pytest.raises(ValueError, match="invalid literal"), ember.dynamo.optimize(CompileCounter()):
        bad(torch.ones(3, 3), "x")


def test_nested_blocks_use_the_innermost_backend() -> None:
    a, b = CompileCounter(), CompileCounter()
    x = torch.randn(3)
    with ember.dynamo.optimize(a):
        cos_sin(x, x)
        with ember.dynamo.optimize(b):
            outer(x)
        cos_sin(x, x)
    assert (a.frame_count, b.frame_count) == (1, 1)


def test_captured_frames_at_every_stack_depth() -> None:
    """A frame the hook replaces is disposed of by the hook on 3.12+ (the
    default evaluator would pop it); at some depth it is the first frame of
    a new data-stack chunk, which must be freed and unlinked exactly."""

    def descend(n: int, x: torch.Tensor) -> torch.Tensor:
        a, b, c, d, e, f, g, h, i, j, k, m = (n,) * 12  # a bigger frame per level
        if n == 0:
            return cos_sin(x, x)
        return descend(n - 1, x) + 0 * (a + b + c + d + e + f + g + h + i + j + k + m)

    frame_hook.mark_skip(descend.__code__)  # the hook runs these frames as they are

    cnt = CompileCounter()
    x = torch.randn(4)
    want = torch.cos(x) + torch.sin(x)
    with ember.dynamo.optimize(cnt):
        for depth in range(400):
            torch.testing.assert_close(descend(depth, x), want)
    assert cnt.frame_count == 1


def test_a_failing_capture_disposes_of_the_frame() -> None:
    def fails(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> object:
        raise RuntimeError("backend exploded")

    x = torch.randn(4)
    for _ in range(3):
        with pytest.raises(Exception, match="backend exploded"), ember.dynamo.optimize(fails):
            cos_sin(x, x)
    torch.testing.assert_close(cos_sin(x, x), torch.cos(x) + torch.sin(x))


def test_generators_run_normally() -> None:
    def gen(n: int) -> Iterator[int]:
        yield from range(n)

    with ember.dynamo.optimize(CompileCounter()):
        assert list(gen(3)) == [0, 1, 2]


def test_library_code_is_never_captured() -> None:
    cnt = CompileCounter()
    with ember.dynamo.optimize(cnt):
        torch.nn.functional.relu(torch.randn(3))
        sys.getrecursionlimit()
    assert cnt.frame_count == 0


def test_unavailable_hook_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frame_hook, "load", lambda: None)
    monkeypatch.setattr(frame_hook, "unavailable", lambda: "RuntimeError: no compiler")
    with (
        pytest.raises(TypeError, match="cannot capture the functions called inside the block.*no compiler.*Compile the function instead"),
        ember.dynamo.optimize("eager"),
    ):
        pass


def toy_example(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_toy_example_in_a_block_compiles_each_graph_once() -> None:
    cnt = CompileCounter()
    torch.manual_seed(0)
    inputs = [(torch.randn(10), torch.randn(10)) for _ in range(30)]
    with ember.dynamo.optimize(cnt):
        outs = [toy_example(a, b) for a, b in inputs]
    for (a, b), out in zip(inputs, outs, strict=True):
        torch.testing.assert_close(out, toy_example(a, b))
    assert cnt.frame_count == 3


def test_disable_not_recursive_runs_its_frame_eagerly_and_captures_its_callees() -> None:
    def inner(x: torch.Tensor) -> torch.Tensor:
        return x.sin() + 1

    @ember.dynamo.disable(recursive=False)
    def middle(x: torch.Tensor) -> torch.Tensor:
        return inner(x) * inner(x + 1)

    @ember.dynamo.disable
    def middle_recursive(x: torch.Tensor) -> torch.Tensor:
        return inner(x) * inner(x + 1)

    def top(x: torch.Tensor, m: Any) -> torch.Tensor:
        return m(x.cos()) - 1

    x = torch.randn(4)
    for m, captured_inner in ((middle, True), (middle_recursive, False)):
        cnt = CompileCounter()
        torch.testing.assert_close(ember.dynamo.compile(top, backend=cnt)(x, m), top(x, m))
        sins = sum(n.target == "sin" for g in cnt.graphs for n in g.graph.nodes)
        assert (sins > 0) == captured_inner
        # the disabled frame itself: its multiply is in no graph
        assert not any(n.target is operator.mul for g in cnt.graphs for n in g.graph.nodes)
        ember.dynamo.reset()
    assert api.STATE.hook_runtimes == []


_CAPTURED_BEFORE_THE_HOOK = """
import sys, torch
import ember.dynamo
from ember.dynamo import api, frame_hook

def f(x):
    y = x.sin()
    print("a graph break", file=sys.stderr)
    return y.cos()

codes = []
api.STATE.listeners.append(lambda e: codes.append(e.guarded.code) if e.kind == "capture" else None)
ember.dynamo.compile(f, backend="eager")(torch.ones(3))
assert frame_hook.loaded() is None, "the function path loaded the hook"
hook = frame_hook.load()
print(len(codes), all(hook.is_skipped(c) for c in codes))
"""


def test_code_captured_before_the_hook_loads_is_never_captured_again(tmp_path: Any) -> None:
    # The function path captures without the PEP 523 hook, so marking its transformed
    # code "skip" did nothing; once an eager fallback loaded the hook, it took that code
    # (a resume function's, run by ember's own code) for a user frame and captured it:
    # torchvision's efficientnet_b0 then passed `()` to a conv (issue 29's internal error).
    import os
    import subprocess

    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path))
    run = subprocess.run(
        [sys.executable, "-c", _CAPTURED_BEFORE_THE_HOOK],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["2", "True"], run.stdout
