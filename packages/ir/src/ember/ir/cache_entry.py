"""What ember's on-disk compile caches share: graph keys and checksummed entry files.

* :func:`graph_key_text`: a graph's serialization without stack traces, the
  part of a cache key that says "the same graph" (moving user code around
  does not change it).
* :func:`source_fingerprint`: a sha256 over a package's ``.py`` files, so a
  cache entry made by other compiler code is never reused; :func:`code_digest`
  the same for one function (a user's lowering or decomposition).
* :func:`default_cache_dir` (``$EMBER_CACHE_DIR``, else ``~/.cache/ember``) and
  :func:`host_cpu` (the CPU's model and feature flags, hashed): where every
  stage's cache lives, and what makes a ``-march=native`` artifact foreign.
* :func:`store_entry` / :func:`load_entry`: one file per entry, its first line
  the sha256 of the rest, written under a temporary name and moved into place
  (atomic). An entry that is damaged, truncated or unparsable is deleted with
  a warning naming the file, and the caller rebuilds it; it is never used.

See ``docs/decisions/0007-compile-caches-keyed-by-the-ir.md``.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import json
import logging
import os
import platform
import tempfile
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch.fx

from ember.ir.errors import FormatError
from ember.ir.fx_convert import from_fx
from ember.ir.serialize import to_json

T = TypeVar("T")


_STORED_TEXT = "ember_stored_ir_text"


def remember_stored_text(gm: torch.fx.GraphModule, text: str) -> None:
    """``gm`` was just built by ``to_fx`` from ``text``, a cache entry's ember.ir JSON.

    :func:`graph_key_text` then reads ``gm``'s key from that text instead of serializing
    ``gm`` again (``from_fx`` + ``to_json``: ~10% of a warm start), for as long as ``gm``
    holds the graph that was built (the same ``Graph`` object with as many nodes; a copy
    of ``gm`` has another graph and is serialized). The round trip
    ``to_json(from_fx(to_fx(loads(text))))`` gives ``text`` back, so the key is the one
    the capturing process computed (``test_cache_entry.py`` checks it on real graphs).
    """
    gm.meta[_STORED_TEXT] = (gm.graph, len(gm.graph.nodes), text)


def _stored_text(gm: torch.fx.GraphModule) -> str | None:
    memo = getattr(gm, "meta", {}).get(_STORED_TEXT)
    if memo is None or memo[0] is not gm.graph or memo[1] != len(gm.graph.nodes):
        return None
    return str(memo[2])


def _key_text(data: dict[str, Any]) -> str:
    nodes = data.get("nodes")
    for node in nodes if isinstance(nodes, list) else []:
        if isinstance(node, dict):
            node.pop("stack_trace", None)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


@functools.lru_cache(maxsize=256)
def _stored_key_text(text: str) -> str | None:
    """The key text of a cache entry's graph JSON: a function of the text alone, computed once
    per process (a regional compile keys the same stored graph once per block, twice each:
    aotgrad's plan key and inductor's graph key)."""
    data = json.loads(text)
    return _key_text(data) if isinstance(data, dict) else None


def graph_key_text(gm: torch.fx.GraphModule, log: logging.Logger) -> str | None:
    """``gm``'s ember.ir JSON without stack traces; None (reason logged at DEBUG) when the IR cannot hold it."""
    text = _stored_text(gm)
    if text is not None:
        key = _stored_key_text(text)
        if key is not None:
            return key
    try:
        data = to_json(from_fx(gm))
    except (FormatError, TypeError, ValueError, KeyError) as e:
        log.debug("graph not cached (%s: %s)", type(e).__name__, e)
        return None
    return _key_text(data)


@functools.cache
def source_fingerprint(root: Path) -> str:
    """sha256 over every ``.py`` file below ``root`` (names and contents)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def code_digest(fn: object) -> str:
    """A digest of a function's bytecode and constants, the same in every process.

    Follows ``__wrapped__`` / ``functools.partial`` to the function underneath;
    nested code objects (lambdas, inner functions) are hashed by content, never
    by ``repr`` (which holds a memory address). ``"-"`` for a callable without code.
    """
    for _ in range(8):
        if hasattr(fn, "__code__"):
            break
        inner = getattr(fn, "__wrapped__", None) or getattr(fn, "func", None)
        if inner is None:
            break
        fn = inner
    code = getattr(fn, "__code__", None)
    if code is None:
        return "-"
    h = hashlib.sha256()
    hash_code(code, h)
    return h.hexdigest()[:16]


def hash_code(code: types.CodeType, h: Any) -> None:
    """Feed ``h`` everything that makes ``code`` the program it is (same in every process)."""
    for part in (
        code.co_code,
        code.co_names,
        code.co_varnames,
        code.co_freevars,
        code.co_cellvars,
        (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags),
        code.co_qualname,
    ):
        h.update(repr(part).encode() if not isinstance(part, bytes) else part)
        h.update(b"\0")
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            hash_code(const, h)
        else:
            h.update(repr(const).encode())
        h.update(b"\0")


def default_cache_dir() -> str:
    """``$EMBER_CACHE_DIR`` or ``$XDG_CACHE_HOME/ember`` (``~/.cache/ember``)."""
    env = os.environ.get("EMBER_CACHE_DIR")
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "ember")


@functools.cache
def host_cpu() -> str:
    """The CPU's model and feature flags, hashed: ``-march=native`` builds differ per CPU, and
    a library built for one must never load on another (a cache directory can be shared)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine() + " " + platform.processor()
    keep = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags", "Features", "CPU part"))]
    return hashlib.sha256("\n".join(sorted(set(keep))).encode()).hexdigest()


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (back on after, if it was on).

    Rebuilding cached graphs, guards and plans allocates hundreds of thousands of
    objects in a few hundred milliseconds; each full collection then walks every
    object the process holds (torch and transformers: millions), which made a third of
    a warm start's CPU time (vit_gpt2_train: 0.2 of 0.57 s). Paused, the cycles made
    meanwhile are collected by the first collection after it.
    """
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def entry_path(cache_dir: str | os.PathLike[str], kind: str, key: str) -> Path:
    """``<cache_dir>/<kind>/<key[:2]>/<key>.json``."""
    return Path(cache_dir) / kind / key[:2] / f"{key}.json"


def load_entry(path: Path, parse: Callable[[str], T], log: logging.Logger) -> T | None:
    """The parsed entry at ``path``; None when missing, or when damaged (then deleted, with a warning)."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    digest, _, body = raw.partition(b"\n")
    try:
        if hashlib.sha256(body).hexdigest().encode() != digest:
            raise ValueError("digest does not match the contents")
        with paused_gc():
            return parse(body.decode())
    except Exception as e:  # any damage: rebuild, never use
        log.warning("cache entry %s is corrupted or unreadable (%s); building it again", path, e)
        with contextlib.suppress(OSError):
            path.unlink()
        return None


def store_entry(path: Path, text: str, parse: Callable[[str], object], log: logging.Logger) -> bool:
    """Write ``text`` atomically if ``parse(text)`` succeeds (an entry that would not load is not written)."""
    try:
        parse(text)
    except Exception as e:  # a value the encoding cannot carry back
        log.debug("not cached: the entry would not load back (%s: %s)", type(e).__name__, e)
        return False
    body = text.encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".json.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return True
