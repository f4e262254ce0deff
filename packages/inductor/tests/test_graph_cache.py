"""The on-disk graph cache: a hit skips lowering, runs the same code, and is never stale or corrupt."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ember.inductor import CompiledGraph, CppOptions, InductorOptions, compile_graph, graph_cache
from ember.inductor import graph as graph_module


def _fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # a kernel, an extern call (mm, an ATen op among the wrapper's constants) and a reduction
    return torch.softmax((x.sin() @ w) * 0.5, dim=-1).sum(0)


def _compile(fn: Any, inputs: list[torch.Tensor], cache: Path, **opts: Any) -> CompiledGraph:
    gm = make_fx(fn)(*inputs)
    c = compile_graph(gm, inputs, InductorOptions(cache_dir=str(cache), fallback_on_error=False, **opts))
    assert isinstance(c, CompiledGraph)
    return c


def _inputs() -> list[torch.Tensor]:
    return [torch.randn(8, 16), torch.randn(16, 4)]


def _no_lowering(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the graph was lowered again")

    monkeypatch.setattr(graph_module.GraphLowering, "run", fail)


def test_second_compile_is_a_hit_that_skips_lowering(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = _inputs()
    first = _compile(_fn, inputs, tmp_path)
    assert not first.report.graph_cached
    assert first.report.extern_calls >= 1
    _no_lowering(monkeypatch)
    second = _compile(_fn, inputs, tmp_path)
    assert second.report.graph_cached
    assert second.report.compiled == 0
    assert second.report.wrapper_source == first.report.wrapper_source
    assert second.report.kernel_sources == first.report.kernel_sources
    assert (second.report.kernels, second.report.extern_calls) == (first.report.kernels, first.report.extern_calls)
    new = _inputs()
    torch.testing.assert_close(second(*new), _fn(*new))


def test_new_strides_options_or_graph_are_misses(tmp_path: Path) -> None:
    inputs = _inputs()
    _compile(_fn, inputs, tmp_path)
    x, w = inputs
    assert not _compile(_fn, [x, w.t().contiguous().t()], tmp_path).report.graph_cached  # strides
    assert not _compile(_fn, inputs, tmp_path, cpp=CppOptions(column_reductions=False)).report.graph_cached
    assert not _compile(lambda x, w: _fn(x, w) + 1, inputs, tmp_path).report.graph_cached
    assert not _compile(_fn, [torch.randn(9, 16), w], tmp_path).report.graph_cached  # sizes
    assert _compile(_fn, inputs, tmp_path, cpp=CppOptions(column_reductions=False)).report.graph_cached


def test_constants_are_read_from_the_module_not_the_cache(tmp_path: Path) -> None:
    x = torch.randn(6, 5)
    scale = torch.nn.Parameter(torch.randn(5), requires_grad=False)

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = scale

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x * self.scale).exp()

    def compile_module() -> CompiledGraph:
        gm = make_fx(M())(x)  # the parameter stays a get_attr constant
        assert any(n.op == "get_attr" for n in gm.graph.nodes)
        c = compile_graph(gm, [x], InductorOptions(cache_dir=str(tmp_path), fallback_on_error=False))
        assert isinstance(c, CompiledGraph)
        return c

    assert not compile_module().report.graph_cached
    with torch.no_grad():
        scale.copy_(torch.randn(5))  # new data, same layout: same key
    hit = compile_module()
    assert hit.report.graph_cached
    torch.testing.assert_close(hit(x), (x * scale).exp())
    assert not list(tmp_path.rglob("*.safetensors"))  # no tensor data is written


def test_corrupted_entry_is_rebuilt_not_loaded(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    inputs = _inputs()
    _compile(_fn, inputs, tmp_path)
    (entry,) = (tmp_path / "graphs").rglob("*.json")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit in the wrapper source
    entry.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="ember.inductor"):
        again = _compile(_fn, inputs, tmp_path)
    assert "corrupted or unreadable" in caplog.text
    assert not again.report.graph_cached
    torch.testing.assert_close(again(*inputs), _fn(*inputs))
    entry.write_bytes(entry.read_bytes()[:50])  # truncated
    assert not _compile(_fn, inputs, tmp_path).report.graph_cached
    assert _compile(_fn, inputs, tmp_path).report.graph_cached  # the rebuilt entry is good


def test_outside_lowering_changes_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ember.inductor.lowering import LOWERINGS

    gm = make_fx(_fn)(*_inputs())
    key = graph_cache.graph_key(gm, _inputs(), InductorOptions().cache_key_fields())
    assert key is not None

    def my_lowering(*args: Any) -> Any:  # a user's lowering (never called here)
        raise NotImplementedError

    monkeypatch.setitem(LOWERINGS, torch.ops.aten.sin.default, my_lowering)
    assert graph_cache.graph_key(gm, _inputs(), InductorOptions().cache_key_fields()) != key


def test_graph_cache_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = _inputs()
    _compile(_fn, inputs, tmp_path, graph_cache=False)
    assert not (tmp_path / "graphs").exists()
    _compile(_fn, inputs, tmp_path)
    monkeypatch.setenv("EMBER_GRAPH_CACHE", "0")
    assert not _compile(_fn, inputs, tmp_path).report.graph_cached


SCRIPT = """
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from ember.inductor import compile_graph, InductorOptions
torch.manual_seed(0)
x, w = torch.randn(8, 16), torch.randn(16, 4)
f = lambda x, w: torch.softmax((x.sin() @ w) * 0.5, dim=-1).sum(0)
gm = make_fx(f)(x, w)
c = compile_graph(gm, [x, w], InductorOptions(cache_dir={cache!r}, fallback_on_error=False))
torch.testing.assert_close(c(x, w), f(x, w))
print(c.report.graph_cached, c.report.compiled)
"""


def test_second_process_loads_the_graph(tmp_path: Path) -> None:
    def run() -> list[str]:
        proc = subprocess.run(
            [sys.executable, "-c", SCRIPT.format(cache=str(tmp_path))], capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    assert run()[0] == "False"
    assert run() == ["True", "0"]
