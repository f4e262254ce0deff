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
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
import torch._decomp as torch_decomp

from ember.ir.cache_entry import code_digest

DecompTable = dict[Any, Callable[..., Any]]
#: what ``aot_function`` & co. accept: a table, or a :class:`LazyDecompTable`
DecompMapping = Mapping[Any, Callable[..., Any]]


class LazyDecompTable(Mapping[Any, Callable[..., Any]]):
    """A decomposition table built on its first lookup, whose plan-cache fingerprint is
    known without building it.

    A backend's table may need its whole lowering stack imported to be built
    (ember.inductor leaves out the ops it lowers); a warm start that loads every
    traced plan from the cache never looks an op up, so it never pays that.
    ``fingerprint()`` must change whenever the built table could (the plan cache keys
    traced graphs by it; torch's version is in the key already).
    """

    def __init__(self, build: Callable[[], DecompMapping], fingerprint: Callable[[], str]) -> None:
        self._build = build
        self._fingerprint = fingerprint
        self._built: DecompMapping | None = None

    def _table(self) -> DecompMapping:
        if self._built is None:
            self._built = self._build()
        return self._built

    def __getitem__(self, op: Any) -> Callable[..., Any]:
        return self._table()[op]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def fingerprint(self) -> str:
        return self._fingerprint()


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


#: (a copy of torch's decomposition table, the text of :func:`mutation_decompositions` from it)
_REQUIRED: list[tuple[DecompTable, str]] = []


def _required_text() -> str:
    """:func:`mutation_decompositions` as text (each op, its function and code digest), for
    plan-cache fingerprints. Remade only when torch's table changed since the last call:
    comparing the table with a copy runs in C with the keys' stored hashes (~20 us), while
    filtering it hashes each of ~1000 ops in Python (~1.5 ms per backend call, one per
    block of a regional compile)."""
    table = torch_decomp.decomposition_table
    if _REQUIRED and _REQUIRED[0][0] == table:
        return _REQUIRED[0][1]
    snapshot = dict(table)
    required = sorted(f"{op}={getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}:"
                      f"{code_digest(fn)}" for op, fn in mutation_decompositions().items())
    _REQUIRED[:] = [(snapshot, repr(required))]
    return _REQUIRED[0][1]


def core_aten_decompositions() -> DecompTable:
    """torch's core-ATen table without random ops (to keep eager's RNG stream)."""
    table = dict(torch_decomp.core_aten_decompositions())
    return {op: fn for op, fn in table.items() if not _is_random(op)}


def get_decompositions(ops: Iterable[Any]) -> DecompTable:
    """torch's decompositions for ``ops`` (overloads or overload packets)."""
    return dict(torch_decomp.get_decompositions(list(ops)))


def with_required(table: DecompMapping | None) -> DecompMapping:
    """``table`` plus :func:`mutation_decompositions` (the user's entries win); a
    :class:`LazyDecompTable` stays lazy."""
    if isinstance(table, LazyDecompTable):
        lazy = table

        def fingerprint() -> str:
            return f"{_required_text()}|{lazy.fingerprint()}"

        return LazyDecompTable(lambda: with_required(dict(lazy)), fingerprint)
    merged = mutation_decompositions()
    merged.update(table or {})
    return merged
