"""Corpus part 1: tensor math as model code writes it (torch functions,
torch.nn.functional, Tensor methods and attributes, operators)."""

from __future__ import annotations

import math
import os
import sys

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from capture_harness import Case, check_case


def r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def readme_fn(a, b):
    x = a / (torch.abs(a) + 1)
    return x * b


def cos_sin(x, y):
    a = torch.cos(x)
    b = torch.sin(y)
    return a + b


def rms_norm(x, weight, eps=1e-6):
    var = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(var + eps)
    return weight * x


def layer_norm_manual(x, w, b):
    mu = x.mean(dim=-1, keepdim=True)
    sigma = (x - mu).pow(2).mean(dim=-1, keepdim=True)
    return (x - mu) / torch.sqrt(sigma + 1e-5) * w + b


def softmax_manual(x):
    x = x - x.max(dim=-1, keepdim=True).values
    e = x.exp()
    return e / e.sum(-1, keepdim=True)


def attention(q, k, v):
    d = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    probs = F.softmax(scores, dim=-1)
    return probs @ v


def causal_attention(q, k, v):
    t = q.size(-2)
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    scores = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def split_heads(x):
    b, t, c = x.shape
    h = 2
    return x.view(b, t, h, c // h).transpose(1, 2).contiguous()


def merge_heads(x):
    b, h, t, d = x.size()
    return x.permute(0, 2, 1, 3).reshape(b, t, h * d)


def swiglu(x, w1, w2, w3):
    return F.linear(F.silu(F.linear(x, w1)) * F.linear(x, w3), w2)


def mlp_functional(x, w1, b1, w2, b2):
    h = F.relu(F.linear(x, w1, b1))
    h = F.dropout(h, p=0.0, training=False)
    return F.linear(h, w2, b2)


def rotary(x):
    d = x.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    t = torch.arange(x.shape[-2]).float()
    freqs = torch.outer(t, inv)
    cos, sin = freqs.cos(), freqs.sin()
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def chunk_gate(x):
    a, b = x.chunk(2, dim=-1)
    return a * torch.sigmoid(b)


def split_sum(x):
    parts = torch.split(x, x.shape[0] // 2, dim=0)
    return sum(p.sum() for p in parts)


def inplace_ops(x):
    y = x.clone()
    y.add_(1.0)
    y.mul_(2)
    y += 3
    y *= x
    return y


def mutate_input(x):
    x.add_(1)
    x[0] = 0.0
    return x * 2


def indexing(x):
    return x[0], x[:, 1], x[1:, :2], x[None, ..., -1], x[..., None].shape


def setitem_slice(x):
    y = torch.zeros_like(x)
    y[:, :2] = x[:, :2] * 2
    y[1] = 5.0
    return y


def comparisons(x, y):
    return (x > y) & (x < 2), (x == y) | (x != 0), torch.where(x >= y, x, y)


def reductions(x):
    return x.sum(), x.mean(0), x.amax(dim=1), x.std(-1), x.var(), x.norm(), x.argmax(-1), x.logsumexp(-1)


def clamp_ops(x):
    return x.clamp(-1, 1) + x.clamp_min(0) + torch.clip(x, max=0.5)


def math_ops(x):
    return torch.exp(x) + torch.log1p(x.abs()) - torch.sqrt(x.abs() + 1) * torch.erf(x) / 2


def unary_ops(x):
    return -x, +x, abs(x), x ** 2, 2 ** x, 1 / (x.abs() + 1), x // 1.5, x % 2


def bool_ops(x):
    m = x > 0
    return ~m, m.float().sum(), m.any(), m.all(), (m ^ (x < 1))


def dtype_casts(x):
    return x.to(torch.float64), x.half().float(), x.int(), x.type(torch.float64), x.to(dtype=torch.bfloat16)


def dtype_attrs(x):
    out = x
    if x.dtype == torch.float32:
        out = out * 2
    if x.is_floating_point():
        out = out + 1
    if x.device.type == "cpu":
        out = out - 3
    return out, x.ndim, x.dim(), x.numel(), x.dtype, x.device, x.requires_grad


def shape_arith(x):
    n, d = x.shape
    y = x.reshape(n * d)
    return y.view(-1, d).expand(2, n, d).sum(0), y.new_zeros(n).shape


def transpose_attrs(x):
    return x.T @ x, x.mT.shape, x.t().contiguous()


def creation_ops(x):
    n = x.shape[0]
    a = torch.zeros(n, 3)
    b = torch.ones_like(x)
    c = torch.arange(n, dtype=torch.float32)
    d = torch.full((n,), 2.5)
    e = torch.eye(n)
    f = x.new_ones(n, 2)
    g = torch.empty_like(x).fill_(1.0)
    return a.sum() + b.sum() + c.sum() + d.sum() + e.sum() + f.sum() + g.sum() + x.sum()


def linspace_outer(x):
    steps = torch.linspace(0, 1, x.shape[-1])
    return x * steps + torch.outer(steps, steps)[0]


def cat_stack(x, y):
    return torch.cat([x, y], dim=0), torch.stack((x, y), 1), torch.hstack([x, y]), torch.vstack([x, y])


def einsum_bmm(a, b):
    return torch.einsum("bij,bjk->bik", a, b) + torch.bmm(a, b)


def conv_functional(x, w, b):
    y = F.conv2d(x, w, b, padding=1)
    y = F.max_pool2d(F.relu(y), 2)
    return F.adaptive_avg_pool2d(y, 1).flatten(1)


def pad_interp(x):
    y = F.pad(x, (1, 1, 1, 1), mode="constant", value=0.0)
    return F.interpolate(y, scale_factor=2, mode="nearest")


def one_hot_embed(idx, table):
    return F.embedding(idx, table) + F.one_hot(idx, table.shape[0]).float() @ table


def cross_entropy(logits, target):
    return F.cross_entropy(logits, target), F.nll_loss(F.log_softmax(logits, -1), target)


def losses(x, y):
    return F.mse_loss(x, y) + F.l1_loss(x, y) + F.smooth_l1_loss(x, y) + F.binary_cross_entropy_with_logits(x, torch.sigmoid(y))


def normalize_ops(x):
    return F.normalize(x, dim=-1), F.layer_norm(x, x.shape[-1:]), F.group_norm(x.unsqueeze(-1), 1).squeeze(-1)


def activations(x):
    return F.gelu(x) + F.silu(x) + F.leaky_relu(x, 0.1) + F.elu(x) + F.softplus(x) + F.hardtanh(x) + torch.tanh(x) + F.mish(x)


def cumulative(x):
    return x.cumsum(-1), torch.cumprod(x.clamp(0.5, 1.5), 0), x.flip(0), torch.roll(x, 1, 0)


def topk_sort(x):
    v, i = torch.topk(x, 2, dim=-1)
    s, _ = x.sort(dim=-1, descending=True)
    return v, i, s


def gather_scatter(x):
    idx = torch.zeros(x.shape[0], 1, dtype=torch.long)
    g = x.gather(1, idx)
    s = torch.zeros_like(x).scatter(1, idx, 1.0)
    return g, s


def masked_ops(x):
    m = x > 0
    return x.masked_fill(m, 0.0), torch.where(m, x, torch.zeros_like(x)), x * m


def broadcast_bias(x, b):
    return x + b[None, :], (x.unsqueeze(-1) * b).shape


def matmul_chain(x, w1, w2):
    return torch.relu(x @ w1) @ w2


def addmm_baddbmm(x, w, b):
    return torch.addmm(b, x, w), torch.baddbmm(b.expand(2, *b.shape), x.expand(2, *x.shape), w.expand(2, *w.shape))


def tensor_method_chain(x):
    return x.abs().sqrt().neg().exp().sum(dim=-1, keepdim=True).squeeze(-1)


def dim_kwargs(x):
    return torch.sum(x, dim=(0, 1)), x.mean(dim=[-1]), torch.max(x, dim=0)[0], torch.min(x, 1).indices


def float_scalars(x):
    scale = 1.0 / math.sqrt(x.shape[-1])
    eps = 1e-6
    return x * scale + eps, x.shape[-1] * 2.0, int(math.log2(8))


def where_scalar(x):
    return torch.where(x > 0, x, 0.0), torch.where(x > 0, 1.0, -1.0)


def complex_index(x):
    i = torch.arange(x.shape[0])
    return x[i, i % x.shape[1]], x[x > 0].shape[0] if False else x[:, [0, 1]]


def contiguous_view(x):
    y = x.transpose(0, 1)
    return y.contiguous().view(-1), y.reshape(-1), y.is_contiguous()


def dropout_eval(x):
    return F.dropout(x, 0.5, training=False) + torch.dropout(x, 0.0, False)


def type_as_ops(x, y):
    return x.type_as(y.double()), x.to(y), x.to(y.device), x.float().to("cpu")


def detach_grad(x):
    y = x * 2
    return y.detach(), y.requires_grad, x.detach().requires_grad


def requires_grad_math(x, w):
    return (x @ w).relu().sum()


def baddbmm_free(x):
    return torch.triu(x, 1) + torch.tril(x, -1), torch.diag(x.diagonal())


def repeat_tile(x):
    return x.repeat(2, 1), torch.tile(x, (1, 2)), x.repeat_interleave(2, dim=0), x.unsqueeze(1).expand(-1, 3, -1).flatten(0, 1)


def fill_diag(x):
    y = x.clone()
    y.fill_diagonal_(0)
    return y


def std_mean(x):
    s, m = torch.std_mean(x, dim=0)
    v, m2 = torch.var_mean(x, dim=1, unbiased=False)
    return s + m, v * m2


def int_tensor_ops(x):
    i = (x * 10).long()
    return i // 3, i % 4, i.bitwise_and(7), i.float().mean()


def nan_ops(x):
    y = x.clone()
    y[0, 0] = float("nan")
    return torch.nan_to_num(y), torch.isnan(y).sum(), y.isfinite()


CASES = [
    Case("readme_fn", readme_fn, lambda n: (r(n), r(n)), ops=4),
    Case("cos_sin", cos_sin, lambda n: (r(n), r(n)), ops=3),
    Case("gelu_tanh", gelu_tanh, lambda n: (r(n, 8),)),
    Case("rms_norm", rms_norm, lambda n: (r(n, 8), r(8))),
    Case("layer_norm_manual", layer_norm_manual, lambda n: (r(n, 8), r(8), r(8))),
    Case("softmax_manual", softmax_manual, lambda n: (r(n, 5),)),
    Case("attention", attention, lambda n: (r(2, n, 8), r(2, n, 8), r(2, n, 8))),
    Case("causal_attention", causal_attention, lambda n: (r(2, n, 8), r(2, n, 8), r(2, n, 8))),
    Case("sdpa", sdpa, lambda n: (r(1, 2, n, 8), r(1, 2, n, 8), r(1, 2, n, 8))),
    Case("split_heads", split_heads, lambda n: (r(2, n, 8),)),
    Case("merge_heads", merge_heads, lambda n: (r(2, 2, n, 4),)),
    Case("swiglu", swiglu, lambda n: (r(n, 8), r(16, 8), r(8, 16), r(16, 8))),
    Case("mlp_functional", mlp_functional, lambda n: (r(n, 8), r(16, 8), r(16), r(4, 16), r(4))),
    Case("rotary", rotary, lambda n: (r(2, n, 8),)),
    Case("chunk_gate", chunk_gate, lambda n: (r(n, 8),)),
    Case("split_sum", split_sum, lambda n: (r(n, 3),)),
    Case("inplace_ops", inplace_ops, lambda n: (r(n, 3),)),
    Case("mutate_input", mutate_input, lambda n: (r(n, 3),)),
    Case("indexing", indexing, lambda n: (r(n, 3),)),
    Case("setitem_slice", setitem_slice, lambda n: (r(n, 3),)),
    Case("comparisons", comparisons, lambda n: (r(n), r(n))),
    Case("reductions", reductions, lambda n: (r(n, 3),)),
    Case("clamp_ops", clamp_ops, lambda n: (r(n),)),
    Case("math_ops", math_ops, lambda n: (r(n),)),
    Case("unary_ops", unary_ops, lambda n: (r(n),)),
    Case("bool_ops", bool_ops, lambda n: (r(n),)),
    Case("dtype_casts", dtype_casts, lambda n: (r(n),)),
    Case("dtype_attrs", dtype_attrs, lambda n: (r(n),)),
    Case("shape_arith", shape_arith, lambda n: (r(n, 3),)),
    Case("transpose_attrs", transpose_attrs, lambda n: (r(n, 3),)),
    Case("creation_ops", creation_ops, lambda n: (r(n, n),)),
    Case("linspace_outer", linspace_outer, lambda n: (r(n, n),)),
    Case("cat_stack", cat_stack, lambda n: (r(n, 2), r(n, 2))),
    Case("einsum_bmm", einsum_bmm, lambda n: (r(2, n, 3), r(2, 3, n))),
    Case("conv_functional", conv_functional, lambda n: (r(1, 3, n, n), r(4, 3, 3, 3), r(4))),
    Case("pad_interp", pad_interp, lambda n: (r(1, 2, n, n),)),
    Case("one_hot_embed", one_hot_embed, lambda n: (torch.randint(0, 5, (n,)), r(5, 3))),
    Case("cross_entropy", cross_entropy, lambda n: (r(n, 5), torch.randint(0, 5, (n,)))),
    Case("losses", losses, lambda n: (r(n), r(n))),
    Case("normalize_ops", normalize_ops, lambda n: (r(n, 4),)),
    Case("activations", activations, lambda n: (r(n),)),
    Case("cumulative", cumulative, lambda n: (r(n, 3),)),
    Case("topk_sort", topk_sort, lambda n: (r(n, 4),)),
    Case("gather_scatter", gather_scatter, lambda n: (r(n, 4),)),
    Case("masked_ops", masked_ops, lambda n: (r(n, 4),)),
    Case("broadcast_bias", broadcast_bias, lambda n: (r(n, 4), r(4))),
    Case("matmul_chain", matmul_chain, lambda n: (r(n, 4), r(4, 8), r(8, 2))),
    Case("addmm_baddbmm", addmm_baddbmm, lambda n: (r(n, 4), r(4, 3), r(n, 3))),
    Case("tensor_method_chain", tensor_method_chain, lambda n: (r(n, 4),)),
    Case("dim_kwargs", dim_kwargs, lambda n: (r(n, 4),)),
    Case("float_scalars", float_scalars, lambda n: (r(n, 4),)),
    Case("where_scalar", where_scalar, lambda n: (r(n),)),
    Case("complex_index", complex_index, lambda n: (r(n, 4),)),
    Case("contiguous_view", contiguous_view, lambda n: (r(n, 4),)),
    Case("dropout_eval", dropout_eval, lambda n: (r(n),)),
    Case("type_as_ops", type_as_ops, lambda n: (r(n), r(n))),
    Case("detach_grad", detach_grad, lambda n: (r(n).requires_grad_(),)),
    Case("requires_grad_math", requires_grad_math, lambda n: (r(n, 3), r(3, 2).requires_grad_())),
    Case("triu_diag", baddbmm_free, lambda n: (r(n, n),)),
    Case("repeat_tile", repeat_tile, lambda n: (r(n, 2),)),
    Case("fill_diag", fill_diag, lambda n: (r(n, n),)),
    Case("std_mean", std_mean, lambda n: (r(n, 3),)),
    Case("int_tensor_ops", int_tensor_ops, lambda n: (r(n),)),
    Case("nan_ops", nan_ops, lambda n: (r(n, 2),)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_ops(case: Case) -> None:
    check_case(case)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("call", ["p0", "eval", "p0_inplace", "torch_dropout"])
def test_dropout_that_drops_nothing_returns_its_input_at_every_size(backend: str, call: str) -> None:
    """Eager's dropout returns the input itself when ``p == 0`` or not training
    (``nn.Dropout`` in eval mode). With symbolic sizes capture went through torch's Python
    decomposition, which returns a copy: from the second size on, the output no longer
    shared the input's memory (fuzz seed 240)."""
    import ember.dynamo as ed

    fns = {
        "p0": lambda x: F.dropout(x, 0.0),
        "eval": lambda x: F.dropout(x, 0.3, training=False),
        "p0_inplace": lambda x: F.dropout(x, p=0.0, inplace=True),
        "torch_dropout": lambda x: torch.dropout(x, 0.0, True),
    }
    ed.reset()
    f = ed.compile(fns[call], backend=backend)
    for shape in [(4, 3, 5), (4, 3, 5), (6, 5, 7), (7, 6, 8)]:
        x = torch.randn(shape)
        y = f(x)
        assert y.data_ptr() == x.data_ptr() and y.shape == x.shape
