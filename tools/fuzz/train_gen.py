"""Training programs: a random ``nn.Module`` trained at three growing sequence lengths.

The forward fuzzer's programs are functions of tensors; a user's training step
is a module with parameters, called on batches whose length grows (the seed
blog's variable-length captions), so that under the default ``dynamic=None`` the
first call compiles a static graph and the second a symbolic one, whose backward
must then serve every later length. A training program is that: a module built
from a random list of blocks over a hidden state ``h`` of shape ``[B, T, D]``
(``T`` the length), called at three lengths, with its loss backpropagated.

The blocks are the constructs whose backward depends on ``T``: parameters sliced,
narrowed or indexed by the length (a learned position table), embeddings of
``arange(T)``, causal attention with masks built from ``T`` (``tril``, a
buffer sliced ``[:T, :T]``, ``arange`` comparisons, an additive ``-inf`` mask,
``is_causal``), a prepended class token, dropped or shifted positions, causal
cumulative means, convolutions over ``T``, padding, gathers and scatters along
``T``; plus linear layers, norms and activations between them, and auxiliary
outputs that are ``expand``ed views. Generation is generate-and-test, as for
the forward fuzzer: a block is kept only if eager runs the forward and the
backward at all three lengths with finite values.
"""

from __future__ import annotations

import linecache
import math
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True, slots=True)
class Block:
    """Source lines of one block: in ``__init__`` (parameters) and in ``forward``."""

    kind: str
    init: tuple[str, ...]
    forward: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "init": list(self.init), "forward": list(self.forward)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Block:
        return Block(d["kind"], tuple(d["init"]), tuple(d["forward"]))


