"""The one decomposition table: which ATen ops the recorder replaces by simpler ones.

A table maps an ``OpOverload`` to a Python function written with other ATen ops; the
recorder (:mod:`ember.ir.recorder`) calls it instead of recording the op. The base is
torch's own registry (``torch._decomp``), so ember stays in step with torch's ATen
semantics. Each compiler takes a named layer of it:

- :func:`core_aten_table`: torch's core-ATen decompositions, built once per process
  (~0.3 s): the base that ember.inductor falls back to for an op it neither lowers nor
  decomposes in its own layer (``inductor/decompositions.py``, the *lowering layer*:
  a curated list of composite ops, without the ops it lowers or keeps as extern calls);
- :func:`core_aten_decompositions`: the base without random ops, what a user of
  ember.aotgrad passes to lower everything to core ATen;
- :func:`mutation_decompositions`: the *functionalization layer*, which ember.aotgrad
  always applies (:func:`with_required`): ops that write to arguments other than an
  in-place ``self`` (BatchNorm's running statistics in ``_native_batch_norm_legit``)
  become functional math plus ``copy_``, which functionalization knows how to remove;
- :func:`get_decompositions`: entries of the registry by op or overload packet.

Random ops are never decomposed by the layers taken here: a decomposed ``dropout``
would draw different random numbers than eager does under the same seed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
import torch._decomp as torch_decomp

from ember.ir.cache_entry import code_digest
from ember.ir.recorder import DecompTable

#: a table one can add to (what the functions here return)
DecompDict = dict[Any, Callable[..., Any]]


class LazyDecompTable(Mapping[Any, Callable[..., Any]]):
    """A decomposition table built on its first lookup, whose plan-cache fingerprint is
    known without building it.

    A backend's table may need its whole lowering stack imported to be built
    (ember.inductor leaves out the ops it lowers); a warm start that loads every
    traced plan from the cache never looks an op up, so it never pays that.
    ``fingerprint()`` must change whenever the built table could (the plan cache keys
    traced graphs by it; torch's version is in the key already).
    """

    def __init__(self, build: Callable[[], DecompTable], fingerprint: Callable[[], str]) -> None:
        self._build = build
        self._fingerprint = fingerprint
        self._built: DecompTable | None = None

    def _table(self) -> DecompTable:
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


def is_random(op: Any) -> bool:
    """Whether ``op`` draws from the random generator (kept whole to keep eager's stream)."""
    return isinstance(op, torch._ops.OpOverload) and (
        torch.Tag.nondeterministic_seeded in op.tags
    )


# -- the base --------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _core() -> DecompDict:
    return dict(torch_decomp.core_aten_decompositions())


def core_aten_table() -> DecompTable:
    """torch's core-ATen decompositions, random ops included (built once; do not mutate)."""
    return _core()


def get_decompositions(ops: Iterable[Any]) -> DecompDict:
    """torch's decompositions for ``ops`` (overloads or overload packets)."""
    return dict(torch_decomp.get_decompositions(list(ops)))


def core_aten_decompositions() -> DecompDict:
    """The base without random ops (to keep eager's RNG stream): a new table per call."""
    return {op: fn for op, fn in core_aten_table().items() if not is_random(op)}


# -- the functionalization layer ---------------------------------------------------


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
    return _writes_non_self(op) and not is_random(op)


def mutation_decompositions() -> DecompDict:
    """Decompositions for ops that mutate arguments in ways functionalization cannot map."""
    return {op: fn for op, fn in torch_decomp.decomposition_table.items()
            if _is_mutation_decomposition(op)}


#: (a copy of torch's decomposition table, the text of :func:`mutation_decompositions` from it)
_REQUIRED: list[tuple[DecompDict, str]] = []


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


def with_required(table: DecompTable | None) -> DecompTable:
    """``table`` on top of the functionalization layer (the table's entries win); a
    :class:`LazyDecompTable` stays lazy."""
    if isinstance(table, LazyDecompTable):
        lazy = table

        def fingerprint() -> str:
            return f"{_required_text()}|{lazy.fingerprint()}"

        return LazyDecompTable(lambda: with_required(dict(lazy)), fingerprint)
    merged = mutation_decompositions()
    merged.update(table or {})
    return merged


__all__ = [
    "DecompDict",
    "LazyDecompTable",
    "core_aten_decompositions",
    "core_aten_table",
    "get_decompositions",
    "is_random",
    "mutation_decompositions",
    "with_required",
]
