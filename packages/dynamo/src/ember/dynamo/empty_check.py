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

A size that depends on data (an unbacked ``u0``, ADR 0046: ``x[mask]`` of a mask with no
True value) may be 0 at run time: the op is checked with every such size 0 (other sizes at
their traced values), so ``x[x > 0].max(0)`` breaks the graph instead of being compiled into
code that returns where eager raises.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils import _pytree as pytree

from ember.ir.shapes import ShapeEnv

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


def _layout_at_zero(t: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``t``'s sizes and strides with each unbacked size 0 and other symbols at their traced
    values; None when a size is symbolic without an unbacked symbol (not checked)."""
    import sympy

    unbacked = False
    values: list[int] = []
    for s in (*t.shape, *t.stride()):
        if isinstance(s, int):
            values.append(s)
            continue
        env = getattr(getattr(s, "node", None), "env", None)
        if not isinstance(env, ShapeEnv):
            return None
        expr = sympy.sympify(s.node.expr)
        zeros = {u: sympy.Integer(0) for u in expr.free_symbols if u in env.unbacked}
        unbacked = unbacked or bool(zeros)
        values.append(int(env.evaluate(expr.xreplace(zeros))))
    if not unbacked:
        return None
    return tuple(values[:t.dim()]), tuple(values[t.dim():])


def _real(t: torch.Tensor) -> torch.Tensor:
    if not _concrete(t):
        layout = _layout_at_zero(t)
        assert layout is not None
        shape, stride = layout
        if 0 in shape:
            return torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device)
        return torch.zeros(shape, dtype=t.dtype, device=t.device)
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
    if not tensors:
        return None
    layouts = [None if _concrete(t) else _layout_at_zero(t) for t in tensors]
    if any(lay is None and not _concrete(t) for t, lay in zip(tensors, layouts, strict=True)):
        return None
    if any(lay is not None for lay in layouts):  # a data-dependent size, checked at 0
        if any(isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)) for a in flat):
            return None
        sizes = [lay[0] if lay is not None else tuple(t.shape)
                 for t, lay in zip(tensors, layouts, strict=True)]
        if not any(0 in sz for sz in sizes):
            return None
        if any(math.prod(sz) > _MAX_STAND_IN or t.device.type == "meta"
               for t, sz in zip(tensors, sizes, strict=True)):
            return None
        return _run_real(kind, target, args, kwargs)
    scalar_index = _name(target) in _INDEX_OPS and any(t.dim() == 0 for t in tensors)
    if not scalar_index and not any(t.numel() == 0 for t in tensors):
        return None
    if any(t.numel() > _MAX_STAND_IN or t.device.type == "meta" for t in tensors):
        return None
    return _run_real(kind, target, args, kwargs)


def _run_real(kind: str, target: Any, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Exception | None:
    """What calling ``target`` on real stand-ins of the (fake) tensor arguments raises."""
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