@dataclass(frozen=True)
class TrainProgram:
    """A module (``blocks`` between an input stage and a head) and the batches it trains on.

    ``inputs``: ``"ids"`` (token ids ``[B, T]``, embedded by the first block) or ``"float"``
    (``[B, T, D]`` that requires grad). ``head``: ``"lm"`` (a cross-entropy over the
    vocabulary against the next token), ``"pool"`` (a classifier on the mean over ``T``)
    or ``"hidden"`` (``h`` itself; the harness weighs it). ``lengths`` grow; with
    ``grow_batch`` the batch grows too (by one per call).
    """

    seed: int
    batch: int
    lengths: tuple[int, ...]
    dim: int
    vocab: int
    inputs: str
    head: str
    blocks: tuple[Block, ...]
    grow_batch: bool = False

    @property
    def max_len(self) -> int:
        return max(self.lengths) + 8

    def batches(self) -> list[int]:
        return [self.batch + (k if self.grow_batch else 0) for k in range(len(self.lengths))]

    # -- source ---------------------------------------------------------------------------
    def module_source(self) -> str:
        lines = ["class Model(nn.Module):", "    def __init__(self):",
                 "        super().__init__()", f"        torch.manual_seed({self.seed})"]
        for b in self.blocks:
            lines += ["        " + ln for ln in b.init]
        if self.head == "lm":
            lines.append(f"        self.head = nn.Linear({self.dim}, {self.vocab}, bias=False)")
        elif self.head == "pool":
            lines.append(f"        self.head = nn.Linear({self.dim}, 3)")
        lines += ["", "    def forward(self, x, y):", "        aux = []"]
        if self.inputs == "float":
            lines.append("        h = x")
        for b in self.blocks:
            lines += ["        " + ln for ln in b.forward]
        if self.head == "lm":
            lines += ["        logits = self.head(h)",
                      "        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), "
                      "y[:, : logits.shape[1]].reshape(-1))",
                      "        return (loss, *aux)"]
        elif self.head == "pool":
            lines += ["        loss = F.cross_entropy(self.head(h.mean(1)), y[:, 0] % 3)",
                      "        return (loss, *aux)"]
        else:
            lines.append("        return (h, *aux)")
        return "\n".join(lines) + "\n"

    def inputs_source(self) -> str:
        """``make_inputs(batch, length, seed, upcast=False) -> [x, y], leaves``."""
        lines = ["def make_inputs(batch, length, seed, upcast=False):",
                 "    g = torch.Generator().manual_seed(seed)"]
        if self.inputs == "ids":
            lines.append(f"    x = torch.randint(0, {self.vocab}, (batch, length), generator=g)")
            leaves = "[]"
        else:
            lines += [f"    x = torch.randn(batch, length, {self.dim}, generator=g)",
                      "    x = (x.double() if upcast else x).requires_grad_()"]
            leaves = "[x]"
        # targets: the next token, padded with ignore_index at the end (as the blog's collate)
        lines += [f"    y = torch.randint(0, {self.vocab}, (batch, length + 4), generator=g)",
                  "    y[:, -3:] = -100",
                  f"    return [x, y], {leaves}"]
        return "\n".join(lines) + "\n"

    def source(self) -> str:
        return ("import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\n\n"
                + self.module_source() + "\n\n" + self.inputs_source())

    def namespace(self) -> dict[str, Any]:
        src = self.source()
        filename = f"<fuzz train program {self.seed} {abs(hash(src)) % 10**8}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        ns: dict[str, Any] = {}
        exec(compile(src, filename, "exec"), ns)
        return ns

    def build(self) -> tuple[nn.Module, Callable[..., Any]]:
        """(a fresh model, ``make_inputs``)."""
        ns = self.namespace()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model: nn.Module = ns["Model"]()
        return model, ns["make_inputs"]

    # -- JSON / editing ---------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"train": True, "seed": self.seed, "batch": self.batch,
                "lengths": list(self.lengths), "dim": self.dim, "vocab": self.vocab,
                "inputs": self.inputs, "head": self.head, "grow_batch": self.grow_batch,
                "blocks": [b.to_json() for b in self.blocks]}

    @staticmethod
    def from_json(d: dict[str, Any]) -> TrainProgram:
        return TrainProgram(d["seed"], d["batch"], tuple(d["lengths"]), d["dim"], d["vocab"],
                            d["inputs"], d["head"], tuple(Block.from_json(b) for b in d["blocks"]),
                            d.get("grow_batch", False))

    def without(self, i: int) -> TrainProgram:
        return replace(self, blocks=self.blocks[:i] + self.blocks[i + 1:])


# -- the blocks -------------------------------------------------------------------------
#
# Each production gets the rng, the program so far (dim, max length) and a fresh index k
# for its attribute names, and returns a Block. Forward lines read and write ``h``.

Production = Callable[[random.Random, "Ctx"], Block]


@dataclass
class Ctx:
    dim: int
    max_len: int
    vocab: int
    k: int = 0

    def name(self, prefix: str) -> str:
        self.k += 1
        return f"{prefix}{self.k}"


def _param(shape: str, scale: float = 0.3) -> str:
    return f"nn.Parameter(torch.randn({shape}) * {scale})"


def embed(rng: random.Random, c: Ctx) -> Block:
    e = c.name("emb")
    return Block("embed", (f"self.{e} = nn.Embedding({c.vocab}, {c.dim})",),
                 (f"h = self.{e}(x)",))


def pos_slice(rng: random.Random, c: Ctx) -> Block:
    p = c.name("pos")
    how = rng.choice([
        f"h = h + self.{p}[: h.shape[1]]",
        f"h = h + self.{p}[-h.shape[1]:]",
        f"h = h + self.{p}[1 : h.shape[1] + 1]",
        f"h = h + self.{p}.narrow(0, {rng.randint(0, 3)}, h.shape[1])",
        f"h = h + self.{p}.index_select(0, torch.arange(h.shape[1], device=h.device))",
        f"h = h + self.{p}[None, : h.shape[1]].expand(h.shape[0], -1, -1)",
        f"h = h * self.{p}[: h.shape[1]].sigmoid()",
    ])
    return Block("pos_slice", (f"self.{p} = {_param(f'{c.max_len}, {c.dim}')}",), (how,))


