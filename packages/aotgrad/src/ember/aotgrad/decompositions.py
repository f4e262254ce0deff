"""Decomposition tables: which ATen ops the tracer replaces by simpler ones.

A table maps an ``OpOverload`` to a Python function written with other ATen
ops; the tracer calls it instead of recording the op. Tables are built from
torch's own tables (``torch._decomp``), so ember stays in step with torch's
ATen semantics:

- :func:`mutation_decompositions` is always applied: ops that write to
  arguments other than an in-place ``self`` (BatchNorm's running statistics in
  ``_native_batch_norm_legit``) are decomposed into functional math plus
  ``copy_``, which :mod:`ember.aotgrad.functionalize` knows how to remove;
- :func:`core_aten_decompositions` lowers composite ops to torch's core ATen
  set, for compilers (ember.inductor) that only lower core ops;
- :func:`get_decompositions` picks entries by op or overload packet.

Random ops are never decomposed by these tables: a decomposed ``dropout``
would draw different random numbers than eager does under the same seed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch._decomp as torch_decomp

DecompTable = dict[Any, Callable[..., Any]]


def _is_random(op: Any) -> bool:
    return isinstance(op, torch._ops.OpOverload) and (
        torch.Tag.nondeterministic_seeded in op.tags
    )


def _writes_non_self(op: Any) -> bool:
    if not isinstance(op, torch._ops.OpOverload):
        return False
    args = op._schema.arguments
    written = [i for i, a in enumerate(args) if a.alias_info is not None and a.alias_info.is_write]
    if not written:
        return False
    inplace_self = written == [0] and op.overloadpacket.__name__.endswith("_")
    is_out = any(a.is_out for a in args)
    return not inplace_self and not is_out


@functools.cache
def _is_mutation_decomposition(op: Any) -> bool:
    """An op's schema never changes: read once per op (every backend call of a regional
    compile builds the table again; reading ~1000 schemas cost ~20 ms each time)."""
    return _writes_non_self(op) and not _is_random(op)


def mutation_decompositions() -> DecompTable:
    """Decompositions for ops that mutate arguments in ways functionalization cannot map."""
    return {op: fn for op, fn in torch_decomp.decomposition_table.items()
            if _is_mutation_decomposition(op)}


def core_aten_decompositions() -> DecompTable:
    """torch's core-ATen table without random ops (to keep eager's RNG stream)."""
    table = dict(torch_decomp.core_aten_decompositions())
    return {op: fn for op, fn in table.items() if not _is_random(op)}


def get_decompositions(ops: Iterable[Any]) -> DecompTable:
    """torch's decompositions for ``ops`` (overloads or overload packets)."""
    return dict(torch_decomp.get_decompositions(list(ops)))


def with_required(table: DecompTable | None) -> DecompTable:
    """``table`` plus :func:`mutation_decompositions` (the user's entries win)."""
    merged = mutation_decompositions()
    merged.update(table or {})
    return merged
