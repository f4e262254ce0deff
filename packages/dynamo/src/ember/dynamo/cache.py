"""The per-code-object cache of guarded, transformed code.

One :class:`CodeCache` per code object (per compiled-callable runtime) holds
the :class:`GuardedCode` entries ``convert_frame`` produced for it, newest
last. A call checks the entries in order and runs the first whose check
function passes. Past ``cache_size_limit`` entries the code is marked
*eager-only*: existing entries keep serving the calls they match, and every
other call runs the original code without compiling (ember warns once).

The cache is plain data plus a version counter. Function wrappers keep their
own ``(check_fn, function)`` pairs built for their globals and closure and
rebuild them when the version moves, so the hot path never allocates.
"""

from __future__ import annotations

import types
import weakref
from dataclasses import dataclass, field
from typing import Any

from .resume import ResumeCodes


def seen_key(source: str, rank: int) -> str:
    """The key of a source's sizes of one rank in ``seen_sizes``."""
    return f"{source}#{rank}"


class RecompileError(RuntimeError):
    """A recompile happened while recompiles were forbidden.

    Raised under ``set_stance("fail_on_recompile")``. Example::

        ember.dynamo: recompile of `f` (model.py:3) forbidden by
        set_stance('fail_on_recompile'); the cached graph no longer applies
        because L['x'].size()[0] was 8, the graph assumed 4. Call
        set_stance('default') to allow it, or mark the dimension dynamic.
    """


@dataclass
class CodeCache:
    """Cached entries for one code object."""

    code: types.CodeType
    entries: list[Any] = field(default_factory=list)  # GuardedCode, newest last
    version: int = 0
    #: Set when the code must no longer be compiled (cache limit, or capture
    #: declined the frame); calls that match no entry run the original code.
    eager_reason: str | None = None
    warned: bool = False
    #: Tensor sizes the captures so far saw per input source, ``None`` for a
    #: dimension whose size differed between them (automatic dynamic shapes).
    seen_sizes: dict[str, tuple[int | None, ...]] = field(default_factory=dict)
    #: Entries bound from a stored frame (another instance, another process): not
    #: recompiles, so they do not count toward ``cache_size_limit``.
    loaded: int = 0

    def add(self, guarded: Any, *, loaded: bool = False) -> None:
        self.entries.append(guarded)
        self.loaded += loaded
        self.version += 1

    def merge_sizes(self, sizes: dict[str, tuple[int, ...]]) -> None:
        """Fold one capture's input sizes into ``seen_sizes``, per source and rank: a
        local that is a 4-d tensor on one branch and a 2-d one on another keeps both
        histories (one history, replaced on each change of rank, never saw a size change,
        so a growing size recompiled on every call; fuzz seed 218)."""
        for source, shape in sizes.items():
            key = seen_key(source, len(shape))
            before = self.seen_sizes.get(key)
            if before is None:
                self.seen_sizes[key] = tuple(shape)
            else:
                self.seen_sizes[key] = tuple(
                    a if a == b else None for a, b in zip(before, shape, strict=True)
                )

    def captured(self) -> int:
        """How many entries capture made (the ones ``cache_size_limit`` counts)."""
        return len(self.entries) - self.loaded

    def mark_eager(self, reason: str) -> None:
        self.eager_reason = reason
        self.version += 1

    def clear(self) -> None:
        self.entries.clear()
        self.seen_sizes.clear()
        self.loaded = 0
        self.eager_reason = None
        self.warned = False
        self.version += 1

    def where(self) -> str:
        return f"`{self.code.co_name}` ({self.code.co_filename}:{self.code.co_firstlineno})"


class CacheTable:
    """All code caches of one runtime, keyed by code object identity, and the
    resume functions its captures made."""

    def __init__(self) -> None:
        self._caches: dict[int, CodeCache] = {}
        self.resume_codes = ResumeCodes()
        #: The runtime's stored frames (``frame_cache.FrameStore``), set by the runtime.
        self.frames: Any = None
        _ALL_TABLES.add(self)

    def get(self, code: types.CodeType) -> CodeCache:
        cache = self._caches.get(id(code))
        if cache is None or cache.code is not code:
            cache = CodeCache(code)
            self._caches[id(code)] = cache
        return cache

    def peek(self, code: types.CodeType) -> CodeCache | None:
        cache = self._caches.get(id(code))
        return cache if cache is not None and cache.code is code else None

    def clear(self) -> None:
        for cache in self._caches.values():
            cache.clear()
        self.resume_codes.clear()
        if self.frames is not None:
            self.frames.clear()


#: Every live table (a registry of weak references), so ``reset()`` reaches them all.
_ALL_TABLES: weakref.WeakSet[CacheTable] = weakref.WeakSet()


#: Other holders of compiled entries (compiled optimizer steps) that ``reset()`` clears
_OTHER_CACHES: weakref.WeakSet[Any] = weakref.WeakSet()


def register_cache(holder: Any) -> None:
    """Have ``reset()`` call ``holder.clear()`` too (held weakly)."""
    _OTHER_CACHES.add(holder)


def clear_all() -> None:
    """Drop every cached entry of every runtime (``ember.dynamo.reset()``)."""
    for table in list(_ALL_TABLES):
        table.clear()
    for holder in list(_OTHER_CACHES):
        holder.clear()


def first_failure(entries: list[Any], f_locals: dict[str, Any], f_globals: dict[str, Any]) -> str:
    """The plain-words reason the newest entry did not match (for logs and errors)."""
    for guarded in reversed(entries):
        explain = getattr(guarded.check_fn, "explain", None)
        if explain is None:
            continue
        try:
            reason = explain(f_locals, f_globals)
        except Exception as exc:  # an explanation must never break the call
            reason = f"(could not explain the guard failure: {exc})"
        if reason:
            return str(reason)
    return "no cached entry's guards matched"
