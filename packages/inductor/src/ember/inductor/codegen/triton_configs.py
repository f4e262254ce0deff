"""Launch configurations of Triton kernels: the candidates per kernel, and the grid.

A small space per kernel kind, pruned by the kernel's sizes (no block larger
than the next power of two of its range); ``mode="max-autotune"`` widens it.
Under Triton's interpreter (CPU tensors) every block is a numpy array, so large
blocks are fastest and the default space is one configuration; max-autotune
still offers a few, which is how the tuner itself is tested without a GPU.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

#: Largest inner range a reduction keeps in one block (no loop over chunks).
PERSISTENT_RNUMEL = 1024


@dataclass(frozen=True)
class Config:
    """Block sizes (``XBLOCK``, ``YBLOCK``, ``RBLOCK``), warps and pipeline stages."""

    blocks: tuple[tuple[str, int], ...]
    num_warps: int = 4
    num_stages: int = 1

    def kwargs(self) -> dict[str, int]:
        return {**dict(self.blocks), "num_warps": self.num_warps, "num_stages": self.num_stages}

    def block(self, name: str) -> int:
        return dict(self.blocks)[name]

    def __str__(self) -> str:
        blocks = " ".join(f"{k}={v}" for k, v in self.blocks)
        return f"{blocks} num_warps={self.num_warps} num_stages={self.num_stages}"

    def to_json(self) -> str:
        return json.dumps({"blocks": dict(self.blocks), "w": self.num_warps, "s": self.num_stages})

    @staticmethod
    def from_json(text: str) -> Config:
        d = json.loads(text)
        blocks = tuple((str(k), int(v)) for k, v in d["blocks"].items())
        return Config(blocks, int(d["w"]), int(d["s"]))


def _pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def grid(kind: str, numels: Sequence[int], config: Config) -> tuple[int]:
    """Programs to launch (one grid dimension: CUDA allows 2**31 - 1 there)."""
    if kind == "tiled":
        ynumel, xnumel = numels[0], numels[1]
        x = -(-xnumel // config.block("XBLOCK"))
        y = -(-ynumel // config.block("YBLOCK"))
        return (x * y,)
    return (-(-numels[0] // config.block("XBLOCK")),)


def _dedup(configs: list[Config]) -> list[Config]:
    out: list[Config] = []
    for c in configs:
        if c not in out:
            out.append(c)
    return out


def candidate_configs(meta: Mapping[str, Any], device: torch.device, *, max_autotune: bool) -> list[Config]:
    """The configurations tried for a kernel with this launch data, best guess first."""
    kind, numels = meta["kind"], meta["numels"]
    gpu = device.type != "cpu"
    if kind == "pointwise":
        x = _pow2(numels[0])
        if not gpu:
            sizes = [(min(x, 4096), 4)] + ([(min(x, 256), 4), (min(x, 1024), 4)] if max_autotune else [])
        else:
            sizes = [(1024, 4), (512, 4), (256, 2)]
            if max_autotune:
                sizes += [(2048, 8), (128, 4), (64, 2)]
        return _dedup([Config((("XBLOCK", min(b, max(x, 16))),), w) for b, w in sizes])
    if kind == "tiled":
        y, x = _pow2(numels[0]), _pow2(numels[1])
        if not gpu:
            tiles = [(64, 64, 4)] + ([(16, 16, 4), (32, 64, 4)] if max_autotune else [])
        else:
            tiles = [(32, 32, 4), (64, 16, 4), (16, 64, 4)]
            if max_autotune:
                tiles += [(64, 64, 8), (8, 128, 4), (128, 8, 4)]
        return _dedup(
            [Config((("YBLOCK", min(ty, y)), ("XBLOCK", min(tx, x))), w) for ty, tx, w in tiles]
        )
    x = _pow2(numels[0])
    r = _pow2(max(numels[1:], default=1))
    if meta["persistent"]:
        rblock = meta["rblock"]
        budget = 4096 if gpu else 8192
        xs = [1, 8, 32] if gpu else [budget // rblock]
        if max_autotune:
            xs += [2, 4, 16, 64] if gpu else [1, 4]
        out = []
        for xb in xs:
            xb = max(1, min(xb, x, max(1, budget // rblock)))
            warps = 8 if xb * rblock >= 4096 else (4 if xb * rblock >= 512 else 2)
            out.append(Config((("XBLOCK", xb), ("RBLOCK", rblock)), warps))
        return _dedup(out)
    pairs = [(1, 2048, 8), (8, 512, 4), (64, 64, 4)] if gpu else [(8, 1024, 4)]
    if max_autotune:
        pairs += [(2, 1024, 8), (16, 256, 4), (32, 128, 4)] if gpu else [(1, 512, 4), (4, 256, 4)]
    return _dedup(
        [Config((("XBLOCK", min(xb, x)), ("RBLOCK", min(rb, r))), w) for xb, rb, w in pairs]
    )
