"""Forward hooks and pre-hooks on the modules a frame calls.

Capture runs a called module's hooks as ``Module.__call__`` does (transformers 5
installs output-capturing forward hooks on SegformerStage and others, which
torch.compile inlines), and guards every called module's hook dicts: a hook
registered or removed after capture recompiles instead of being skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounter, CompileCounterWithBackend


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    ed.reset()
    yield
    ed.reset()


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).relu() + 1


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x) * 2)


def scale(k: float) -> Any:
    return lambda mod, args, out: out * k


def test_hooks_present_at_capture_are_traced_whole() -> None:
    net = Net()
    net.block.register_forward_pre_hook(lambda mod, args: (args[0] - 1,))
    net.block.register_forward_hook(scale(3.0))
    net.block.register_forward_hook(lambda mod, args, out: None)  # None keeps the output
    net.head.register_forward_hook(scale(0.5))  # a leaf module: its forward is inlined
    cnt = CompileCounter()
    x = torch.randn(3, 4)
    want = net(x)
    compiled = ed.compile(net, backend=cnt, fullgraph=True)
    torch.testing.assert_close(compiled(x), want)
    torch.testing.assert_close(compiled(x), want)
    assert cnt.frame_count == 1


@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("where", ["block", "head"])  # inlined / leaf module
def test_hook_registered_after_capture_recompiles(backend: str, where: str) -> None:
    net = Net()
    x = torch.randn(3, 4)
    cnt = CompileCounterWithBackend(backend)
    compiled = ed.compile(net, backend=cnt)
    torch.testing.assert_close(compiled(x), net(x))
    handle = getattr(net, where).register_forward_hook(scale(100.0))
    torch.testing.assert_close(compiled(x), net(x))  # was the hook-less graph's result
    pre = getattr(net, where).register_forward_pre_hook(lambda mod, args: (args[0] * -1,))
    torch.testing.assert_close(compiled(x), net(x))
    handle.remove()
    pre.remove()
    torch.testing.assert_close(compiled(x), net(x))
    assert cnt.frame_count == 3  # no hooks, one hook, two hooks; the first entry serves again


def test_hooks_capture_cannot_follow_run_eagerly() -> None:
    net = Net()
    net.block.register_forward_hook(lambda mod, args, kwargs, out: out + 1, with_kwargs=True)
    x = torch.randn(3, 4)
    with pytest.raises(ed.Unsupported, match="forward hooks taking keyword arguments"):
        ed.compile(net, backend=CompileCounter(), fullgraph=True)(x)
    ed.reset()
    torch.testing.assert_close(ed.compile(net, backend=CompileCounter())(x), net(x))
    net2 = Net()
    net2.block.register_full_backward_hook(lambda mod, gin, gout: None)
    with pytest.raises(ed.Unsupported, match="backward hooks"):
        ed.compile(net2, backend=CompileCounter(), fullgraph=True)(x)


class Gathered(nn.Module):
    """A block whose hooks swap its weight in before forward and out after it, as
    FSDP2's ``fully_shard`` all-gathers and reshards (here: a keyword-taking pre-hook,
    which capture refuses, writing the parameter the forward reads)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.full = self.lin.weight.detach().clone()
        self.calls = 0

        def pre(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            mod.calls += 1
            mod.lin.weight = nn.Parameter(mod.full * 2)  # a fresh parameter each call
            return args, kwargs

        def post(mod: nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> torch.Tensor:
            return out + mod.calls

        self.register_forward_pre_hook(pre, with_kwargs=True)
        self.register_forward_hook(post)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x)) * 3


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Gathered() for _ in range(2))
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x) + 1
        return self.head(x)


def test_refused_hooks_run_eagerly_around_a_compiled_forward() -> None:
    """A block with hooks capture refuses is a break; its hooks run eagerly, and its
    forward is captured as a frame of its own (ADR 0057): each block's forward is a
    graph, and so is the code after the blocks; results and hook calls are eager's."""
    eager, net = Stack(), Stack()
    net.load_state_dict(eager.state_dict())
    for a, b in zip(eager.blocks, net.blocks, strict=True):
        b.full = a.full.clone()
    cnt = CompileCounter()
    compiled = ed.compile(net, backend=cnt)
    for _ in range(3):
        x = torch.randn(3, 4)
        torch.testing.assert_close(compiled(x), eager(x))
    # the blocks' forwards ran compiled (with the hooks' weights), not through their own code
    assert [b.calls for b in net.blocks] == [b.calls for b in eager.blocks] == [3, 3]
    forwards = [g for g in cnt.graphs if any("tanh" in str(n.target) for n in g.graph.nodes)]
    assert len(forwards) == 2  # one per block: each block's frame guards its own module
    assert cnt.frame_count == 4  # two block forwards; after each block the code up to the next break


def test_fully_shard_style_class_swap_on_an_optimized_module() -> None:
    """``fully_shard(compile(block))`` assigns ``__class__`` on the compiled wrapper; it
    must change the wrapper's class, not the wrapped module's."""
    block = Block()
    wrapper = ed.compile(block, backend=CompileCounter())
    swapped = type("FSDPOptimizedModule", (type(wrapper),), {})
    wrapper.__class__ = swapped
    assert type(wrapper) is swapped and type(block) is Block
    x = torch.randn(3, 4)
    torch.testing.assert_close(wrapper(x), block(x))
