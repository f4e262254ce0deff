"""Comparing one compiled value with eager's, re-judging float mismatches in float64.

A float mismatch beyond ``torch.testing``'s tolerances is not yet a wrong
result: both eager and the compiled code round differently from exact math.
The value is recomputed eagerly from float64 inputs, and the compiled value
fails only if it is clearly further from that reference than eager is (the
rule torch's own accuracy checker uses: RMSE below twice eager's plus a small
floor). An output whose eager float32 value is itself far from the float64
reference (a comparison or rounding that flips on the last bit) is judged
unstable and not compared.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

RTOL = {torch.float32: 1.3e-6, torch.float64: 1e-7}
ATOL = {torch.float32: 1e-5, torch.float64: 1e-7}


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    detail: str = ""
    needs_reference: bool = False


def storage_view(t: torch.Tensor) -> torch.Tensor:
    """All of ``t``'s storage as a 1-D tensor of its dtype (what any alias can observe)."""
    flat = torch.empty(0, dtype=t.dtype, device=t.device)
    with torch.no_grad():
        flat.set_(t.untyped_storage())
    return flat.detach()


def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.numel() == 0 or b.numel() == 0:
        return False
    return bool(a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())


def significant_strides(t: torch.Tensor) -> tuple[int | None, ...]:
    """Strides of dims with size > 1 (the others are not observable)."""
    if t.numel() <= 1:
        return tuple(None for _ in t.shape)
    return tuple(int(st) if sz > 1 else None for sz, st in zip(t.shape, t.stride()))


def _rms(t: torch.Tensor) -> float:
    if t.numel() == 0:
        return 0.0
    return float(t.double().pow(2).mean().sqrt())


def compare_values(expected: torch.Tensor, got: torch.Tensor,
                   reference: torch.Tensor | None = None) -> Verdict:
    """Does ``got`` (compiled) match ``expected`` (eager)? ``reference``: float64 eager."""
    e, c = expected.detach(), got.detach()
    if e.shape != c.shape:
        return Verdict(False, f"shape {tuple(c.shape)}, eager {tuple(e.shape)}")
    if e.numel() == 0:
        return Verdict(True)
    if not e.is_floating_point() and not e.is_complex():
        if torch.equal(e, c):
            return Verdict(True)
        if reference is None:
            return Verdict(False, "values differ", needs_reference=True)
        ref = reference.detach().to(e.dtype) if reference.dtype != e.dtype else reference.detach()
        if not torch.equal(ref, e):
            return Verdict(True, "unstable: eager differs from its float64 run")
        bad = int((e != c).sum())
        return Verdict(False, f"{bad} of {e.numel()} elements differ (exact dtype {e.dtype})")
    rtol, atol = RTOL.get(e.dtype, 1e-3), ATOL.get(e.dtype, 1e-3)
    if torch.allclose(c, e, rtol=rtol, atol=atol, equal_nan=True):
        return Verdict(True)
    e64, c64 = e.double(), c.double()
    diff = float((e64 - c64).abs().nan_to_num(nan=float("inf")).max())
    if reference is None:
        return Verdict(False, f"max abs diff {diff:.3g}", needs_reference=True)
    r64 = reference.detach().double()
    e_fin, c_fin, r_fin = e64.isfinite(), c64.isfinite(), r64.isfinite()
    # non-finite values must match eager's or the reference's exactly
    special_ok = ((e_fin & c_fin) | (e64 == c64) | (e64.isnan() & c64.isnan())
                  | (r64 == c64) | (r64.isnan() & c64.isnan()))
    if not bool(special_ok.all()):
        n = int((~special_ok).sum())
        return Verdict(False, f"{n} non-finite element(s) differ (max abs diff {diff:.3g})")
    mask = e_fin & c_fin & r_fin
    err_e = _rms((e64 - r64)[mask])
    err_c = _rms((c64 - r64)[mask])
    scale = _rms(r64[mask])
    if err_e > 1e-3 * (1.0 + scale):
        return Verdict(True, "unstable: eager float32 is far from its float64 run")
    if err_c <= 2.0 * err_e + 1e-5 * (1.0 + scale):
        return Verdict(True)
    return Verdict(False, f"max abs diff {diff:.3g}; RMSE vs float64 {err_c:.3g}, "
                          f"eager's {err_e:.3g}")
