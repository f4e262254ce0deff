"""Training real models through aotgrad gives eager's outputs, gradients and buffers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 4, 3)
        self.bn2 = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.conv(x)))
        return F.relu(self.bn2(self.conv2(x))).mean(dim=(2, 3))


class GPTBlock(nn.Module):
    """Pre-norm decoder block: causal self-attention + MLP, with dropout."""

    def __init__(self, d: int = 32, heads: int = 4, p: float = 0.1) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        att = self.drop(att)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class NormChain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(24)
        self.lin = nn.Linear(24, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.ln(x))
        h = torch.softmax(self.lin(h), dim=-1)
        return F.layer_norm(h * x, (24,))


def test_mlp(check_training, partition_fn) -> None:
    torch.manual_seed(0)
    check_training(MLP(), lambda: [torch.randn(8, 16, requires_grad=True)], partition_fn)


def test_cnn_batchnorm_train_mode_updates_running_stats(check_training, partition_fn) -> None:
    torch.manual_seed(0)
    model = ConvBN().train()
    check_training(model, lambda: [torch.randn(2, 3, 8, 8)], partition_fn, steps=3)


def test_cnn_batchnorm_eval_mode(check_training, partition_fn) -> None:
    torch.manual_seed(0)
    model = ConvBN()
    model.bn.running_mean.uniform_()
    model.eval()
    check_training(model, lambda: [torch.randn(2, 3, 8, 8, requires_grad=True)], partition_fn)


def test_transformer_encoder_layer(check_training, partition_fn) -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.1, batch_first=True)
    check_training(layer, lambda: [torch.randn(2, 6, 32)], partition_fn, atol=1e-4)


def test_gpt_block_with_causal_attention_and_dropout(check_training, partition_fn) -> None:
    torch.manual_seed(0)
    check_training(GPTBlock(), lambda: [torch.randn(2, 8, 32, requires_grad=True)],
                   partition_fn, atol=1e-4)


def test_layernorm_gelu_softmax_chain(check_training, partition_fn) -> None:
    torch.manual_seed(0)
    check_training(NormChain(), lambda: [torch.randn(4, 5, 24, requires_grad=True)],
                   partition_fn)


def test_symbolic_traced_model(check_training, partition_fn) -> None:
    torch.manual_seed(0)
    gm = torch.fx.symbolic_trace(MLP())
    check_training(gm, lambda: [torch.randn(8, 16, requires_grad=True)], partition_fn)


def test_dropout_differs_across_seeds_so_the_seed_check_is_meaningful() -> None:
    from ember.aotgrad import aot_module, nop_compiler

    torch.manual_seed(0)
    model = GPTBlock(p=0.5)
    compiled = aot_module(model, nop_compiler)
    x = torch.randn(2, 8, 32)
    torch.manual_seed(1)
    a = compiled(x)
    torch.manual_seed(2)
    b = compiled(x)
    torch.manual_seed(1)
    c = model(x)
    assert not torch.allclose(a, b)
    torch.testing.assert_close(a, c)


def _tiny_models() -> dict[str, tuple[nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))
    cnn = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU())
    enc = nn.TransformerEncoderLayer(4, 2, dim_feedforward=6, dropout=0.0, batch_first=True)
    gpt = GPTBlock(d=4, heads=2, p=0.0)
    norm = NormChain()
    return {
        "mlp": (mlp, torch.randn(4, 3)),
        "cnn_bn_train": (cnn, torch.randn(2, 2, 3, 3)),
        "encoder_layer": (enc, torch.randn(1, 3, 4)),
        "gpt_block": (gpt, torch.randn(1, 3, 4)),
        "norm_chain": (norm, torch.randn(1, 24)),
    }


@pytest.mark.parametrize("name", [
    "mlp",
    "norm_chain",
    pytest.param("cnn_bn_train", marks=pytest.mark.slow),
    pytest.param("encoder_layer", marks=pytest.mark.slow),
    pytest.param("gpt_block", marks=pytest.mark.slow),
])
def test_gradcheck_float64_tiny_models(name: str) -> None:
    from ember.aotgrad import aot_function, nop_compiler

    model, x = _tiny_models()[name]
    model = model.double().train()
    names = [n for n, _ in model.named_parameters()]
    buffers = dict(model.named_buffers())

    def fn(inp: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        state = {**dict(zip(names, params)), **buffers}
        out: torch.Tensor = torch.func.functional_call(model, state, (inp,))
        return out

    params = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    inp = x.double().requires_grad_(True)
    assert torch.autograd.gradcheck(aot_function(fn, nop_compiler), (inp, *params))
