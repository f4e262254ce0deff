"""The built-in workloads (rows), sized so the full suite runs in minutes on 2 cores.

Each ``build(device)`` seeds torch and returns a fresh :class:`Case`. Inference
steps run under ``torch.no_grad()``; a training step is forward + a scalar loss
+ backward (the optimizer is left out: it is the same eager code for every
column) and returns the loss and every parameter gradient for comparison.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from bench.registry import Case, Workload, register_workload


def inference_step(fn: Callable[..., Any], args: tuple[Any, ...]) -> list[torch.Tensor]:
    """Run ``fn(*args)`` without autograd; return its tensor outputs."""
    with torch.no_grad():
        return flatten_tensors(fn(*args))


def training_step(model: nn.Module) -> Callable[[Callable[..., Any], tuple[Any, ...]], list[torch.Tensor]]:
    """A step: forward, mean-square loss over the outputs, backward; loss and grads."""
    params = [p for p in model.parameters() if p.requires_grad]

    def step(fn: Callable[..., Any], args: tuple[Any, ...]) -> list[torch.Tensor]:
        for p in params:
            p.grad = None
        outs = flatten_tensors(fn(*args))
        loss = sum(o.float().square().mean() for o in outs if o.is_floating_point())
        assert isinstance(loss, torch.Tensor)
        loss.backward()  # type: ignore[no-untyped-call]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        return [loss.detach(), *grads]

    return step


def flatten_tensors(out: Any) -> list[torch.Tensor]:
    """Every tensor in a (nested) output, in a stable order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for k in out for t in flatten_tensors(out[k])]
    if isinstance(out, list | tuple):
        return [t for o in out for t in flatten_tensors(o)]
    if hasattr(out, "to_tuple"):  # transformers ModelOutput
        return flatten_tensors(out.to_tuple())
    return []


def _module_case(model: nn.Module, inputs: list[tuple[Any, ...]], training: bool, device: str) -> Case:
    model = model.to(device)
    model.train(training)
    if training:
        return Case(model, inputs, training_step(model), params=list(model.parameters()))
    return Case(model, inputs, inference_step, params=list(model.parameters()))


# --- pointwise and reductions -------------------------------------------------------------


def pointwise_chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = torch.cos(x)
    b = torch.sin(y)
    return torch.relu(a + b) * x


def _pointwise(device: str) -> Case:
    torch.manual_seed(0)
    x, y = (torch.randn(1_000_000, device=device) for _ in range(2))
    return Case(pointwise_chain, [(x, y)], inference_step)


def softmax_last(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def _softmax(device: str) -> Case:
    torch.manual_seed(0)
    return Case(softmax_last, [(torch.randn(512, 1024, device=device),)], inference_step)


def _layernorm_gelu(device: str) -> Case:
    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(1024), nn.GELU())
    return _module_case(model, [(torch.randn(256, 1024, device=device),)], False, device)


def tiny_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def _tiny_add(device: str) -> Case:
    torch.manual_seed(0)
    x, y = (torch.randn(4, device=device) for _ in range(2))
    return Case(tiny_add, [(x, y)], inference_step)


# --- MLP and CNN --------------------------------------------------------------------------


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512))


def _mlp_case(training: bool) -> Callable[[str], Case]:
    def build(device: str) -> Case:
        torch.manual_seed(0)
        model = _mlp()
        return _module_case(model, [(torch.randn(64, 512, device=device),)], training, device)

    return build


