"""The on-disk kernel cache: hits across processes, corruption is detected and rebuilt."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ember.inductor.cache import KernelCache

SCRIPT = """
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from ember.inductor import compile_graph, InductorOptions
x = torch.randn(64)
gm = make_fx(lambda x: (x * 3.25).sin())(x)
c = compile_graph(gm, [x], InductorOptions(cache_dir={cache!r}, fallback_on_error=False))
assert torch.allclose(c(x), (x * 3.25).sin())
print(c.report.compiled, c.report.cached)
"""


def _run(cache: Path) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(cache=str(cache))], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_second_process_does_not_compile(tmp_path: Path) -> None:
    assert _run(tmp_path) == ["1", "0"]
    assert _run(tmp_path) == ["0", "1"]


@pytest.mark.slow
def test_truncated_library_is_rebuilt_not_loaded(tmp_path: Path) -> None:
    _run(tmp_path)
    (lib,) = tmp_path.rglob("*.so")
    lib.write_bytes(lib.read_bytes()[:100])
    assert _run(tmp_path) == ["1", "0"]
    assert _run(tmp_path) == ["0", "1"]


@pytest.mark.slow
def test_corrupted_sidecar_is_a_miss(tmp_path: Path) -> None:
    _run(tmp_path)
    (meta,) = (tmp_path / "kernels").rglob("*.json")
    meta.write_text("{not json")
    assert _run(tmp_path) == ["1", "0"]


def _stored(tmp_path: Path) -> tuple[KernelCache, Path]:
    cache = KernelCache(tmp_path)
    built = cache.workdir("ab" * 32) / "built.so"
    built.write_bytes(b"\x7fELF" + bytes(range(256)) * 8)
    return cache, cache.store("ab" * 32, built)


def test_cache_lookup_verifies_size_and_digest(tmp_path: Path) -> None:
    cache, lib = _stored(tmp_path)
    assert cache.lookup("ab" * 32) == lib
    data = bytearray(lib.read_bytes())
    data[100] ^= 0xFF  # same size, different content
    lib.write_bytes(bytes(data))
    assert cache.lookup("ab" * 32) is None
    assert not lib.exists()  # the corrupted file is removed so it gets rebuilt


def test_cache_lookup_rejects_truncation_and_bad_sidecar(tmp_path: Path) -> None:
    cache, lib = _stored(tmp_path)
    lib.write_bytes(lib.read_bytes()[:10])
    assert cache.lookup("ab" * 32) is None
    cache, lib = _stored(tmp_path)
    lib.with_suffix(".json").write_text("{not json")
    assert cache.lookup("ab" * 32) is None


def test_kernel_key_names_the_host_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # -march=native code built on one CPU must not load on another sharing the cache
    from ember.inductor import cpp_build
    from ember.inductor.options import InductorOptions

    opts = InductorOptions()
    here = cpp_build.cache_key("int x;", opts)
    assert cpp_build.cache_key("int x;", opts) == here
    monkeypatch.setattr(cpp_build, "host_cpu", lambda: "another cpu")
    assert cpp_build.cache_key("int x;", opts) != here
