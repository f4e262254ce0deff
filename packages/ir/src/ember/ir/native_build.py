"""Building generated C into a Python extension module: compiler, disk cache, keys.

What ember compiles at run time that is not a kernel (a frame's guards, ADR 0051) is
a C extension over the Python C API. It is built the way ember.inductor builds its
kernels: the system compiler (``$CC``, default ``gcc``), one shared library per
source, cached under ``$EMBER_CACHE_DIR`` (default ``~/.cache/ember``) in a folder per
``area``, keyed by the sha256 of the source, the flags, the compiler's version and
the Python build, so a second process (a warm start) loads what the first built and
never compiles again. Files are written under temporary names and moved into place
(atomic), with a sidecar holding the library's size and sha256: a damaged library is
deleted with a warning and rebuilt, never loaded.

The module name has the key in it (``<prefix>_<key>``): ``PyInit_`` names must differ
between libraries loaded into one process. The source spells its init function
``EMBER_PYINIT`` and its name ``EMBER_MODULE_NAME`` (macros the build defines).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Generic, TypeVar

from ember.ir.cache_entry import default_cache_dir

log = logging.getLogger("ember.ir.native_build")

T = TypeVar("T")

FLAGS = ("-O1", "-shared", "-fPIC", "-fno-strict-aliasing", "-w")

_loaded: dict[str, types.ModuleType] = {}
_lock = threading.Lock()


class NativeBuildError(RuntimeError):
    """The C compiler is missing or rejected a source (the message has its output)."""


def compiler(cxx: bool = False) -> str:
    if cxx:
        return os.environ.get("CXX", "g++")
    return os.environ.get("CC", "gcc")


@functools.cache
def compiler_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise NativeBuildError(f"no C compiler {cc!r} ({type(exc).__name__}: {exc})") from None
    return out.stdout.splitlines()[0] if out.stdout else cc


def extension_key(source: str, flags: Sequence[str] = (), cxx: bool = False) -> str:
    """The cache key of ``source``: sha256 over it, the flags, the compiler and Python."""
    h = hashlib.sha256()
    for part in (source, " ".join([*FLAGS, *flags]), compiler_version(compiler(cxx)), sys.version, sys.executable):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cached(lib: Path, meta: Path) -> bool:
    if not meta.exists():
        return False
    try:
        info = json.loads(meta.read_text())
        ok = bool(lib.stat().st_size == info["size"] and _digest(lib) == info["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        log.warning("ember: cached native library %s is damaged or truncated; rebuilding it", lib)
        for p in (meta, lib):
            with contextlib.suppress(OSError):
                p.unlink()
    return ok


def cached_path(
    source: str, area: str, prefix: str, cache_dir: str | os.PathLike[str] | None = None,
    flags: Sequence[str] = (), cxx: bool = False,
) -> Path:
    """Where the library of ``source`` lives (or would) in the cache."""
    key = extension_key(source, flags, cxx)
    root = Path(cache_dir if cache_dir is not None else default_cache_dir())
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return root / area / key[:2] / f"{prefix}_{key[:32]}{suffix}"


def is_cached(
    source: str, area: str, prefix: str, cache_dir: str | os.PathLike[str] | None = None,
    flags: Sequence[str] = (), cxx: bool = False,
) -> bool:
    """Whether ``source`` is built already (loading it compiles nothing)."""
    lib = cached_path(source, area, prefix, cache_dir, flags, cxx)
    return lib.name.removesuffix(importlib.machinery.EXTENSION_SUFFIXES[0]) in _loaded or _cached(
        lib, lib.with_suffix(".json")
    )


def load_extension(
    source: str, area: str, prefix: str, cache_dir: str | os.PathLike[str] | None = None,
    flags: Sequence[str] = (), cxx: bool = False,
) -> types.ModuleType:
    """The extension module built from ``source``: from this process, the disk cache, or
    the compiler (raises :class:`NativeBuildError`). ``flags`` are extra compiler flags
    (include and library paths); ``cxx`` compiles it as C++ (``$CXX``, default ``g++``)."""
    lib = cached_path(source, area, prefix, cache_dir, flags, cxx)
    name = lib.name.removesuffix(importlib.machinery.EXTENSION_SUFFIXES[0])
    with _lock:
        module = _loaded.get(name)
        if module is not None:
            return module
        meta = lib.with_suffix(".json")
        if not _cached(lib, meta):
            _compile(source, lib, meta, name, flags, cxx)
        spec = importlib.util.spec_from_file_location(name, lib)
        if spec is None or spec.loader is None:
            raise NativeBuildError(f"cannot load {lib}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _loaded[name] = module
        return module


def _compile(source: str, lib: Path, meta: Path, name: str, flags: Sequence[str], cxx: bool) -> None:
    lib.parent.mkdir(parents=True, exist_ok=True)
    include = sysconfig.get_paths()["include"]
    with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
        src = Path(tmp) / (f"{name}.cpp" if cxx else f"{name}.c")
        src.write_text(source)
        out = Path(tmp) / lib.name
        cmd = [
            compiler(cxx), *FLAGS, f"-I{include}", f"-DEMBER_PYINIT=PyInit_{name}",
            f"-DEMBER_MODULE_NAME=\"{name}\"", str(src), "-o", str(out), *flags,
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
        except (OSError, subprocess.SubprocessError) as exc:
            raise NativeBuildError(f"{' '.join(cmd[:1])} failed to run ({type(exc).__name__}: {exc})") from None
        if done.returncode != 0:
            raise NativeBuildError(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        info = {"size": out.stat().st_size, "sha256": _digest(out)}
        os.replace(out, lib)
        fd, tmp_meta = tempfile.mkstemp(dir=lib.parent, suffix=".json.tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)
        os.replace(tmp_meta, meta)


def torch_flags() -> list[str]:
    """Compiler flags of a C++ extension built against the running torch's headers and
    libraries (the tensor guard helper, ADR 0051; the native graph runner, ADR 0068)."""
    import torch

    root = Path(torch.__file__).parent
    lib = str(root / "lib")
    # torch's headers need C++20 from torch 2.14 on (``<=>``, ``std::bit_width``); older ones C++17
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    standard = "-std=c++20" if (major, minor) >= (2, 14) else "-std=c++17"
    flags = [standard, f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
             f"-DEMBER_TORCH_VERSION=\"{torch.__version__}\""]
    flags += [f"-I{root / 'include'}", f"-I{root / 'include' / 'torch' / 'csrc' / 'api' / 'include'}"]
    flags += [f"-L{lib}", f"-Wl,-rpath,{lib}", "-ltorch_python", "-ltorch", "-ltorch_cpu", "-lc10"]
    return flags


class BackgroundBuild(Generic[T]):
    """Something built once per process in a thread (a C++ extension compiled against
    torch's headers takes ~15-30 s the first time; the disk cache makes later processes
    load it): ``get()`` is the result, or None while it is being built or where the build
    failed (``error`` says why)."""

    def __init__(self, name: str, build: Callable[[], T]) -> None:
        self.name = name
        self._build = build
        self.value: T | None = None
        self.error: str | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        try:
            self.value = self._build()
        except Exception as exc:  # the callers run without it (a Python path)
            self.error = f"{type(exc).__name__}: {first_error(str(exc))}"
            log.info("ember: %s is not available (%s)", self.name, self.error)

    def get(self, wait: bool = False) -> T | None:
        """The built value; starts the build on the first call; ``wait`` for it to end."""
        if self.value is not None or self.error is not None:
            return self.value
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            thread = self._thread
        if wait:
            thread.join()
        return self.value

    def building(self) -> bool:
        """Whether the build has started and not ended."""
        return self.value is None and self.error is None and self._thread is not None


def first_error(message: str) -> str:
    """A compiler's first ``error:`` line where there is one (the command line is long and
    says nothing), else the message's start."""
    for line in message.splitlines():
        if "error:" in line:
            return line.strip()[:300]
    return message[:300]


__all__ = [
    "BackgroundBuild", "NativeBuildError", "cached_path", "extension_key", "first_error", "is_cached",
    "load_extension", "torch_flags",
]
