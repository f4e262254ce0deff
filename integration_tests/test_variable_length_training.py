"""The seed blog's variable-length training loop on a GPT-2-style model with manual attention.

The blog (``002_1daa7122265368d2.txt``, "Compiling Graphs with Variable-Shaped
Tensors") pads each batch to its longest caption, so every step may bring a new
length, and compiles with the default ``dynamic=None`` (the second length
recompiles to a symbolic graph) or ``dynamic=True``. The model here is the
GPT-2 shape written by hand, as users write it: token embeddings plus a learned
position table sliced by the length (``self.pos[:, :T]``), causal attention
with the mask sliced from a registered buffer (``self.bias[:, :, :T, :T]``),
``masked_fill`` and ``softmax``, tied input/output embeddings, and a
cross-entropy with ``ignore_index`` over the padding, trained with AdamW.

Before issue 31 the third length raised in the backward under inductor (the
slice of the position table kept the length of the call it was compiled at).
At each step the loss and every gradient are compared with eager's on the same
weights (the compiled copy is given eager's weights after each step, so the
comparison does not drift through AdamW's normalization).
"""

from __future__ import annotations

import copy
import logging
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ember.dynamo as ed

VOCAB, MAX_LEN = 64, 64


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.register_buffer("bias", torch.tril(torch.ones(MAX_LEN, MAX_LEN))
                             .view(1, 1, MAX_LEN, MAX_LEN))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, dim)
        self.pos = nn.Parameter(torch.randn(1, MAX_LEN, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = idx.size(1)
        x = self.wte(idx) + self.pos[:, :t]
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1), ignore_index=-100)


def caption_batch(step: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The blog's collate: captions of random lengths padded to the batch's longest."""
    gen = torch.Generator().manual_seed(step)
    ids = torch.randint(1, VOCAB, (2, length), generator=gen)
    targets = ids.roll(-1, 1)
    short = int(torch.randint(2, length, (1,), generator=gen))
    targets[1, short:] = -100  # the second caption is shorter: padding is ignored
    targets[:, -1] = -100
    return ids, targets


LENGTHS = (8, 12, 16, 20, 24, 13, 30)


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def train_like_eager(backend: str, dynamic: bool | None) -> None:
    torch.manual_seed(0)
    eager = GPT()
    model = copy.deepcopy(eager)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    opt_c = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ed.reset()
    compiled = ed.compile(model, backend=backend, dynamic=dynamic)
    handler = _Warnings()
    logging.getLogger("ember").addHandler(handler)
    try:
        for step, length in enumerate(LENGTHS):
            ids, targets = caption_batch(step, length)
            opt_e.zero_grad()
            opt_c.zero_grad()
            want = eager(ids, targets)
            want.backward()
            got = compiled(ids, targets)
            got.backward()
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=f"loss at {length}")
            for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
                assert p.grad is not None and q.grad is not None, name
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5,
                                           msg=f"{name} at length {length}")
            opt_e.step()
            opt_c.step()
            with torch.no_grad():
                for p, q in zip(model.parameters(), eager.parameters(), strict=True):
                    p.copy_(q)
    finally:
        logging.getLogger("ember").removeHandler(handler)
    assert not handler.messages, handler.messages  # nothing ran eagerly


@pytest.mark.parametrize("dynamic", [None, True], ids=["dynamic_none", "dynamic_true"])
def test_blog_loop_trains_a_gpt2_style_model_at_growing_lengths(dynamic: bool | None) -> None:
    train_like_eager("inductor", dynamic)


@pytest.mark.parametrize("dynamic", [None, True], ids=["dynamic_none", "dynamic_true"])
def test_blog_loop_under_aot_eager(dynamic: bool | None) -> None:
    train_like_eager("aot_eager", dynamic)
