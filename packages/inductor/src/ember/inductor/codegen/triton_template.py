"""max-autotune's matmuls: ATen's mm/addmm or a Triton template, whichever is faster.

Under ``mode="max-autotune"`` the Triton backend's wrapper calls ``_ember_mm`` /
``_ember_addmm`` (a ``MatmulChoice``) where it would call ``aten.mm`` /
``aten.addmm``. On the first call for a (shapes, strides, dtype, device) it
benchmarks ATen against the template (``triton_mm.py``) in a few tile
configurations on the real arguments, prints one progress line, keeps the
fastest, and writes the choice under ``<cache_dir>/triton_tune/`` so a warm
start does not tune again. Calls the template cannot serve (not 2-D, mixed or
unsupported dtypes, ``addmm`` with ``beta``/``alpha`` other than 1, empty
sizes) go to ATen unchanged.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from ember.ir.cache_entry import entry_path, load_entry, store_entry

from ..logs import log
from .triton_configs import Config
from .triton_runtime import benchmark, device_arch, interpreted, interpreted_range, triton_version

aten = torch.ops.aten

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: the choice that means "call ATen"
ATEN = "aten"


def _configs(m: int, n: int, k: int, device: torch.device) -> list[Config]:
    """Tile configurations (``BLOCK_M``, ``BLOCK_N``, ``BLOCK_K``, ``GROUP_M``) worth trying."""
    if device.type == "cpu":  # Triton's interpreter: one configuration, to run the template
        tiles = [(32, 32, 32, 4, 1)]
    else:
        tiles = [
            (128, 128, 32, 8, 3),
            (128, 64, 32, 4, 4),
            (64, 128, 32, 4, 4),
            (64, 64, 32, 4, 3),
            (32, 32, 32, 2, 2),
        ]
    out: list[Config] = []
    for bm, bn, bk, warps, stages in tiles:
        if out and (bm > max(16, 2 * m) or bn > max(16, 2 * n) or bk > max(16, 2 * k)):
            continue
        blocks = (("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk), ("GROUP_M", 8))
        out.append(Config(blocks, warps, stages))
    return out


def _precision(dtype: torch.dtype, device: torch.device) -> str:
    if dtype == torch.float32 and device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return "ieee"


def template_mm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, config: Config) -> torch.Tensor:
    """``a @ b (+ bias)`` by the Triton template with this tile configuration."""
    from . import triton_mm
    from .triton_mm import mm_kernel

    if interpreted(a.device):  # the K loop's ``range`` of a scalar argument (triton_runtime)
        triton_mm.range = interpreted_range  # type: ignore[attr-defined]
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if bias is not None:
        bias = bias.expand(m, n)
        sbm, sbn = bias.stride()
    else:
        sbm = sbn = 0
    blocks = dict(config.blocks)
    grid = (-(-m // blocks["BLOCK_M"]) * -(-n // blocks["BLOCK_N"]),)
    mm_kernel[grid](
        a, b, c, bias if bias is not None else c,
        m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), sbm, sbn,
        HAS_BIAS=bias is not None,
        PRECISION=_precision(a.dtype, a.device),
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        **blocks,
    )  # fmt: skip
    return c


class MatmulChoice:
    """``mm(a, b)`` or ``addmm(bias, a, b, beta=1, alpha=1)``, by ATen or the template."""

    def __init__(self, kind: str, cache_dir: str) -> None:
        self.kind = kind
        self.cache_dir = cache_dir
        self.aten: Callable[..., torch.Tensor] = aten.mm.default if kind == "mm" else aten.addmm.default
        self.choices: dict[tuple[Any, ...], Config | str] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        operands = self._operands(args, kwargs)
        if operands is None:
            return self.aten(*args, **kwargs)
        a, b, bias = operands
        key = (a.shape, a.stride(), b.shape, b.stride(), a.dtype, a.device,
               None if bias is None else (bias.shape, bias.stride()))  # fmt: skip
        choice = self.choices.get(key)
        if choice is None:
            choice = self.choices[key] = self._choose(a, b, bias, args, kwargs)
        if isinstance(choice, str):
            return self.aten(*args, **kwargs)
        return template_mm(a, b, bias, choice)

    def _operands(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None:
        if self.kind == "mm":
            if kwargs or len(args) != 2:
                return None
            a, b = args
            bias = None
        else:
            if len(args) != 3 or kwargs.get("beta", 1) != 1 or kwargs.get("alpha", 1) != 1:
                return None
            bias, a, b = args
            if bias.dtype != a.dtype or bias.device != a.device:
                return None
        ok = (
            a.dim() == 2
            and b.dim() == 2
            and a.dtype == b.dtype
            and a.dtype in _DTYPES
            and a.device == b.device
            and min(a.shape[0], a.shape[1], b.shape[1]) > 0
        )
        return (a, b, bias) if ok else None

    def _path(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> Any:
        text = json.dumps(
            [self.kind, list(a.shape), list(a.stride()), list(b.shape), list(b.stride()), str(a.dtype),
             None if bias is None else [list(bias.shape), list(bias.stride())],
             device_arch(a.device), triton_version()]
        )  # fmt: skip
        return entry_path(self.cache_dir, "triton_tune", hashlib.sha256(text.encode()).hexdigest())

    def _choose(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        bias: torch.Tensor | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Config | str:
        path = self._path(a, b, bias)
        hit = load_entry(path, _load_choice, log)
        if hit is not None:
            return hit
        start = time.perf_counter()
        timings: list[tuple[float, Config | str]] = [
            (benchmark(lambda: self.aten(*args, **kwargs), a.device), ATEN)
        ]
        for config in _configs(a.shape[0], b.shape[1], a.shape[1], a.device):
            try:
                t = benchmark(functools.partial(template_mm, a, b, bias, config), a.device)
            except Exception as e:  # a tile configuration this GPU cannot run
                log.debug("matmul template %s failed: %s: %s", config, type(e).__name__, e)
                continue
            timings.append((t, config))
        best_t, best = min(timings, key=lambda tc: tc[0])
        sys.stderr.write(
            f"[ember.inductor] autotuned {self.kind} {tuple(a.shape)}x{tuple(b.shape)} {a.dtype}: "
            f"ATen vs {len(timings) - 1} template configs in {time.perf_counter() - start:.2f}s, "
            f"best {'ATen' if best == ATEN else f'template {best}'} {best_t * 1e3:.3f} ms\n"
        )
        store_entry(path, _dump_choice(best), _load_choice, log)
        return best


def _dump_choice(choice: Config | str) -> str:
    return json.dumps(ATEN) if isinstance(choice, str) else choice.to_json()


def _load_choice(text: str) -> Config | str:
    if json.loads(text) == ATEN:
        return ATEN
    return Config.from_json(text)