class ConvBlock(nn.Module):
    """conv-bn-relu twice, plus the residual: the ResNet basic block."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return torch.relu(h + x)


def _cnn(device: str) -> Case:
    torch.manual_seed(0)
    model = ConvBlock(32)
    with torch.no_grad():  # non-trivial running statistics, so eval-mode BN does real work
        for bn in (model.bn1, model.bn2):
            assert bn.running_mean is not None and bn.running_var is not None
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 1.5)
    return _module_case(model, [(torch.randn(8, 32, 32, 32, device=device),)], False, device)


# --- transformers -------------------------------------------------------------------------


def _encoder_layer(device: str) -> Case:
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(
        d_model=256, nhead=4, dim_feedforward=1024, dropout=0.0, batch_first=True
    )
    return _module_case(model, [(torch.randn(8, 128, 256, device=device),)], False, device)


class GPTBlock(nn.Module):
    """Pre-LN GPT block; causal attention written out as matmul + mask + softmax."""

    mask: torch.Tensor

    def __init__(self, d: int, heads: int, seq: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(dropout)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        att = self.drop(torch.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(y))
        h = self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))
        out: torch.Tensor = x + self.drop(h)
        return out


def _gpt_block_train(device: str) -> Case:
    torch.manual_seed(0)
    model = GPTBlock(128, 4, 64, dropout=0.1)
    return _module_case(model, [(torch.randn(8, 64, 128, device=device),)], True, device)


class TwoBlocksWithPrint(nn.Module):
    """Two GPT blocks with a ``print`` between them: one graph break in the middle."""

    def __init__(self) -> None:
        super().__init__()
        self.block1 = GPTBlock(128, 4, 64, dropout=0.0)
        self.block2 = GPTBlock(128, 4, 64, dropout=0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.block1(x)
        print("between the blocks")
        out: torch.Tensor = self.block2(h)
        return out


def _gpt_block(device: str) -> Case:
    torch.manual_seed(0)
    model = GPTBlock(128, 4, 64, dropout=0.0)
    return _module_case(model, [(torch.randn(8, 64, 128, device=device),)], False, device)


#: sequence lengths of ``gpt_block_6len``, in the order they are called
DYNAMIC_LENGTHS = (64, 48, 56, 40, 32, 24)


def _gpt_block_6len(device: str) -> Case:
    """The GPT block called at six sequence lengths in rotation: with the default
    ``dynamic=None`` the second length recompiles into a graph with a symbolic length,
    which serves the other four (compiled, not eager, on each device: ADR 0021, 0050)."""
    torch.manual_seed(0)
    model = GPTBlock(128, 4, 64, dropout=0.0)
    inputs = [(torch.randn(8, t, 128, device=device),) for t in DYNAMIC_LENGTHS]
    return _module_case(model, inputs, False, device)


def _graph_break(device: str) -> Case:
    torch.manual_seed(0)
    case = _module_case(TwoBlocksWithPrint(), [(torch.randn(8, 64, 128, device=device),)], False, device)
    case.silence_stdout = True
    return case


for _w in (
    Workload("pointwise", "cos/sin/add/relu/mul on 1e6 floats", _pointwise),
    Workload("softmax", "softmax over the last dim of 512x1024", _softmax, quick=False),
    Workload("layernorm_gelu", "LayerNorm + GELU on 256x1024", _layernorm_gelu, quick=False),
    Workload("mlp", "MLP 512-2048-512, batch 64, inference", _mlp_case(False), quick=False),
    Workload("mlp_train", "MLP 512-2048-512, batch 64, training step", _mlp_case(True), training=True),
    Workload("cnn_block", "conv-bn-relu x2 + residual, 8x32x32x32, eval", _cnn, quick=False, atol=1e-3),
    Workload(
        "encoder_layer",
        "nn.TransformerEncoderLayer d=256 h=4, batch 8, seq 128, inference",
        _encoder_layer,
        quick=False,
    ),
    Workload(
        "gpt_block_train",
        "GPT block d=128 h=4, batch 8, seq 64, causal attn + dropout, training step",
        _gpt_block_train,
        training=True,
        quick=False,
        random=True,
    ),
    Workload("graph_break", "two GPT blocks with a print() between them", _graph_break, quick=False),
    Workload(
        "gpt_block",
        "GPT block d=128 h=4, batch 8, seq 64, inference (the demo's model)",
        _gpt_block,
        quick=False,
        suite=False,
    ),
    Workload(
        "gpt_block_6len",
        "GPT block d=128 h=4, batch 8, inference at seq 64/48/56/40/32/24 in rotation "
        "(dynamic shapes: one static and one symbolic graph)",
        _gpt_block_6len,
        quick=False,
    ),
    Workload("tiny_add", "x + y on 4-element tensors: per-call overhead", _tiny_add),
):
    register_workload(_w)
