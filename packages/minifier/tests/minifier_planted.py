"""Real models as ATen graphs, and test backends with planted bugs.

The backends are module-level functions so that a fresh process (a written
repro.py, a worker subprocess) can import them by ``module:qualname``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx  # tests only

aten = torch.ops.aten


class TransformerLayer(nn.Module):
    """Pre-norm attention + gated MLP (x * sigmoid(gate)), GELU."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.gate = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        h = self.ln2(x)
        h = F.gelu(self.up(h)) * torch.sigmoid(self.gate(h))
        return x + self.down(h)


class Transformer(nn.Module):
    def __init__(self, layers: int = 4, d: int = 32) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TransformerLayer(d) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class SEBlock(nn.Module):
    """conv-bn-relu-conv-bn, squeeze-excitation (sigmoid), residual add, relu."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(c)
        self.c2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(c)
        self.se1 = nn.Linear(c, c // 2)
        self.se2 = nn.Linear(c // 2, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.b1(self.c1(x)))
        h = self.b2(self.c2(h))
        s = h.mean(dim=(2, 3))
        s = torch.sigmoid(self.se2(F.relu(self.se1(s))))
        h = h * s[:, :, None, None]
        return F.relu(h + x)


class CNN(nn.Module):
    def __init__(self, c: int = 8, blocks: int = 8) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.blocks = nn.Sequential(*(SEBlock(c) for _ in range(blocks)))
        self.head = nn.Linear(c, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.blocks(F.relu(self.stem(x)))
        return self.head(h.mean(dim=(2, 3)))


def traced(model: nn.Module, *inputs: torch.Tensor) -> fx.GraphModule:
    """The model's ATen graph (eval mode), traced with make_fx (cached: do not mutate)."""
    model.eval()
    with torch.no_grad():
        return make_fx(model)(*inputs)


@functools.cache
def transformer_graph() -> tuple[fx.GraphModule, list[torch.Tensor]]:
    torch.manual_seed(0)
    x = torch.randn(2, 8, 32)
    return traced(Transformer(), x), [x]


@functools.cache
def cnn_graph() -> tuple[fx.GraphModule, list[torch.Tensor]]:
    torch.manual_seed(0)
    model = CNN()
    for m in model.modules():  # non-trivial running statistics
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    x = torch.randn(2, 3, 8, 8)
    return traced(model, x), [x]


def compute_targets(gm: fx.GraphModule) -> list[Any]:
    return [n.target for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]


class _Patched(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule, patch: Callable[[Any, Any], Any]) -> None:
        super().__init__(gm)
        self.patch = patch

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        return self.patch(target, super().call_function(target, args, kwargs))


def _run_with(gm: fx.GraphModule, patch: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        return _Patched(gm, patch).run(*args)

    return run


def raises_on_sigmoid(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Planted bug: compilation fails on any aten.sigmoid."""
    for n in gm.graph.nodes:
        if n.target is aten.sigmoid.default:
            raise NotImplementedError(f"planted bug: no lowering for aten.sigmoid.default ({n.name})")
    return gm.forward


MUL_ERROR = 1e-4


def inaccurate_mul(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Planted bug: aten.mul.Tensor is off by a relative 1e-4."""

    def patch(target: Any, out: Any) -> Any:
        if target is aten.mul.Tensor and isinstance(out, torch.Tensor) and out.is_floating_point():
            return out * (1 + MUL_ERROR)
        return out

    return _run_with(gm, patch)


def fails_on_add_relu(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Planted bug: a relu reading an add directly fails when run."""
    bad = [
        n.name
        for n in gm.graph.nodes
        if n.target is aten.relu.default
        and isinstance(n.args[0], fx.Node)
        and n.args[0].target is aten.add.Tensor
    ]

    def run(*args: Any) -> Any:
        if bad:
            raise RuntimeError("planted bug: fused add+relu kernel produced garbage")
        return gm.forward(*args)

    return run


def healthy(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """A correct backend: runs the graph as is."""
    return gm.forward


def accurate_float64(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """A correct backend that computes in float64 and rounds back: more accurate than eager."""
    import copy

    gm64 = copy.deepcopy(gm).to(torch.float64)

    def run(*args: Any) -> Any:
        wide = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        out = fx.Interpreter(gm64).run(*wide)
        return torch.utils._pytree.tree_map(
            lambda t: t.float() if isinstance(t, torch.Tensor) and t.dtype == torch.float64 else t, out
        )

    return run


def fails_on_gelu_mul(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Planted bug: compiling a mul that reads a gelu directly fails."""
    for n in gm.graph.nodes:
        if n.target is aten.mul.Tensor and any(
            isinstance(a, fx.Node) and a.target is aten.gelu.default for a in n.args
        ):
            raise RuntimeError("planted bug: gelu+mul epilogue fusion failed")
    return gm.forward


def two_bugs(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Two different planted bugs: gelu raises ValueError, sigmoid raises NotImplementedError."""
    targets = {n.target for n in gm.graph.nodes}
    if aten.gelu.default in targets:
        raise ValueError("planted bug A: gelu")
    if aten.sigmoid.default in targets:
        raise NotImplementedError("planted bug B: sigmoid")
    return gm.forward


def crashes_on_sigmoid(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Planted bug: the process dies (SIGKILL) when compiling a graph with aten.sigmoid."""
    import os
    import signal

    if any(n.target is aten.sigmoid.default for n in gm.graph.nodes):
        os.kill(os.getpid(), signal.SIGKILL)
    return gm.forward


def small_graph() -> tuple[fx.GraphModule, list[torch.Tensor]]:
    """A dozen ATen ops with a sigmoid and a mul in the middle."""

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = torch.relu(x @ w + 1.0)
        g = torch.sigmoid(h.sum(dim=-1, keepdim=True)) * h
        return torch.tanh(g).mean(dim=0) + torch.cos(w).sum()

    torch.manual_seed(0)
    inputs = [torch.randn(4, 8), torch.randn(8, 8)]
    return make_fx(f)(*inputs), inputs


def raises_on_torch_sigmoid(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Planted bug for torch-level graphs (after dynamo): torch.sigmoid cannot be compiled."""
    if any(n.target is torch.sigmoid for n in gm.graph.nodes):
        raise NotImplementedError("planted bug: torch.sigmoid is not supported")
    return gm.forward