def pos_gate(rng: random.Random, c: Ctx) -> Block:
    p = c.name("gate")
    return Block("pos_gate", (f"self.{p} = {_param(str(c.max_len))}",),
                 (f"h = h * self.{p}[: h.shape[1]].sigmoid().unsqueeze(-1)",))


def pos_embedding(rng: random.Random, c: Ctx) -> Block:
    e = c.name("wpe")
    offset = rng.choice(["", " + 1"])
    return Block("pos_embedding", (f"self.{e} = nn.Embedding({c.max_len + 2}, {c.dim})",),
                 (f"h = h + self.{e}(torch.arange(h.shape[1], device=h.device){offset})",))


def linear(rng: random.Random, c: Ctx) -> Block:
    lin = c.name("lin")
    bias = rng.choice(["", ", bias=False"])
    return Block("linear", (f"self.{lin} = nn.Linear({c.dim}, {c.dim}{bias})",),
                 (f"h = self.{lin}(h)",))


def mlp(rng: random.Random, c: Ctx) -> Block:
    a, b = c.name("up"), c.name("down")
    act = rng.choice(["F.gelu", "F.silu", "torch.tanh", "F.relu"])
    return Block("mlp", (f"self.{a} = nn.Linear({c.dim}, {2 * c.dim})",
                         f"self.{b} = nn.Linear({2 * c.dim}, {c.dim})"),
                 (f"h = h + self.{b}({act}(self.{a}(h)))",))


def norm(rng: random.Random, c: Ctx) -> Block:
    n = c.name("norm")
    if rng.random() < 0.6:
        return Block("layernorm", (f"self.{n} = nn.LayerNorm({c.dim})",), (f"h = self.{n}(h)",))
    return Block("rmsnorm", (f"self.{n} = nn.Parameter(torch.ones({c.dim}))",),
                 (f"h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * self.{n}",))


def activation(rng: random.Random, c: Ctx) -> Block:
    return Block("act", (), (rng.choice(["h = F.gelu(h)", "h = torch.tanh(h)", "h = F.silu(h)",
                                         "h = F.relu(h) + 0.1 * h"]),))


_MASKS = {
    "tril": ("mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=h.device))",
             "att = att.masked_fill(~mask, float('-inf'))"),
    "buffer": ("mask = self.{buf}[:T, :T]", "att = att.masked_fill(mask == 0, float('-inf'))"),
    "arange": ("i = torch.arange(T, device=h.device)",
               "att = att.masked_fill(i[None, :] > i[:, None], float('-inf'))"),
    "additive": ("bias = torch.full((T, T), float('-inf'), device=h.device).triu(1)",
                 "att = att + bias"),
    "alibi": ("i = torch.arange(T, device=h.device)",
              "att = att - 0.1 * (i[:, None] - i[None, :]).abs().float()\n"
              "att = att.masked_fill(i[None, :] > i[:, None], -1e9)"),
}


def attention(rng: random.Random, c: Ctx) -> Block:
    qkv, out = c.name("qkv"), c.name("proj")
    heads = rng.choice([h for h in (1, 2, 4) if c.dim % h == 0])
    hd = c.dim // heads
    init = [f"self.{qkv} = nn.Linear({c.dim}, {3 * c.dim})", f"self.{out} = nn.Linear({c.dim}, {c.dim})"]
    fwd = ["B, T, C = h.shape",
           f"q, k, v = self.{qkv}(h).split(C, dim=2)",
           f"q = q.view(B, T, {heads}, {hd}).transpose(1, 2)",
           f"k = k.view(B, T, {heads}, {hd}).transpose(1, 2)",
           f"v = v.view(B, T, {heads}, {hd}).transpose(1, 2)"]
    kind = rng.choice(["tril", "buffer", "arange", "additive", "alibi", "sdpa"])
    if kind == "sdpa":
        fwd.append("y = F.scaled_dot_product_attention(q, k, v, is_causal=True)")
    else:
        buf = c.name("mask")
        if kind == "buffer":
            init.append(f"self.register_buffer('{buf}', torch.tril(torch.ones({c.max_len}, "
                        f"{c.max_len})))")
        make, apply = _MASKS[kind]
        fwd += [f"att = (q @ k.transpose(-2, -1)) * {1.0 / math.sqrt(hd):.6f}",
                make.format(buf=buf), *apply.splitlines(),
                "att = att.softmax(-1)", "y = att @ v"]
    fwd += ["y = y.transpose(1, 2).contiguous().view(B, T, C)",
            f"h = h + self.{out}(y)"]
    return Block(f"attention_{kind}", tuple(init), tuple(fwd))


