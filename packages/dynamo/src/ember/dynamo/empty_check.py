"""Errors eager raises on empty tensors that fake tensors do not.

Some kernels check sizes only in their real implementation: ``x.max(0)``, ``x.argmin()``,
``x.kthvalue(1)`` raise on a tensor whose reduced dim is empty, while their fake (meta)
kernels return a result. A graph captured from such a call would run without raising, and
a backend that drops the unused result (any dead-code elimination) makes the compiled
function return where eager raised (fuzz seed 3058).

Indexing ops on a 0-dimensional tensor are the same case: ``s.index_put_((i,), v)``,
``s.index_copy(0, i, v)`` raise "too many indices for tensor of dimension 0" in eager (and
``gather``/``scatter``/``index_select`` a RuntimeError) while their fake kernels return
(fuzz seed 3889, where ``x.nansum(0)`` of a 1-d input is 0-d). They are checked the same way.

An empty tensor has no values, so running the op once for real on empty tensors of the
same sizes, strides and dtypes costs nothing and raises exactly what eager raises. Other
tensor arguments are stood in for by zeros when they are small; an op whose arguments are
too large, or symbolic in size, is not checked.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

#: the largest non-empty tensor argument stood in for by zeros
_MAX_STAND_IN = 4096

#: ops (by name) whose fake kernels accept a 0-dimensional self their real kernels refuse
_INDEX_OPS = frozenset({
    "index_put", "index_put_", "gather", "scatter", "scatter_", "scatter_add",
    "scatter_add_", "scatter_reduce", "scatter_reduce_", "index_select", "index_add",
    "index_add_", "index_copy", "index_copy_", "index_fill", "index_fill_", "index_reduce",
    "index_reduce_", "take", "put", "put_",
})


def _name(target: Any) -> str:
    return target if isinstance(target, str) else str(getattr(target, "__name__", ""))


def _concrete(t: torch.Tensor) -> bool:
    return all(isinstance(s, int) for s in (*t.shape, *t.stride(), t.storage_offset()))


def _real(t: torch.Tensor) -> torch.Tensor:
    if t.numel() == 0:
        return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype,
                                   device=t.device)
    return torch.zeros(tuple(t.shape), dtype=t.dtype, device=t.device)


def empty_input_error(kind: str, target: Any, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> Exception | None:
    """What eager raises calling ``target`` (``kind``: ``call_function``/``call_method``)
    on ``args`` (fake tensors) when one of them is empty; None when it does not raise or
    the call cannot be checked."""
    flat = pytree.tree_leaves((args, kwargs))
    tensors = [a for a in flat if isinstance(a, torch.Tensor)]
    if not tensors or not all(_concrete(t) for t in tensors):
        return None
    scalar_index = _name(target) in _INDEX_OPS and any(t.dim() == 0 for t in tensors)
    if not scalar_index and not any(t.numel() == 0 for t in tensors):
        return None
    if any(t.numel() > _MAX_STAND_IN or t.device.type == "meta" for t in tensors):
        return None
    with torch._subclasses.fake_tensor.unset_fake_temporarily(), torch.no_grad():
        real_args, real_kwargs = pytree.tree_map_only(torch.Tensor, _real, (args, kwargs))
        try:
            if kind == "call_method":
                getattr(real_args[0], target)(*real_args[1:], **real_kwargs)
            else:
                target(*real_args, **real_kwargs)
        except (IndexError, RuntimeError, ValueError) as e:
            return e
        except Exception:
            return None
    return None
