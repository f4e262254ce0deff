"""The on-disk plan cache: a second backend instance skips tracing and still matches eager."""

from __future__ import annotations

import logging
import operator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ember.aotgrad import AotOptions, aot_autograd, aot_function, nop_compiler
from ember.aotgrad import api as aot_api


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.norm = nn.BatchNorm1d(32)  # training mode: running stats are mutated inputs
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.norm(self.fc1(x)))
        return self.fc2(h).softmax(-1), h.mean()


def _backend(cache: Path, **kw: Any) -> Any:
    return aot_autograd(nop_compiler, options=AotOptions(cache=True, cache_dir=str(cache), **kw))


def _graph() -> tuple[torch.fx.GraphModule, nn.Module]:
    torch.manual_seed(0)
    model = Block()
    return torch.fx.symbolic_trace(model), model


def _step(fn: Any, model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    for p in model.parameters():
        p.grad = None
    out, mean = fn(x)
    (out.square().sum() + mean).backward()
    assert model.norm.running_mean is not None
    return [out.detach(), mean.detach(), model.norm.running_mean.clone(),
            *[p.grad.clone() for p in model.parameters() if p.grad is not None]]


def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("traced again")

    monkeypatch.setattr(aot_api, "trace_graph", fail)


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / "aot").rglob("*.json")) if (cache / "aot").exists() else []


def test_training_plan_is_loaded_by_a_new_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(4, 16)
    gm, model = _graph()
    expected = _step(gm, model, x)  # eager, through the same module (running stats move)
    gm2, model2 = _graph()
    first = _backend(tmp_path)(gm2, [x])
    got_first = _step(first, model2, x)
    assert len(_entries(tmp_path)) == 1
    _no_tracing(monkeypatch)
    gm3, model3 = _graph()
    second = _backend(tmp_path)(gm3, [x])
    got = _step(second, model3, x)
    for e, a, b in zip(expected, got_first, got, strict=True):
        torch.testing.assert_close(a, e)
        torch.testing.assert_close(b, e)  # values, gradients and the written-back running mean


def test_inference_plan_is_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(4, 16)
    gm, model = _graph()
    model.eval()
    gm.eval()
    with torch.no_grad():
        expected = gm(x)
        _backend(tmp_path)(gm, [x])(x)
        _no_tracing(monkeypatch)
        got = _backend(tmp_path)(gm, [x])(x)
    torch.testing.assert_close(got, expected)


def test_new_signature_or_grad_mode_is_a_miss(tmp_path: Path) -> None:
    gm, _ = _graph()
    _backend(tmp_path)(gm, [torch.randn(4, 16)])(torch.randn(4, 16))
    _backend(tmp_path)(gm, [torch.randn(6, 16)])(torch.randn(6, 16))  # new batch size
    with torch.no_grad():
        _backend(tmp_path)(gm, [torch.randn(4, 16)])(torch.randn(4, 16))  # no joint graph
    assert len(_entries(tmp_path)) == 3


def test_damaged_entry_is_traced_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    x = torch.randn(4, 16)
    gm, _ = _graph()
    _backend(tmp_path)(gm, [x])(x)
    (entry,) = _entries(tmp_path)
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0x01
    entry.write_bytes(bytes(data))
    calls = []
    real = aot_api.trace_graph

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    with caplog.at_level(logging.WARNING, logger="ember.aotgrad"), pytest.MonkeyPatch.context() as mp:
        mp.setattr(aot_api, "trace_graph", counting)
        gm2, model2 = _graph()
        out = _step(_backend(tmp_path)(gm2, [x]), model2, x)
    assert calls and "corrupted or unreadable" in caplog.text
    gm3, model3 = _graph()
    for a, b in zip(out, _step(gm3, model3, x), strict=True):
        torch.testing.assert_close(a, b)


def test_off_unless_asked_and_for_plain_functions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    x = torch.randn(4, 16)
    gm, _ = _graph()
    aot_autograd(nop_compiler)(gm, [x])(x)  # default options: no cache
    f = aot_function(lambda a: a.sin() * 2, nop_compiler, options=AotOptions(cache=True))
    f(torch.randn(3, requires_grad=True))  # not an FX graph: nothing to key it by
    assert _entries(tmp_path) == []
    monkeypatch.setenv("EMBER_AOT_CACHE", "0")
    _backend(tmp_path)(gm, [x])(x)
    assert _entries(tmp_path) == []


def test_decompositions_and_partitioner_are_part_of_the_key() -> None:
    from ember.aotgrad import default_partition, plan_cache

    gm, _ = _graph()

    def gelu_a(x: torch.Tensor) -> torch.Tensor:
        return x * 0.5

    def gelu_b(x: torch.Tensor) -> torch.Tensor:
        return x * 0.25

    def key(table: dict[Any, Any], partitioner: Any = default_partition) -> str | None:
        return plan_cache.plan_key(gm, "call", plan_cache.table_fingerprint(table),
                                   plan_cache.fn_name(partitioner))

    gelu_b.__qualname__ = gelu_a.__qualname__  # only the body differs
    op = torch.ops.aten.gelu.default
    base = key({op: gelu_a})
    assert base is not None
    assert key({op: gelu_a}) == base
    assert key({op: gelu_b}) != base  # same name, another body
    assert key({}) != base
    assert key({op: gelu_a}, aot_api.min_cut_rematerialization_partition) != base


