"""Triton reductions: how each reduction type folds a ``[XBLOCK, RBLOCK]`` block of values.

Persistent kernels (``reduce_block``) reduce the whole inner range at once;
looped kernels (``reduce_loop``) keep accumulators across ``RBLOCK`` chunks and
reduce them after the loop. Masked lanes (past the end of a range) contribute
the reduction's identity. The semantics are eager's:

- ``max``/``min`` propagate NaN (a NaN flag per row, as in the C++ backend: the
  hardware max ignores NaN where numpy's propagates, so neither is relied on);
- ``argmax``/``argmin`` return the first index of the extreme value, and the
  first NaN if there is one;
- ``welford_m2`` (variance's sum of squared deviations) is two-pass over
  registers in a persistent kernel and Welford's online update per lane in a
  looped one, the lanes combined at the end with Chan's formula, so the input is
  read once either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..ir import Reduction
from ..kernel_plan import SchedNode
from .common import reduction_identity
from .triton_ops import TritonKernel, TVar, literal, register_dtype, scalar_literal

_MUL_HELPER = """def _ember_mul(a, b):
    return a * b"""


@dataclass
class ReductionCode:
    """Lines around the loop (accumulator set-up, final reduce) and the result ``[XBLOCK, 1]``."""

    result: TVar
    before: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)


def _data(n: SchedNode) -> Reduction:
    data = n.buffer.data
    assert isinstance(data, Reduction)
    return data


def _identity(rtype: str, dtype: torch.dtype, make: Callable[[Any, torch.dtype], str] = literal) -> str:
    """Reduction ``rtype``'s identity (``common.reduction_identity``) as a literal."""
    return make(reduction_identity(rtype, dtype), dtype)


def reduce_trivial(k: TritonKernel, n: SchedNode, value: TVar) -> TVar:
    """A reduction over no elements besides this one (size-1 reduced dims)."""
    data = _data(n)
    if data.reduction_type in ("argmax", "argmin"):
        return k.emit("tl.zeros_like(xindex).to(tl.int64)", torch.int64)
    if data.reduction_type == "welford_m2":
        return k.emit(f"tl.zeros_like({value})", data.dtype)
    return value


def _block_reduce(k: TritonKernel, fn: str, value: str, dtype: torch.dtype) -> TVar:
    return k.emit(f"{fn}({value}, 1)[:, None]", dtype)


def reduce_block(k: TritonKernel, n: SchedNode, value: TVar, rindex: str, rnumel: str) -> ReductionCode:
    """The whole inner range in one block (persistent kernels)."""
    data = _data(n)
    rtype, dtype = data.reduction_type, data.dtype
    m = k.lane_mask
    if rtype in ("argmax", "argmin"):
        return ReductionCode(_arg_block(k, rtype, data.src_dtype, value, m, rindex, rnumel)[1])
    if rtype == "welford_m2":
        total = _block_reduce(k, "tl.sum", f"tl.where({m}, {value}, 0.0)", dtype)
        mean = k.emit(f"{total} / {rnumel}", dtype)
        dev = k.emit(f"tl.where({m}, {value} - {mean}, 0.0)", dtype)
        return ReductionCode(_block_reduce(k, "tl.sum", f"{dev} * {dev}", dtype))
    masked = f"tl.where({m}, {value}, {_identity(rtype, dtype)})"
    if rtype == "sum":
        return ReductionCode(_block_reduce(k, "tl.sum", masked, dtype))
    if rtype == "prod":
        k.helpers["_ember_mul"] = _MUL_HELPER
        return ReductionCode(k.emit(f"tl.reduce({masked}, 1, _ember_mul)[:, None]", dtype))
    if rtype in ("any", "all"):
        fn = "tl.max" if rtype == "any" else "tl.min"
        red = _block_reduce(k, fn, f"{masked}.to(tl.int8)", torch.int8)
        return ReductionCode(k.emit(f"({red} > 0)", torch.bool))
    fn = "tl.max" if rtype == "max" else "tl.min"
    result = _block_reduce(k, fn, masked, dtype)
    if not dtype.is_floating_point:
        return ReductionCode(result)
    has_nan = _block_reduce(k, "tl.max", f"(({value} != {value}) & {m}).to(tl.int8)", torch.int8)
    return ReductionCode(k.emit(f'tl.where({has_nan} > 0, float("nan"), {result})', dtype))


def _arg_block(
    k: TritonKernel, rtype: str, src: torch.dtype, value: TVar, m: str, rindex: str, rnumel: str
) -> tuple[TVar, TVar, TVar | None]:
    """(extreme value, its first index, row has a NaN) of one block, each ``[XBLOCK, 1]``."""
    ident = _identity(rtype, src)
    fn = "tl.max" if rtype == "argmax" else "tl.min"
    vm = k.emit(f"tl.where({m}, {value}, {ident})", src)
    nan: TVar | None = None
    if src.is_floating_point:
        isnan = k.emit(f"({vm} != {vm})", torch.bool)
        nan = k.emit(f"{_block_reduce(k, 'tl.max', f'{isnan}.to(tl.int8)', torch.int8)} > 0", torch.bool)
        clean = k.emit(f"tl.where({isnan}, {ident}, {vm})", src)
        best = _block_reduce(k, fn, str(clean), src)
        cand = k.emit(f"tl.where({nan}, {isnan}, ({clean} == {best}) & {m})", torch.bool)
    else:
        best = _block_reduce(k, fn, str(vm), src)
        cand = k.emit(f"({vm} == {best}) & {m}", torch.bool)
    lanes = f"{rindex}.to(tl.int64)"
    idx = _block_reduce(k, "tl.min", f"tl.where({cand}, {lanes}, {rnumel})", torch.int64)
    return best, k.emit(f"{idx}.to(tl.int64)", torch.int64), nan


