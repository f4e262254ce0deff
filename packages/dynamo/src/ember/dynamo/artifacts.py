"""One portable blob of everything a warm start needs: ``save_cache_artifacts`` / ``load_cache_artifacts``.

A job that compiled a model calls ``blob, info = save_cache_artifacts()`` and
keeps the bytes (object storage, a container layer); a fresh machine calls
``load_cache_artifacts(blob)`` before its first compile and starts warm. The
signatures are ``torch.compiler``'s (bytes plus a :class:`CacheInfo` saying
what is inside; loading returns the ``CacheInfo`` of what was installed). The
blob holds the compile cache's folders (``$EMBER_CACHE_DIR``): ``frames``
(ember.dynamo's stored frames), ``aot`` (ember.aotgrad's plans), ``aten``,
``graphs``, ``kernels``, ``triton`` and ``triton_tune`` (ember.inductor's
traced inference graphs, compiled graphs, C++ libraries, Triton kernels and
autotuning winners), each file with its sha256.

Layout: a magic line, a line with the sha256 of the rest, then zlib-compressed
JSON ``{"format", "environment", "files": [{"path", "sha256", "data"}]}``.
The environment is Python's cache tag, torch's version, the source digest of
every installed ember package and the host CPU: a blob from another
environment is *foreign* and ignored (logged), because its entries could
never be looked up here (or, for ``-march=native`` libraries, must not be).
A damaged blob or file is rejected with a warning and nothing of it is
written, so it is never executed.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import json
import os
import tempfile
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ember.ir.cache_entry import default_cache_dir, host_cpu, source_fingerprint

from . import frame_cache
from .logs import get_logger

log = get_logger("frame_cache")

MAGIC = b"ember-cache-artifacts\n"
FORMAT = 1
#: The cache folders a warm start reads (not ``debug`` output or the frame hook's build).
FOLDERS = ("frames", "aot", "aten", "graphs", "kernels", "triton", "triton_tune")
PACKAGES = ("ir", "guards", "dynamo", "aotgrad", "inductor", "minifier")


@dataclass
class CacheInfo:
    """The files in a blob (or installed from one), by cache folder: their keys."""

    frames: list[str] = field(default_factory=list)
    aot: list[str] = field(default_factory=list)
    aten: list[str] = field(default_factory=list)
    graphs: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    triton: list[str] = field(default_factory=list)
    triton_tune: list[str] = field(default_factory=list)

    def add(self, rel: str) -> None:
        folder, _, rest = rel.partition("/")
        getattr(self, folder).append(rest)

    def __len__(self) -> int:
        return sum(len(getattr(self, name)) for name in FOLDERS)


def _ember_sources() -> dict[str, str]:
    """The source digest of every installed ember package (found without importing it)."""
    out: dict[str, str] = {}
    for name in PACKAGES:
        try:
            spec = importlib.util.find_spec(f"ember.{name}")
        except (ImportError, ValueError):
            spec = None
        locations = list(spec.submodule_search_locations or []) if spec is not None else []
        if locations:
            out[name] = source_fingerprint(Path(locations[0]).resolve())
    return out


def environment() -> dict[str, Any]:
    env: dict[str, Any] = dict(frame_cache.environment())
    env["ember_packages"] = _ember_sources()
    env["cpu"] = host_cpu()
    return env


def _files(root: Path) -> list[Path]:
    found: list[Path] = []
    for folder in FOLDERS:
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.is_file() and not path.name.endswith(".tmp") and ".tmp" not in path.suffixes:
                found.append(path)
    return found


def save_cache_artifacts() -> tuple[bytes, CacheInfo]:
    """Everything in the compile cache a warm start reads, as one portable blob, and what it holds."""
    root = Path(default_cache_dir())
    files: list[dict[str, str]] = []
    info = CacheInfo()
    for path in _files(root):
        try:
            data = path.read_bytes()
        except OSError:
            continue  # removed by another process while we listed it
        rel = path.relative_to(root).as_posix()
        info.add(rel)
        files.append(
            {
                "path": rel,
                "sha256": hashlib.sha256(data).hexdigest(),
                "data": base64.b64encode(data).decode(),
            }
        )
    doc = {"format": FORMAT, "environment": environment(), "files": files}
    body = zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 6)
    return MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body, info


def _reject(why: str) -> CacheInfo:
    message = f"ember.dynamo.load_cache_artifacts: {why}; nothing loaded (compiles run cold)"
    log.warning("%s", message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    return CacheInfo()


def _safe_path(root: Path, rel: str) -> Path | None:
    parts = Path(rel).parts
    if not parts or parts[0] not in FOLDERS or ".." in parts or Path(rel).is_absolute():
        return None
    return root.joinpath(*parts)


def load_cache_artifacts(blob: bytes) -> CacheInfo:
    """Install a blob from :func:`save_cache_artifacts`; returns what was written (empty: nothing).

    A blob from another environment (Python, torch, ember or CPU) is ignored;
    a damaged one is rejected with a warning. Either way nothing is written.
    """
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise TypeError(f"load_cache_artifacts expects bytes, got {type(blob).__name__}")
    raw = bytes(blob)
    if not raw.startswith(MAGIC):
        return _reject("the data is not an ember cache artifact blob")
    digest, _, body = raw[len(MAGIC) :].partition(b"\n")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        return _reject("the blob is corrupted or truncated (checksum mismatch)")
    try:
        doc = json.loads(zlib.decompress(body))
        fmt, env, files = doc["format"], doc["environment"], doc["files"]
    except Exception as exc:
        return _reject(f"the blob cannot be read ({type(exc).__name__}: {exc})")
    if fmt != FORMAT:
        return _reject(f"blob format {fmt!r}, this ember reads {FORMAT}")
    here = environment()
    differs = sorted(k for k in set(here) | set(env) if here.get(k) != env.get(k))
    if differs:
        log.warning(
            "ember.dynamo.load_cache_artifacts: the blob was made with another %s; its entries "
            "are foreign here and are ignored",
            ", ".join(differs),
        )
        return CacheInfo()
    root = Path(default_cache_dir())
    checked: list[tuple[Path, bytes]] = []
    info = CacheInfo()
    for item in files:
        target = _safe_path(root, str(item.get("path", "")))
        if target is None:
            return _reject(f"file path {item.get('path')!r} is outside the cache folders")
        data = base64.b64decode(item["data"])
        if hashlib.sha256(data).hexdigest() != item.get("sha256"):
            return _reject(f"file {item['path']} is corrupted (checksum mismatch)")
        checked.append((target, data))
        info.add(str(item["path"]))
    for target, data in checked:
        _write(target, data)
    frame_cache.forget_misses()
    log.info("loaded %d cache files into %s", len(checked), root)
    return info


def _write(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if target.suffix == ".so":
            os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
