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
    if any(st == 0 and n > 1 for n, st in zip(size, stride)):
        return in_layout(t, None, size, stride)
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def in_layout(a: torch.Tensor, i: int | None, size: Any, stride: tuple[int, ...]) -> torch.Tensor:
    """``a``'s values in the layout the graph was compiled for (input ``i``; None: a value
    the wrapper made).

    A layout with stride 0 on a dim of more than one element (an ``expand``ed value,
    such as a saved attention mask the backward reads, which a forward compiled at
    another size may have returned dense) cannot be copied into; the kernels read one
    element along that dim, so ``a`` is accepted when it is the same along it (a
    materialized expand) and given as that element expanded. Other values cannot run
    in this graph: an ``InputMismatchError``."""
    expanded = [d for d, (n, st) in enumerate(zip(size, stride)) if st == 0 and n > 1]
    if not expanded:
        return torch.empty_strided(size, stride, dtype=a.dtype, device=a.device).copy_(a)
    one = a
    for d in expanded:
        one = one.narrow(d, 0, 1)
    if not torch.equal(one.expand(size), a) and not (
            a.is_floating_point() and bool(torch.isnan(a).any())
            and torch.allclose(one.expand(size), a, rtol=0.0, atol=0.0, equal_nan=True)):
        what = "a value" if i is None else f"input {i}"
        raise InputMismatchError(
            f"{what} differs along dims {expanded}, which the graph was compiled to read "
            f"as expanded (stride 0, {tuple(size)} with strides {tuple(stride)}); recompile "
            "for this layout (ember.dynamo does this automatically)"
        )
    dense = torch.empty_strided(one.shape, stride, dtype=a.dtype, device=a.device).copy_(one)
    return dense.expand(size)


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
    if t.stride() != stride and t.numel() > 1 and any(
            st == 0 and n > 1 for n, st in zip(size, stride)):
        return in_layout(t, i, size, stride)
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