def reduce_loop(k: TritonKernel, n: SchedNode, value: TVar, rindex: str, rnumel: str) -> ReductionCode:
    """Accumulate chunk by chunk (looped kernels); the in-loop lines go to ``k``'s scope."""
    data = _data(n)
    rtype, dtype = data.reduction_type, data.dtype
    m = k.lane_mask
    acc = k.new_var()
    full = "[XBLOCK, RBLOCK]"
    if rtype in ("argmax", "argmin"):
        return _arg_loop(k, rtype, data.src_dtype, value, m, rindex, rnumel, acc)
    if rtype == "welford_m2":
        return _welford_loop(k, value, m, acc, dtype)
    reg = register_dtype(dtype)
    masked = f"tl.where({m}, {value}, {_identity(rtype, dtype)})"
    init = _identity(rtype, dtype, scalar_literal)
    if rtype in ("any", "all"):
        reg = "tl.int8"
        init = "0" if rtype == "any" else "1"
        masked = f"{masked}.to(tl.int8)"
    before = [f"{acc} = tl.full({full}, {init}, {reg})"]
    result = TVar(k.new_var(), dtype)
    if rtype in ("sum", "prod"):
        op = "+" if rtype == "sum" else "*"
        k.line(f"{acc} = {acc} {op} {masked}")
        if rtype == "sum":
            after = [f"{result} = tl.sum({acc}, 1)[:, None]"]
        else:
            k.helpers["_ember_mul"] = _MUL_HELPER
            after = [f"{result} = tl.reduce({acc}, 1, _ember_mul)[:, None]"]
        return ReductionCode(result, before, after)
    if rtype in ("any", "all"):
        fn = "maximum" if rtype == "any" else "minimum"
        k.line(f"{acc} = tl.{fn}({acc}, {masked})")
        red = "tl.max" if rtype == "any" else "tl.min"
        return ReductionCode(result, before, [f"{result} = {red}({acc}, 1)[:, None] > 0"])
    # max / min: NaN lanes are remembered in a flag, the accumulator skips them
    cmp = ">" if rtype == "max" else "<"
    red = "tl.max" if rtype == "max" else "tl.min"
    vm = k.emit(masked, dtype)
    k.line(f"{acc} = tl.where({vm} {cmp} {acc}, {vm}, {acc})")
    after = [f"{result} = {red}({acc}, 1)[:, None]"]
    if dtype.is_floating_point:
        flag = k.new_var()
        before.append(f"{flag} = tl.zeros({full}, tl.int8)")
        k.line(f"{flag} = tl.maximum({flag}, (({value} != {value}) & {m}).to(tl.int8))")
        after.append(f'{result} = tl.where(tl.max({flag}, 1)[:, None] > 0, float("nan"), {result})')
    return ReductionCode(result, before, after)


def _arg_loop(
    k: TritonKernel,
    rtype: str,
    src: torch.dtype,
    value: TVar,
    m: str,
    rindex: str,
    rnumel: str,
    acc: str,
) -> ReductionCode:
    """Running (best value, its index, NaN seen) per row; a chunk replaces them only when it
    is strictly better, so the first occurrence wins."""
    best_v, best_i, seen_nan = f"{acc}_v", f"{acc}_i", f"{acc}_nan"
    before = [
        f"{best_v} = tl.full([XBLOCK, 1], {_identity(rtype, src, scalar_literal)}, {register_dtype(src)})",
        f"{best_i} = tl.zeros([XBLOCK, 1], tl.int64)",
        f"{seen_nan} = tl.zeros([XBLOCK, 1], tl.int1)",
    ]
    v, i, nan = _arg_block(k, rtype, src, value, m, rindex, rnumel)
    cmp = ">" if rtype == "argmax" else "<"
    if nan is not None:
        take = f"(~{seen_nan}) & ({nan} | ({v} {cmp} {best_v}))"
    else:
        take = f"({v} {cmp} {best_v})"
    k.line(f"{acc}_take = {take}")
    k.line(f"{best_v} = tl.where({acc}_take, {v}, {best_v})")
    k.line(f"{best_i} = tl.where({acc}_take, {i}, {best_i})")
    if nan is not None:
        k.line(f"{seen_nan} = {seen_nan} | {nan}")
    return ReductionCode(TVar(best_i, torch.int64), before, [])


def _welford_loop(k: TritonKernel, value: TVar, m: str, acc: str, dtype: torch.dtype) -> ReductionCode:
    """Welford per lane over the chunks, then the lanes combined (Chan et al.)."""
    mean, m2, count = f"{acc}_mean", f"{acc}_m2", f"{acc}_n"
    reg = register_dtype(dtype)
    before = [f"{x} = tl.zeros([XBLOCK, RBLOCK], {reg})" for x in (mean, m2, count)]
    k.line(f"{acc}_n1 = {count} + tl.where({m}, 1.0, 0.0)")
    k.line(f"{acc}_d = tl.where({m}, {value} - {mean}, 0.0)")
    k.line(f"{mean} = {mean} + {acc}_d / tl.maximum({acc}_n1, 1.0)")
    k.line(f"{m2} = {m2} + {acc}_d * tl.where({m}, {value} - {mean}, 0.0)")
    k.line(f"{count} = {acc}_n1")
    result = TVar(k.new_var(), dtype)
    total = f"{acc}_total"
    after = [
        f"{total} = tl.sum({count}, 1)[:, None]",
        f"{acc}_mu = tl.sum({count} * {mean}, 1)[:, None] / {total}",
        f"{acc}_dm = {mean} - {acc}_mu",
        f"{result} = tl.sum({m2} + {count} * {acc}_dm * {acc}_dm, 1)[:, None]",
    ]
    return ReductionCode(result, before, after)
