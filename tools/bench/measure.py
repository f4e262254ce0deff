"""Measurements inside one cell: timing, accuracy against eager, saved activations."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class TimingOptions:
    """How hard to time: warm-up calls, timed blocks, and the least time per block."""

    warmup: int = 3
    repeats: int = 15
    min_block_s: float = 0.05
    max_block_calls: int = 10_000


@dataclass(frozen=True)
class Timing:
    """Seconds per call over ``repeats`` blocks of ``calls_per_block`` calls."""

    median_s: float
    q1_s: float
    q3_s: float
    min_s: float
    calls_per_block: int
    repeats: int

    def as_dict(self) -> dict[str, float | int]:
        return {
            "median_s": self.median_s,
            "q1_s": self.q1_s,
            "q3_s": self.q3_s,
            "min_s": self.min_s,
            "calls_per_block": self.calls_per_block,
            "repeats": self.repeats,
        }


def synchronizer(device: str) -> Callable[[], None]:
    """What to call before reading the clock: waits for queued GPU work on CUDA."""
    if device.startswith("cuda"):
        return torch.cuda.synchronize
    return lambda: None


def time_calls(
    calls: dict[str, Callable[[int], Any]], sync: Callable[[], None], opts: TimingOptions
) -> dict[str, Timing]:
    """Median and quartiles of the per-call time of each ``call(i)`` (i counts calls).

    Calls are grouped into blocks long enough (``min_block_s``) that clock and
    synchronization overhead vanish, so a 4-element add is measured as well as
    a training step; the GPU is synchronized at each block's edges. With
    several calls (compiled and eager), their blocks alternate, so a machine
    whose load changes during the run slows both alike and their ratio holds.
    """
    sizes: dict[str, int] = {}
    counter = 0
    for name, call in calls.items():
        fastest = float("inf")
        for _ in range(max(1, opts.warmup)):
            t0 = time.perf_counter()
            call(counter)
            sync()
            fastest = min(fastest, time.perf_counter() - t0)
            counter += 1
        # Block size from the fastest warm-up call (one noisy call cannot shrink it).
        sizes[name] = max(1, min(opts.max_block_calls, math.ceil(opts.min_block_s / max(fastest, 1e-7))))
    per_call: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(opts.repeats):
        for name, call in calls.items():
            n = sizes[name]
            sync()
            t0 = time.perf_counter()
            for _ in range(n):
                call(counter)
                counter += 1
            sync()
            per_call[name].append((time.perf_counter() - t0) / n)
    out = {}
    for name, samples in per_call.items():
        q = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) >= 2 else [samples[0]] * 3
        out[name] = Timing(statistics.median(samples), q[0], q[2], min(samples), sizes[name], opts.repeats)
    return out


@dataclass(frozen=True)
class Accuracy:
    """How far a compiled result is from eager; ``ok`` False means WRONG."""

    ok: bool
    max_abs_err: float
    reason: str = ""


def compare(ref: list[torch.Tensor], got: list[torch.Tensor], rtol: float, atol: float) -> Accuracy:
    """Elementwise ``|got - ref| <= atol * scale + rtol * |ref|`` for every tensor.

    ``scale`` is the largest magnitude in that reference tensor (at least 1), so
    one tolerance serves a loss of 1e-3 and gradients of 1e2 alike. Shapes,
    dtypes and NaN/inf positions must match exactly.
    """
    if len(ref) != len(got):
        return Accuracy(False, float("inf"), f"{len(got)} tensors, eager gave {len(ref)}")
    worst = 0.0
    for i, (r, g) in enumerate(zip(ref, got)):
        if not isinstance(g, torch.Tensor):
            return Accuracy(False, float("inf"), f"output {i} is {type(g).__name__}, not a tensor")
        if r.shape != g.shape:
            return Accuracy(False, float("inf"), f"output {i} shape {tuple(g.shape)}, eager {tuple(r.shape)}")
        if r.dtype != g.dtype:
            return Accuracy(False, float("inf"), f"output {i} dtype {g.dtype}, eager {r.dtype}")
        if r.numel() == 0:
            continue
        rf, gf = r.detach().double().cpu(), g.detach().double().cpu()
        if not torch.equal(torch.isfinite(rf), torch.isfinite(gf)) or not torch.equal(
            rf[~torch.isfinite(rf)].nan_to_num(), gf[~torch.isfinite(gf)].nan_to_num()
        ):
            return Accuracy(False, float("inf"), f"output {i}: NaN/inf where eager has none (or v.v.)")
        fin = torch.isfinite(rf)
        diff = (rf[fin] - gf[fin]).abs()
        if diff.numel() == 0:
            continue
        err = float(diff.max())
        worst = max(worst, err)
        scale = max(1.0, float(rf[fin].abs().max()))
        bound = atol * scale + rtol * rf[fin].abs()
        if bool((diff > bound).any()):
            return Accuracy(False, worst, f"output {i}: max abs error {err:.3g} over tolerance")
    return Accuracy(True, worst)


def saved_bytes(run: Callable[[], Any], exclude: Iterable[torch.Tensor]) -> int:
    """Bytes of distinct storages autograd saves for backward while ``run()`` runs.

    Parameters (``exclude``) are left out: every compiler saves the same
    weights; what differs is which activations it keeps.
    """
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        try:
            storage = t.untyped_storage()
        except Exception:  # tensor subclasses without storage: count their nominal size
            seen[id(t)] = t.numel() * t.element_size()
            return t
        ptr = storage.data_ptr()
        if ptr not in skip:
            seen[ptr] = max(seen.get(ptr, 0), storage.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return sum(seen.values())


def peak_bytes(run: Callable[[], Any], device: str, sync: Callable[[], None]) -> int:
    """Peak bytes allocated while ``run()`` runs, above what was allocated before it.

    CUDA: ``torch.cuda.max_memory_allocated()`` after a reset of the peak, minus
    ``memory_allocated()`` at the start. CPU: torch's profiler memory events (every
    allocation and free of torch's CPU allocator, in order, with ``profile_memory``):
    the highest running sum. Both count tensors only (what ATen, an inductor's
    wrapper or autograd allocate), not the process's other memory (compiled code,
    Python objects, a kernel's own scratch arrays); tensors alive before the call
    (weights, inputs) are the baseline, not counted.
    """
    if device.startswith("cuda"):
        sync()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run()
        sync()
        return int(torch.cuda.max_memory_allocated() - base)
    from ember.inductor.testing import peak_cpu_bytes

    return peak_cpu_bytes(run)