def cls_token(rng: random.Random, c: Ctx) -> Block:
    t = c.name("cls")
    return Block("cls_token", (f"self.{t} = {_param(f'1, 1, {c.dim}')}",),
                 (f"h = torch.cat([self.{t}.expand(h.shape[0], 1, -1), h], 1)",))


def drop_first(rng: random.Random, c: Ctx) -> Block:
    return Block("drop_first", (), (rng.choice(["h = h[:, 1:]", "h = h[:, :-1]",
                                                "h = h.narrow(1, 1, h.shape[1] - 1)"]),))


def shift(rng: random.Random, c: Ctx) -> Block:
    return Block("shift", (), (rng.choice([
        "h = h + 0.5 * torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], 1)",
        "h = h + 0.5 * F.pad(h, (0, 0, 1, 0))[:, : h.shape[1]]",
        "h = h + 0.5 * torch.roll(h, 1, 1)",
        "h = h + 0.5 * h.flip(1)",
    ]),))


def causal_mean(rng: random.Random, c: Ctx) -> Block:
    return Block("causal_mean", (), (
        "h = h + h.cumsum(1) / torch.arange(1, h.shape[1] + 1, device=h.device, "
        "dtype=h.dtype).view(1, -1, 1)",))


def conv(rng: random.Random, c: Ctx) -> Block:
    cv = c.name("conv")
    k = rng.choice([2, 3])
    if rng.random() < 0.5 or k == 2:  # causal: left padding keeps T
        return Block("conv_causal", (f"self.{cv} = nn.Conv1d({c.dim}, {c.dim}, {k})",),
                     (f"h = h + self.{cv}(F.pad(h.transpose(1, 2), ({k - 1}, 0))).transpose(1, 2)",))
    return Block("conv_same", (f"self.{cv} = nn.Conv1d({c.dim}, {c.dim}, {k}, padding={k // 2})",),
                 (f"h = h + self.{cv}(h.transpose(1, 2)).transpose(1, 2)",))


def pad(rng: random.Random, c: Ctx) -> Block:
    a, b = rng.randint(0, 2), rng.randint(1, 2)
    return Block("pad", (), (f"h = F.pad(h, (0, 0, {a}, {b}))",))


def pool(rng: random.Random, c: Ctx) -> Block:
    return Block("pool", (), (rng.choice([
        "h = h + h.mean(1, keepdim=True)",
        "h = h - h.amax(1, keepdim=True)",
        "h = h + h.sum(1, keepdim=True) / h.shape[1]",
    ]),))


def gather(rng: random.Random, c: Ctx) -> Block:
    return Block("gather", (), (rng.choice([
        "h = h + h[:, (torch.arange(h.shape[1], device=h.device) * 2) % h.shape[1]]",
        "h = h.index_select(1, torch.arange(h.shape[1] - 1, -1, -1, device=h.device))",
        "h = torch.gather(h, 1, (torch.arange(h.shape[1], device=h.device) // 2)"
        ".view(1, -1, 1).expand(h.shape[0], -1, h.shape[2]))",
    ]),))


