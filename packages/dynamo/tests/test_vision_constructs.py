"""What vision libraries do in every block (issue 29), captured without a break.

timm and torchvision call ``torch._assert`` on sizes in nearly every block,
torchvision logs API usage by reading a function's ``__class__.__name__``, and
stacks of identical blocks run in ``Sequential``/``ModuleList`` loops. These are
the constructs in small, each compared with eager (and with torch.compile's graph
count where the test says so).
"""

from __future__ import annotations

import types
import warnings
from typing import Any

import pytest
import torch
from torch import nn

import ember.dynamo as ed
from ember.dynamo import api
from ember.dynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def _reset() -> Any:
    ed.reset()
    yield
    ed.reset()


def _ops(gm: torch.fx.GraphModule) -> list[Any]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


# -- torch._assert and torch._check* -----------------------------------------------------


class AssertBlock(nn.Module):
    """A timm-style block: asserts on its input's sizes, then works."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.lin = nn.Linear(c, c)
        self.c = c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._assert(x.shape[-1] == self.c, f"expected {self.c} channels")
        torch._check(x.dim() == 2)
        return torch.relu(self.lin(x)) + x


def test_twelve_blocks_with_an_assert_each_compile_once() -> None:
    """Issue 29: twelve same-class blocks with one ``torch._assert`` each gave 8
    recompiles and then eager; one graph now, as under torch.compile."""
    torch.manual_seed(0)
    model = nn.Sequential(*[AssertBlock(16) for _ in range(12)])
    x = torch.randn(4, 16)
    cnt = CompileCounter()
    compiled = ed.compile(model, backend=cnt, fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x))
    torch.testing.assert_close(compiled(x), model(x))
    assert cnt.frame_count == 1
    assert not any("assert" in str(t) or "_check" in str(t) for t in _ops(cnt.graphs[0]))


def test_an_assert_on_a_known_false_condition_raises_as_eager() -> None:
    model = AssertBlock(16)
    compiled = ed.compile(model, backend="eager")
    with pytest.raises(AssertionError, match="expected 16 channels"):
        compiled(torch.randn(4, 8))
    with pytest.raises(ed.Unsupported):
        ed.compile(model, backend="eager", fullgraph=True)(torch.randn(4, 8))


def test_check_with_a_false_condition_raises_its_error_type() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        torch._check_with(ValueError, x.shape[0] == 3, lambda: "rows must be 3")
        torch._check_value(x.shape[1] > 0)
        return x * 2

    compiled = ed.compile(f, backend="eager")
    torch.testing.assert_close(compiled(torch.ones(3, 2)), torch.ones(3, 2) * 2)
    with pytest.raises(ValueError, match="rows must be 3"):
        compiled(torch.ones(4, 2))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_an_assert_on_a_tensor_is_checked_when_the_graph_runs(backend: str) -> None:
    """``torch._assert(tensor, msg)``: a runtime assert in the graph (``_assert_async``),
    kept through aotgrad's dead-code elimination; raises on data that fails it."""

    def f(x: torch.Tensor) -> torch.Tensor:
        torch._assert((x > -100).all(), "x out of range")
        return x + 1

    cnt = CompileCounter()
    compiled = ed.compile(f, backend=backend, fullgraph=True)
    torch.testing.assert_close(compiled(torch.zeros(3)), torch.ones(3))
    with pytest.raises(RuntimeError, match="x out of range"):
        compiled(torch.full((3,), -1000.0))
    counted = ed.compile(f, backend=cnt, fullgraph=True)
    counted(torch.zeros(3))
    assert torch._assert_async in _ops(cnt.graphs[0])


# -- attributes of functions and classes ---------------------------------------------------


def stochastic_depth_like(x: torch.Tensor) -> torch.Tensor:
    return x


def log_api_usage_once(obj: Any) -> None:
    """torchvision.utils._log_api_usage_once, as written there."""
    module = obj.__module__
    if not module.startswith("torchvision"):
        module = f"torchvision.internal.{module}"
    name = obj.__class__.__name__
    if isinstance(obj, types.FunctionType):
        name = obj.__name__
    torch._C._log_api_usage_once(f"{module}.{name}")


def test_function_and_class_names_are_constants() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        log_api_usage_once(stochastic_depth_like)
        log_api_usage_once(nn.Linear)
        name = stochastic_depth_like.__qualname__ + nn.Linear.__module__ + AssertBlock.__name__
        kind = stochastic_depth_like.__class__.__name__
        return x * len(name) if kind == "function" else x

    cnt = CompileCounter()
    compiled = ed.compile(f, backend=cnt, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), f(x))
    assert cnt.frame_count == 1
    assert torch._C._log_api_usage_once not in _ops(cnt.graphs[0])


