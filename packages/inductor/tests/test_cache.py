"""The on-disk kernel cache: hits across processes, corruption is detected and rebuilt."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_truncated_library_is_rebuilt_not_loaded(tmp_path: Path) -> None:
    _run(tmp_path)
    (lib,) = tmp_path.rglob("*.so")
    lib.write_bytes(lib.read_bytes()[:100])
    assert _run(tmp_path) == ["1", "0"]
    assert _run(tmp_path) == ["0", "1"]


def test_corrupted_sidecar_is_a_miss(tmp_path: Path) -> None:
    _run(tmp_path)
    (meta,) = tmp_path.rglob("*.json")
    meta.write_text("{not json")
    assert _run(tmp_path) == ["1", "0"]
