"""The C++ compiler driver: build kernel sources into shared libraries and load them.

Kernels of one graph are compiled in parallel (threads running the compiler).
Keys hash the full source, the flags, the compiler's version and the host CPU
(model and feature flags: ``-march=native``), so a second process compiling the
same graph on the same machine loads every kernel from the cache, and a cache
directory shared between machines never hands one CPU another's code.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ember.ir.cache_entry import host_cpu

from .cache import KernelCache
from .codegen.backend import BuildStats
from .codegen.cpp_prelude import prelude
from .errors import CppCompileError
from .options import InductorOptions


@functools.cache
def compiler_version(cxx: str) -> str:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()[0] if out.stdout else cxx


@functools.cache
def has_libmvec() -> bool:
    """glibc's vector math library (sin/exp/... over AVX lanes) is installed."""
    return ctypes.util.find_library("mvec") is not None


def full_source(kernel_src: str) -> str:
    return prelude(has_libmvec()) + "\n" + kernel_src


def _flags(options: InductorOptions) -> list[str]:
    flags = list(options.cpp.cflags) + ["-std=c++17"]
    if has_libmvec():
        flags.append("-lmvec")
    return flags


def cache_key(source: str, options: InductorOptions) -> str:
    h = hashlib.sha256()
    for part in (source, " ".join(_flags(options)), compiler_version(options.cpp.cxx), host_cpu()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


# Libraries loaded in this process, by cache key (loading twice would leak handles).
_LOADED: dict[str, ctypes.CDLL] = {}


def _compile_one(
    source: str, key: str, cache: KernelCache, options: InductorOptions, name: str
) -> Path:
    work = cache.workdir(key)
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        src = Path(tmp) / f"{key}.cpp"
        src.write_text(source)
        out = Path(tmp) / f"{key}.so"
        cmd = [options.cpp.cxx, str(src), "-o", str(out), *_flags(options)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            keep = work / f"{key}.failed.cpp"
            keep.write_text(source)
            first = "\n".join(proc.stderr.splitlines()[:20])
            raise CppCompileError(
                f"{options.cpp.cxx} failed (exit {proc.returncode}) compiling kernel {name!r} ({keep}):\n{first}\n"
                "This is a bug in ember.inductor's code generation; please report it with the source file. "
                "Meanwhile options.force_fallback can keep the offending op in ATen."
            )
        return cache.store(key, out)


def build_kernels(
    sources: list[tuple[str, str]], options: InductorOptions, stats: BuildStats | None = None
) -> dict[str, ctypes.CDLL]:
    """Compile (or load from cache) each ``(name, full_source)``; returns name -> library."""
    assert options.cache_dir is not None
    cache = KernelCache(options.cache_dir)
    keys = {name: cache_key(src, options) for name, src in sources}
    paths: dict[str, Path] = {}
    todo: list[tuple[str, str]] = []
    for name, src in sources:
        key = keys[name]
        if key in _LOADED:
            continue
        hit = cache.lookup(key)
        if hit is None:
            todo.append((name, src))
        else:
            paths[name] = hit
    if stats is not None:
        stats.compiled += len(todo)
        stats.cached += len(sources) - len(todo)
    if todo:
        workers = max(1, min(options.compile_threads, len(todo)))
        with ThreadPoolExecutor(workers) as pool:
            futures = {
                name: pool.submit(_compile_one, src, keys[name], cache, options, name)
                for name, src in todo
            }
            for name, fut in futures.items():
                paths[name] = fut.result()
    libs: dict[str, ctypes.CDLL] = {}
    for name, _src in sources:
        key = keys[name]
        if key not in _LOADED:
            _LOADED[key] = ctypes.CDLL(str(paths[name]))
        libs[name] = _LOADED[key]
    return libs