# -- blocks in a loop, with a break inside each -------------------------------------------


class BreakingBlock(nn.Module):
    def __init__(self, c: int, scale: float = 1.0, act: nn.Module | None = None) -> None:
        super().__init__()
        self.lin = nn.Linear(c, c)
        self.scale = scale
        self.act = act if act is not None else nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.lin(x))
        ed.graph_break()
        return x + y * self.scale


@pytest.mark.parametrize("grad", [False, True])
def test_twelve_blocks_with_a_break_each_capture_the_block_once(grad: bool) -> None:
    """Issue 29: a break inside a block that a Sequential loop calls made the loop's
    resume function recompile for every block instance, until the cache limit. Now the
    loop's frame runs eagerly and the block is captured once, the other eleven bound to
    the stored frame (no cache-limit warning), in no more graphs than torch.compile."""
    torch.manual_seed(0)
    model = nn.Sequential(*[BreakingBlock(16) for _ in range(12)])
    x = torch.randn(4, 16)
    events: list[tuple[str, str, str | None]] = []
    api.STATE.listeners.append(lambda e: events.append((e.kind, e.code.co_name, e.reason)))
    cnt = CompileCounter()
    try:
        with torch.set_grad_enabled(grad), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = ed.compile(model, backend=cnt)
            want = model(x)
            torch.testing.assert_close(compiled(x), want)
            torch.testing.assert_close(compiled(x), want)
    finally:
        api.STATE.listeners.pop()
    assert not [w for w in caught if "cache_size_limit" in str(w.message)]
    assert not [e for e in events if e[0] == "cache_limit"], events
    # under grad mode the first block's input does not require grad and the others' do:
    # the block's frame and its resume function are captured once more, as under
    # torch.compile
    assert len([e for e in events if e[0] == "recompile"]) <= (2 if grad else 0), events
    block_captures = [e for e in events if e[0] == "capture" and e[2] is None]
    # the block's frame and its resume function, captured once each (twice under grad)
    assert len(block_captures) <= (4 if grad else 2), events
    if not grad:
        # torch.compile's count: the block before and after its break, once for all twelve
        assert cnt.frame_count <= 2


def test_same_class_blocks_that_differ_get_their_own_graphs() -> None:
    """Blocks bound to one stored frame must still differ where they differ: another
    activation module, another float, other weights, another width."""
    torch.manual_seed(0)
    blocks = [
        BreakingBlock(16, 1.0, nn.ReLU()),
        BreakingBlock(16, 2.0, nn.ReLU()),
        BreakingBlock(16, 1.0, nn.Tanh()),
        BreakingBlock(16, 0.5, nn.GELU(approximate="tanh")),
        BreakingBlock(16, 0.5, nn.GELU()),
        BreakingBlock(16, 1.0, nn.ReLU()),
    ]
    model = nn.Sequential(*blocks)
    x = torch.randn(4, 16)
    with torch.no_grad():
        compiled = ed.compile(model, backend="eager")
        torch.testing.assert_close(compiled(x), model(x))
        blocks[5].lin.weight.mul_(3.0)  # weights changed in place after the capture
        torch.testing.assert_close(compiled(x), model(x))
        wide = nn.Sequential(BreakingBlock(16), BreakingBlock(8), BreakingBlock(16))
        wide[1].lin = nn.Linear(16, 16)  # same class, another submodule object
        torch.testing.assert_close(ed.compile(wide, backend="eager")(x), wide(x))


# -- relative imports in a library's decorator ------------------------------------------------


def test_relative_imports_inside_a_compiled_function(tmp_path: Any, monkeypatch: Any) -> None:
    """diffusers' PEFT decorator on a UNet's forward runs ``from . import USE_PEFT_BACKEND``
    on every call: resolved against the function's package, as Python resolves it."""
    pkg = tmp_path / "relpkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("SCALE = 3.0\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "helpers.py").write_text("def shift(x):\n    return x + 1\n")
    (pkg / "sub" / "model.py").write_text(
        "def f(x):\n"
        "    from .. import SCALE\n"
        "    from .helpers import shift\n"
        "    from . import helpers\n"
        "    return helpers.shift(shift(x)) * SCALE\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    model = importlib.import_module("relpkg.sub.model")
    cnt = CompileCounter()
    x = torch.randn(3)
    torch.testing.assert_close(ed.compile(model.f, backend=cnt, fullgraph=True)(x), (x + 2) * 3.0)
    assert cnt.frame_count == 1
