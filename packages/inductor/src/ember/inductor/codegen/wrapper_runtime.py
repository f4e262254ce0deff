"""What a generated wrapper runs with: its namespace and the helpers it calls.

Split from ``wrapper`` (which writes the wrapper source) so that a graph loaded from
the graph cache imports none of the lowering stack (sympy included): a warm start
needs only these.
"""

from __future__ import annotations

from typing import Any

import torch

from ember.ir.updates import note_inputs_written

from ..errors import InputMismatchError
from .backend import Backend


def _restride(
    t: torch.Tensor | None, size: tuple[int, ...], stride: tuple[int, ...]
) -> torch.Tensor | None:
    # Some kernels return an undefined tensor (None) where their fake kernel returns one
    # (``_native_multi_head_attention``'s weights with need_weights=False): pass it on.
    if t is None or t.stride() == stride or t.numel() <= 1:
        return t
    if all(st == want for sz, st, want in zip(size, t.stride(), stride) if sz != 1):
        return t  # the stride of a size-1 dim is never read (an in-place op's result stays itself)
    if _overlaps(size, stride):
        return _into_overlapping(t, size, stride)
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def _overlaps(size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Whether a layout's elements share memory (a stride-0 dim of an ``expand``)."""
    extent = 0
    for sz, st in sorted(((sz, abs(st)) for sz, st in zip(size, stride) if sz > 1),
                         key=lambda p: p[1]):
        if st <= extent:
            return True
        extent += (sz - 1) * st
    return False


def _into_overlapping(t: torch.Tensor, size: tuple[int, ...],
                      stride: tuple[int, ...]) -> torch.Tensor:
    """``t`` in a layout whose elements share memory, where a graph was compiled for one (a
    saved ``expand`` a forward returned dense at a new size): ``copy_`` refuses to write such
    a tensor, so each element is scattered to the memory it addresses. The elements sharing
    a location hold one value (the layout says the value is an expand), so which of them
    lands last does not matter."""
    n = 1 + sum((sz - 1) * st for sz, st in zip(size, stride))
    flat = torch.empty(n, dtype=t.dtype, device=t.device)
    where = torch.arange(n, device=t.device).as_strided(size, stride)
    flat.index_put_((where.reshape(-1),), t.detach().reshape(-1))
    return flat.as_strided(size, stride)


def _view(
    t: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...], offset: int
) -> torch.Tensor:
    return torch.as_strided(t, size, stride, t.storage_offset() + offset)


def _const_view(
    cache: dict[int, tuple[torch.Tensor, int, torch.Tensor]],
    key: int,
    t: torch.Tensor,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    offset: int,
) -> torch.Tensor:
    """``_view`` of a graph constant (a weight), made once and reused while the constant
    keeps its storage (``param.data = ...`` gives it another: the view is made again).
    Where autograd would record the view (grad mode, a weight that requires grad) it is
    made afresh, as ``_view`` makes it."""
    if t.requires_grad and torch.is_grad_enabled():
        return torch.as_strided(t, size, stride, t.storage_offset() + offset)
    hit = cache.get(key)
    if hit is not None and hit[0] is t and hit[1] == t.data_ptr():
        return hit[2]
    view = torch.as_strided(t, size, stride, t.storage_offset() + offset)
    cache[key] = (t, t.data_ptr(), view)
    return view


def _input(
    i: int, t: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype
) -> torch.Tensor:
    """Input ``i`` checked against the layout the graph was compiled for (its symbolic
    sizes evaluated for this call); other strides are copied into that layout."""
    if t.shape != size or t.dtype != dtype:
        raise InputMismatchError(
            f"input {i} has size {tuple(t.shape)} and dtype {t.dtype}; for this call the graph "
            f"expects {size} and {dtype}. Recompile for the new shapes (ember.dynamo does this "
            "automatically)."
        )
    out = _restride(t, size, stride)
    assert out is not None
    return out


def _inputs_written(exc: BaseException) -> None:
    """Mark ``exc`` as raised after a kernel wrote an input (ember.ir.updates)."""
    note_inputs_written(exc, True)


def namespace(
    backend: Backend,
    kernels: dict[str, Any],
    constants: dict[str, torch.Tensor],
    consts: list[Any],
) -> dict[str, Any]:
    ns: dict[str, Any] = {
        "torch": torch,
        "_restride": _restride,
        "_view": _view,
        "_as_strided": torch.as_strided,
        "_const_view": _const_view,
        "_vc": {},  # this compiled graph's views of its constants
        "_input": _input,
        "_inputs_written": _inputs_written,
        # an aten overload's __call__ only forwards to its C++ operation: call that directly
        "_c": [c._op if isinstance(c, torch._ops.OpOverload) else c for c in consts],
        "_constants": constants,
    }
    ns.update(backend.namespace())
    ns.update(kernels)
    return ns
