"""On-disk cache of compiled kernels, safe against concurrent writers and corruption.

Layout: ``<cache_dir>/kernels/<key[:2]>/<key>.so`` plus ``<key>.json`` holding the
library's size and sha256. Files are written under temporary names and moved
into place with ``os.replace`` (atomic), the library before its sidecar, so a
sidecar always describes a complete file. A lookup re-hashes the library and
refuses (deletes) anything that does not match: a truncated or corrupted
file is rebuilt, never loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

from .logs import log


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class KernelCache:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root) / "kernels"

    def _paths(self, key: str) -> tuple[Path, Path]:
        d = self.root / key[:2]
        return d / f"{key}.so", d / f"{key}.json"

    def workdir(self, key: str) -> Path:
        d = self.root / key[:2]
        d.mkdir(parents=True, exist_ok=True)
        return d

    def lookup(self, key: str) -> Path | None:
        lib, meta = self._paths(key)
        if not meta.exists():
            return None
        try:
            info = json.loads(meta.read_text())
            ok = lib.stat().st_size == info["size"] and _digest(lib) == info["sha256"]
        except (OSError, ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            log.warning(
                "ember.inductor: cached kernel %s is corrupted or truncated; rebuilding it", lib
            )
            for p in (meta, lib):
                with contextlib.suppress(OSError):
                    p.unlink()
            return None
        return lib

    def store(self, key: str, built: Path) -> Path:
        """Move a freshly built library into the cache (atomically) and record its digest."""
        lib, meta = self._paths(key)
        info = {"size": built.stat().st_size, "sha256": _digest(built)}
        os.replace(built, lib)
        fd, tmp = tempfile.mkstemp(dir=lib.parent, suffix=".json.tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)
        os.replace(tmp, meta)
        return lib
