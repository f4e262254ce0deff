"""Corpus part 3: nn.Module forwards (leaf modules as call_module, user
modules inlined, containers unrolled, parameters as get_attr, attribute
side effects)."""

from __future__ import annotations

import dataclasses
import math
import os
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(__file__))
from capture_harness import Case, check_case


def r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


class MockModule(nn.Module):
    """The second example of the TorchDynamo README."""

    def __init__(self):
        super().__init__()
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(torch.cos(x))


class MLP(nn.Module):
    def __init__(self, d=8, h=16, act=nn.GELU):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.act = act()
        self.fc2 = nn.Linear(h, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(self.fc2(self.act(self.fc1(x))))


class Attention(nn.Module):
    def __init__(self, d=8, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.scale = (d // heads) ** -0.5

    def forward(self, x, mask=None):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * self.scale
        if mask is not None:
            att = att.masked_fill(mask == 0, float("-inf"))
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=11, d=8, n_layer=2, block=4):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(block * 4, d)
        self.blocks = nn.ModuleList([Block(d) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        x = self.features(x)
        return self.fc(torch.flatten(self.pool(x), 1))


class BasicBlock(nn.Module):
    def __init__(self, c=4):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        identity = x
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class ParamModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))
        self.bias = nn.Parameter(torch.zeros(4))
        self.register_buffer("running", torch.ones(4))
        self.alpha = 0.5

    def forward(self, x):
        return F.linear(x, self.weight, self.bias) * self.running + self.alpha


class CounterModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.calls = 0
        self.last = None

    def forward(self, x):
        y = self.lin(x)
        self.last = y.detach()
        self.flag = True
        return y


class RMSNorm(nn.Module):
    def __init__(self, d=8, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self._norm(x.float()).type_as(x) * self.weight


class LlamaMLP(nn.Module):
    def __init__(self, d=8, h=16):
        super().__init__()
        self.gate = nn.Linear(d, h, bias=False)
        self.up = nn.Linear(d, h, bias=False)
        self.down = nn.Linear(h, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class ModuleDictNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 3)})

    def forward(self, x):
        return {k: head(x) for k, head in self.heads.items()}


class SequentialIndex(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4), nn.Sigmoid())

    def forward(self, x):
        h = self.seq[0](x)
        for layer in self.seq[1:]:
            h = layer(h)
        return h + self.seq[-1](x), len(self.seq)


class LoopWithIndex(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(n)])
        self.norms = nn.ModuleList([nn.LayerNorm(4) for _ in range(n)])

    def forward(self, x):
        for i in range(len(self.layers)):
            x = self.norms[i](x + self.layers[i](x))
        return x


class ZipLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.b = nn.ModuleList([nn.GELU(), nn.ReLU()])

    def forward(self, x):
        for lin, act in zip(self.a, self.b):
            x = act(lin(x))
        return x