CHILD = """
import sys
import torch
from ember.aotgrad import AotOptions, aot_autograd, core_aten_decompositions, nop_compiler
from ember.aotgrad import api
traced = []
real = api.trace_graph
api.trace_graph = lambda *a, **k: traced.append(1) or real(*a, **k)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
gm = torch.fx.symbolic_trace(model)
x = torch.randn(4, 16)
backend = aot_autograd(nop_compiler, decompositions=core_aten_decompositions(),
                       options=AotOptions(cache=True, cache_dir=sys.argv[1]))
out = backend(gm, [x])(x)
out.sum().backward()
ref = model(x)
torch.testing.assert_close(out, ref)
print(len(traced))
"""


def test_a_second_process_loads_the_plan(tmp_path: Path) -> None:
    # The key must be the same in every process: decompositions with nested functions
    # (whose repr holds an address) once made each process miss.
    import subprocess
    import sys

    def run() -> str:
        proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    assert run() == "1"
    assert run() == "0"
    assert len(_entries(tmp_path)) == 1


def test_inference_plan_binds_the_live_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An inference graph reads the weights as constants: the entry names them, never stores them.
    from ember.aotgrad import aot_inference

    options = AotOptions(cache=True, cache_dir=str(tmp_path), fallback_to_eager=False)
    x = torch.randn(4, 16)
    gm, model = _graph()
    model.eval()
    gm.eval()
    with torch.no_grad():
        first = aot_inference(gm, [x], nop_compiler, None, options)(x)
        torch.testing.assert_close(first[0], model(x)[0])
    assert len(_entries(tmp_path)) == 1

    torch.manual_seed(1)
    other = Block().eval()  # same shapes, other weights
    other_gm = torch.fx.symbolic_trace(other)
    _no_tracing(monkeypatch)
    with torch.no_grad():
        again = aot_inference(other_gm, [x], nop_compiler, None, options)(x)
        want = other(x)
    torch.testing.assert_close(again[0], want[0])
    torch.testing.assert_close(again[1], want[1])



class Shift(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(x).clone() * ids.clone().float()


def _shift_graph(model: Shift) -> torch.fx.GraphModule:
    """``model`` with ``h[:, 0] = torch.tensor(0.1)`` and ``ids[:, 0] = torch.tensor(3)`` on
    the clones, as ember.dynamo captures them (``torch.tensor`` and ``operator.setitem``
    nodes; torch.fx cannot trace an item assignment): tracing makes a scalar tensor
    constant of each, which is no weight of the graph. (A plain ``0.1`` made one too
    before torch 2.15, which traces it to ``fill.Scalar``.)"""
    gm = torch.fx.symbolic_trace(model)
    for node in list(gm.graph.nodes):
        if node.op == "call_method" and node.target == "clone":
            value = 3 if node.args[0].op == "placeholder" else 0.1
            with gm.graph.inserting_after(node):
                const = gm.graph.call_function(torch.tensor, (value,))
            with gm.graph.inserting_after(const):
                gm.graph.call_function(operator.setitem, (node, (slice(None), 0), const))
    gm.recompile()
    return gm


def test_small_constants_made_while_tracing_are_stored_by_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    model = Shift()
    gm = _shift_graph(model)
    x, ids = torch.randn(4, 8), torch.randint(0, 9, (4, 8))

    def step(fn: Any) -> list[torch.Tensor]:
        for p in model.parameters():
            p.grad = None
        out = fn(x, ids)
        out.square().sum().backward()
        return [out.detach(), *[p.grad.clone() for p in model.parameters() if p.grad is not None]]

    expected = step(gm)  # eager
    assert bool((expected[0][:, 0] == 0.1 * 3).all())
    first = step(_backend(tmp_path)(gm, [x, ids]))
    assert len(_entries(tmp_path)) == 1
    assert '"values": {"' in _entries(tmp_path)[0].read_text()  # constants stored by value
    _no_tracing(monkeypatch)
    second = step(_backend(tmp_path)(gm, [x, ids]))
    for e, a, b in zip(expected, first, second, strict=True):
        torch.testing.assert_close(a, e)
        torch.testing.assert_close(b, e)


def test_required_decompositions_in_the_fingerprint_follow_torchs_table() -> None:
    """A lazy table's fingerprint holds the mutation decompositions aotgrad adds from torch's
    table; it is remembered between backend calls, and must change when that table does."""
    import torch._decomp as torch_decomp

    from ember.aotgrad import LazyDecompTable
    from ember.aotgrad.decompositions import mutation_decompositions, with_required

    lazy = LazyDecompTable(dict, lambda: "own")
    before = with_required(lazy).fingerprint()  # type: ignore[attr-defined]
    assert with_required(lazy).fingerprint() == before  # type: ignore[attr-defined]
    op, fn = next(iter(mutation_decompositions().items()))

    def other(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    table = torch_decomp.decomposition_table
    table[op] = other
    try:
        assert with_required(lazy).fingerprint() != before  # type: ignore[attr-defined]
    finally:
        table[op] = fn
    assert with_required(lazy).fingerprint() == before  # type: ignore[attr-defined]