def scatter(rng: random.Random, c: Ctx) -> Block:
    return Block("scatter", (), tuple(rng.choice([
        "z = h.new_zeros(h.shape[0], (h.shape[1] + 1) // 2, h.shape[2])"
        ".index_add(1, torch.arange(h.shape[1], device=h.device) // 2, h)\n"
        "h = h + z.repeat_interleave(2, 1)[:, : h.shape[1]]",
        "z = torch.zeros_like(h)\nz[:, 1:] = h[:, :-1]\nh = h + z",
        "z = h.new_zeros(h.shape[0], h.shape[1] + 2, h.shape[2])\nz[:, 1:-1] = h\nh = z[:, 2:] - z[:, :-2]",
    ]).splitlines()))


def aux_output(rng: random.Random, c: Ctx) -> Block:
    return Block("aux_output", (), (rng.choice([
        "aux.append(h.abs().mean(-1, keepdim=True).expand(-1, -1, 3))",
        "aux.append(h[:, :1].expand(-1, h.shape[1], -1))",
        "aux.append(h.sum(-1))",
    ]),))


#: (weight, production) of the blocks after the input stage
BLOCKS: list[tuple[float, Production]] = [
    (10, pos_slice), (3, pos_gate), (4, pos_embedding), (6, linear), (6, mlp), (6, norm),
    (3, activation), (10, attention), (3, cls_token), (3, drop_first), (4, shift),
    (3, causal_mean), (4, conv), (2, pad), (3, pool), (4, gather), (4, scatter), (3, aux_output),
]


def eager_trains(program: TrainProgram) -> bool:
    """Whether eager runs the forward and backward at every length, with finite values."""
    model, make_inputs = program.build()
    for k, (batch, length) in enumerate(zip(program.batches(), program.lengths)):
        (x, y), _ = make_inputs(batch, length, program.seed + k)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = model(x, y)
                diff = [t for t in out if isinstance(t, torch.Tensor) and t.requires_grad]
                if not diff or not all(bool(t.detach().isfinite().all()) for t in out):
                    return False
                if any(t.numel() > 20000 for t in out):
                    return False
                sum(t.double().sum() for t in diff).backward()  # type: ignore[union-attr]
        except Exception:
            return False
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if not all(bool(g.isfinite().all()) for g in grads):
            return False
        model.zero_grad(set_to_none=True)
    return True


def generate_train(seed: int, *, min_blocks: int = 2, max_blocks: int = 8) -> TrainProgram:
    """A random training program that eager trains at its three lengths."""
    rng = random.Random(seed * 7 + 3)
    dim = rng.choice([4, 8, 8, 12, 16])
    first = rng.randint(3, 8)
    a, b = rng.randint(1, 5), rng.randint(1, 6)
    lengths = (first, first + a, first + a + b)
    inputs = rng.choices(["ids", "float"], weights=[65, 35])[0]
    head = rng.choice(["lm", "pool", "hidden"])
    c = Ctx(dim, max(lengths) + 8, rng.choice([11, 32, 50]))
    blocks: list[Block] = [embed(rng, c)] if inputs == "ids" else []
    program = TrainProgram(seed, rng.choice([1, 2, 2, 3]), lengths, dim, c.vocab, inputs, head,
                           tuple(blocks), grow_batch=rng.random() < 0.2)
    if head == "lm" and not eager_trains(program):
        program = replace(program, head="hidden")
    target = rng.randint(min_blocks, max_blocks)
    prods = [p for _, p in BLOCKS]
    weights = [w for w, _ in BLOCKS]
    for _ in range(target * 4):
        if len(program.blocks) - (inputs == "ids") >= target:
            break
        block = rng.choices(prods, weights=weights)[0](rng, c)
        candidate = replace(program, blocks=(*program.blocks, block))
        if eager_trains(candidate):
            program = candidate
    return program


__all__ = ["BLOCKS", "Block", "TrainProgram", "eager_trains", "generate_train"]