class TrainingFlag(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        if self.training:
            y = y * 2
        return y


class ConfigModule(nn.Module):
    def __init__(self, act="gelu", residual=True):
        super().__init__()
        self.act_name = act
        self.residual = residual
        self.lin = nn.Linear(4, 4)

    def act(self, x):
        return getattr(F, self.act_name)(x)

    def forward(self, x):
        y = self.act(self.lin(x))
        return x + y if self.residual else y


class StaticHelper(nn.Module):
    @staticmethod
    def helper(x):
        return x * 2

    @property
    def factor(self):
        return 3.0

    def forward(self, x):
        return self.helper(x) * self.factor


class EmbeddingBagLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.proj = nn.Linear(4, 2)

    def forward(self, ids):
        return self.proj(self.emb(ids).mean(dim=1))


class GRUish(nn.Module):
    def __init__(self):
        super().__init__()
        self.x2h = nn.Linear(4, 12)
        self.h2h = nn.Linear(4, 12)

    def forward(self, xs):
        h = torch.zeros(xs.shape[0], 4)
        for t in range(3):
            x = xs[:, t]
            r_, z, n = (self.x2h(x) + self.h2h(h)).chunk(3, -1)
            h = (1 - torch.sigmoid(z)) * torch.tanh(n * torch.sigmoid(r_)) + torch.sigmoid(z) * h
        return h


class TransformerLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.layer(x)


class MultiHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        out, _ = self.mha(x, x, x, need_weights=False)
        return out


class NormsZoo(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.ln = nn.LayerNorm(4)
        self.gn = nn.GroupNorm(2, 4)
        self.inorm = nn.InstanceNorm1d(4)

    def forward(self, x):
        return self.bn(x) + self.ln(x) + self.gn(x) + self.inorm(x.unsqueeze(-1).expand(-1, -1, 3)).mean(-1)


class ConvTranspose(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(2, 2, 2, stride=2)
        self.conv = nn.Conv1d(2, 2, 3, padding=1)

    def forward(self, x):
        y = self.up(x)
        return self.conv(y.flatten(2)).sum()


class Pooling(nn.Module):
    def __init__(self):
        super().__init__()
        self.avg = nn.AvgPool2d(2)
        self.up = nn.Upsample(scale_factor=2)
        self.flat = nn.Flatten()

    def forward(self, x):
        return self.flat(self.up(self.avg(x)))


class Activations(nn.Module):
    def __init__(self):
        super().__init__()
        self.acts = nn.ModuleList([nn.ReLU(), nn.GELU(), nn.SiLU(), nn.Tanh(), nn.Softmax(-1), nn.LeakyReLU(0.2), nn.ELU(), nn.Hardswish()])

    def forward(self, x):
        return [a(x) for a in self.acts]


class Identity(nn.Module):
    def __init__(self):
        super().__init__()
        self.id = nn.Identity()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.id(self.lin(x)), self.lin.weight.shape, self.lin.out_features


class SharedWeights(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(6, 4)
        self.out = nn.Linear(4, 6, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, ids):
        return self.out(self.emb(ids))


class ParametersLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        reg = 0
        for p in self.parameters():
            reg = reg + p.pow(2).sum()
        return self.lin(x), reg


class ChildrenLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.ReLU()
        self.c = nn.Linear(4, 4)

    def forward(self, x):
        for m in self.children():
            x = m(x)
        return x


class NestedUser(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = RMSNorm(4)
        self.mlp = LlamaMLP(4, 8)

    def forward(self, x):
        return self.mlp(self.inner(x)) + x


class KwargsForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, scale=1.0, *, shift=0.0, **extra):
        y = self.lin(x) * scale + shift
        if extra.get("double"):
            y = y * 2
        return y


class CallKwargs(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = KwargsForward()

    def forward(self, x):
        return self.m(x, 2.0, shift=1.0, double=True)


class BufferUpdate(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("ema", torch.zeros(4))

    def forward(self, x):
        self.ema.mul_(0.9).add_(x.mean(0).detach(), alpha=0.1)
        return x - self.ema


class PositionalEncoding(nn.Module):
    def __init__(self, d=8, max_len=32):
        super().__init__()
        pe = torch.zeros(max_len, d)
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return x + self.pe[: x.size(1)]


class LSTMCellNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(4, 4)

    def forward(self, x):
        h, c = self.cell(x)
        return h + c


@dataclasses.dataclass
class AttnConfig:
    hidden: int = 8
    heads: int = 2
    use_cache: bool = False


class HFStyleAttention(nn.Module):
    """Attention as Hugging Face models write it: config object, helper
    method, optional mask, finfo, tuple outputs."""

    def __init__(self, cfg=None):
        super().__init__()
        self.cfg = cfg or AttnConfig()
        self.q = nn.Linear(self.cfg.hidden, self.cfg.hidden)
        self.k = nn.Linear(self.cfg.hidden, self.cfg.hidden)
        self.v = nn.Linear(self.cfg.hidden, self.cfg.hidden)
        self.head_dim = self.cfg.hidden // self.cfg.heads

    def _shape(self, t, b, s):
        return t.view(b, s, self.cfg.heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden_states, attention_mask=None, output_attentions=False, **kwargs):
        bsz, seq, _ = hidden_states.size()
        q = self._shape(self.q(hidden_states), bsz, seq)
        k = self._shape(self.k(hidden_states), bsz, seq)
        v = self._shape(self.v(hidden_states), bsz, seq)
        w = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        if attention_mask is not None:
            w = w + attention_mask
            w = torch.max(w, torch.tensor(torch.finfo(w.dtype).min))
        w = nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(w, v).transpose(1, 2).reshape(bsz, seq, -1)
        outputs = (out, w) if output_attentions else (out,)
        if getattr(self.cfg, "use_cache", False):
            outputs = outputs + (None,)
        return outputs


class SuperChild(LlamaMLP):
    def forward(self, x):
        y = super().forward(x)
        return y * 2 + super().forward(x)


def mk(mod: nn.Module, make, name: str, **kw) -> Case:
    mod.eval() if kw.pop("eval", False) else None
    return Case(name, mod, make, **kw)


CASES = [
    mk(MockModule(), lambda n: (r(n),), "readme_mock_module", ops=2),
    mk(MLP(), lambda n: (r(n, 8),), "mlp", eval=True, ops=4),
    mk(Attention(), lambda n: (r(2, n, 8),), "attention"),
    mk(Block(), lambda n: (r(2, n, 8),), "block"),
    mk(GPT(), lambda n: (torch.randint(0, 11, (2, n)),), "gpt"),
    mk(ConvNet(), lambda n: (r(2, 3, 2 * n, 2 * n),), "convnet", eval=True),
    mk(ConvNet(), lambda n: (r(2, 3, 2 * n, 2 * n),), "convnet_train"),
    mk(BasicBlock(), lambda n: (r(1, 4, n, n),), "resnet_basic_block", eval=True),
    mk(ParamModule(), lambda n: (r(n, 4),), "param_module"),
    mk(CounterModule(), lambda n: (r(n, 4),), "attr_side_effects"),
    mk(RMSNorm(), lambda n: (r(n, 8),), "rmsnorm"),
    mk(LlamaMLP(), lambda n: (r(n, 8),), "llama_mlp", ops=5),
    mk(ModuleDictNet(), lambda n: (r(n, 4),), "module_dict"),
    mk(SequentialIndex(), lambda n: (r(n, 4),), "sequential_index"),
    mk(LoopWithIndex(), lambda n: (r(n, 4),), "modulelist_index_loop"),
    mk(ZipLayers(), lambda n: (r(n, 4),), "zip_modulelists"),
    mk(TrainingFlag(), lambda n: (r(n, 4),), "training_flag"),
    mk(TrainingFlag(), lambda n: (r(n, 4),), "training_flag_eval", eval=True),
    mk(ConfigModule(), lambda n: (r(n, 4),), "config_module"),
    mk(ConfigModule("relu", False), lambda n: (r(n, 4),), "config_module_relu"),
    mk(StaticHelper(), lambda n: (r(n, 4),), "static_and_property"),
    mk(EmbeddingBagLike(), lambda n: (torch.randint(0, 10, (n, 3)),), "embedding_mean"),
    mk(GRUish(), lambda n: (r(n, 3, 4),), "gru_like_loop"),
    mk(TransformerLayer(), lambda n: (r(2, n, 8),), "transformer_encoder_layer", eval=True),
    mk(MultiHead(), lambda n: (r(2, n, 8),), "multihead_attention"),
    mk(NormsZoo(), lambda n: (r(n, 4),), "norms_zoo"),
    mk(ConvTranspose(), lambda n: (r(1, 2, n, n),), "conv_transpose"),
    mk(Pooling(), lambda n: (r(1, 2, n, n),), "pooling"),
    mk(Activations(), lambda n: (r(n, 4),), "activations"),
    mk(Identity(), lambda n: (r(n, 4),), "identity_and_attrs"),
    mk(SharedWeights(), lambda n: (torch.randint(0, 6, (n,)),), "tied_weights"),
    mk(ParametersLoop(), lambda n: (r(n, 4),), "parameters_loop"),
    mk(ChildrenLoop(), lambda n: (r(n, 4),), "children_loop"),
    mk(NestedUser(), lambda n: (r(n, 4),), "nested_user_modules"),
    mk(CallKwargs(), lambda n: (r(n, 4),), "forward_kwargs"),
    mk(BufferUpdate(), lambda n: (r(n, 4),), "buffer_inplace_update"),
    mk(PositionalEncoding(), lambda n: (r(2, n, 8),), "positional_encoding"),
    mk(LSTMCellNet(), lambda n: (r(n, 4),), "lstm_cell"),
    mk(SuperChild(), lambda n: (r(n, 8),), "super_forward"),
    mk(HFStyleAttention(), lambda n: (r(2, n, 8), torch.zeros(2, 1, n, n)), "hf_style_attention"),
    # torch.nn modules compiled directly: their own forward is the frame
    mk(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), lambda n: (r(2, n, 8),), "top_transformer_layer", eval=True),
    mk(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, norm_first=True, activation="gelu"), lambda n: (r(n, 2, 8),), "top_transformer_layer_train"),
    mk(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), lambda n: (r(n, 4),), "top_sequential"),
    mk(nn.Linear(4, 3), lambda n: (r(n, 4),), "top_linear", ops=1),
    mk(nn.MultiheadAttention(8, 2, batch_first=True), lambda n: (r(1, n, 8), r(1, n, 8), r(1, n, 8)), "top_multihead"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_modules(case: Case) -> None:
    check_case(case)
