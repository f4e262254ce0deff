"""Golden files: every later ember-ir must keep loading and running them.

The files under integration_tests/contracts/ were written once: format 1.0 by
contracts/make_format_1_0.py, graph format 1.1 by contracts/make_graph_1_1.py, guard
format 2.0 by contracts/make_guards_2_0.py.
If this test fails, the reader broke the contract; fix the reader, never the files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ember.ir import (
    GRAPH_VERSION,
    GUARDS_VERSION,
    DictEntry,
    DictItem,
    Global,
    GuardKind,
    GuardSet,
    Local,
    Size,
    Stride,
    TensorMeta,
    decode_value,
    load,
    loads,
    parse_source,
    to_fx,
)

CONTRACTS = Path(__file__).parent / "contracts"


def test_reader_majors_have_golden_files() -> None:
    # A new MAJOR means new golden files beside these, and a reader that still reads these.
    assert GRAPH_VERSION[0] == 1 and GUARDS_VERSION[0] == 3
    assert (CONTRACTS / "guards_1.0.json").exists() and (CONTRACTS / "guards_2.0.json").exists()
    assert (CONTRACTS / "guards_2.1.json").exists()
    assert (CONTRACTS / "guards_3.0.json").exists()
    # and the newest version each writes has its golden file
    newest_graph = f"{GRAPH_VERSION[0]}.{GRAPH_VERSION[1]}"
    assert list(CONTRACTS.glob(f"graph_*_{newest_graph}")), f"no golden file for graph format {newest_graph}"
    assert (CONTRACTS / f"guards_{GUARDS_VERSION[0]}.{GUARDS_VERSION[1]}.json").exists()


def test_guards_2_0_golden() -> None:
    text = (CONTRACTS / "guards_2.0.json").read_text()
    assert json.loads(text)["version"] == [2, 0]
    gs = GuardSet.loads(text, file="guards_2.0.json")
    by_source = {g.source.expr(): g for g in gs.guards if g.source is not None}
    silu = by_source["dict.__getitem__(G['ACT2FN'], 'silu')"]
    assert silu.source == DictItem(Global("ACT2FN"), "silu") and silu.kind is GuardKind.ID_MATCH
    deep = parse_source("dict.__getitem__(L['self'].acts, 'gelu')[1]['approximate']")
    assert decode_value(by_source[deep.expr()].payload["value"]) == "tanh"
    assert GuardSet.loads(gs.dumps()) == gs and gs.dumps() == text


def test_guards_2_1_golden() -> None:
    text = (CONTRACTS / "guards_2.1.json").read_text()
    assert json.loads(text)["version"] == [2, 1]
    gs = GuardSet.loads(text, file="guards_2.1.json")
    by_source = {(g.source.expr(), g.kind): g for g in gs.guards if g.source is not None}
    key = by_source[("list(dict.keys(G['_BASIC_TYPE_VALIDATORS']))[1]", GuardKind.ID_MATCH)]
    assert key.source == DictEntry(Global("_BASIC_TYPE_VALIDATORS"), 1, "keys")
    names = by_source[("G['SUPPORTED']", GuardKind.EQUALS_MATCH)]
    assert decode_value(names.payload["value"]) == {"relu", "gelu"}
    assert GuardSet.loads(gs.dumps()) == gs and gs.dumps() == text


def test_guards_3_0_golden() -> None:
    text = (CONTRACTS / "guards_3.0.json").read_text()
    assert json.loads(text)["version"] == [3, 0]
    gs = GuardSet.loads(text, file="guards_3.0.json")
    (alias,) = [g for g in gs.guards if g.kind is GuardKind.NO_ALIASING]
    assert alias.source is None and alias.payload["written"] == [1]
    assert [parse_source(s) for s in alias.payload["sources"]] == [
        parse_source("L['x']"), DictItem(Local("cache"), "k")]
    assert GuardSet.loads(gs.dumps()) == gs and gs.dumps() == text


def test_guards_1_0_golden() -> None:
    text = (CONTRACTS / "guards_1.0.json").read_text()
    assert json.loads(text)["version"] == [1, 0]
    gs = GuardSet.loads(text, file="guards_1.0.json")
    # every kind format 1.0 has (NO_ALIASING is new in 3.0)
    assert {g.kind for g in gs.guards} == set(GuardKind) - {GuardKind.NO_ALIASING}
    by_source = {g.source.expr(): g for g in gs.guards if g.source is not None}
    x = by_source["L['x']"]
    assert x.kind is GuardKind.TENSOR_MATCH
    assert x.payload["sizes"] == [None, 8] and x.payload["strides"] == [8, 1] and x.payload["dtype"] == "float32"
    assert decode_value(by_source["L['cfg']['mode']"].payload["value"]) == ("fast", 0.5, None)
    assert by_source["L['x'].size()[0]"].source == Size(Local("x"), 0)
    assert by_source["L['x'].stride()[1]"].source == Stride(Local("x"), 1)
    assert parse_source("L['self'].layers[2].bias") in {g.source for g in gs.guards}
    sourceless = {g.kind: g.payload for g in gs.guards if g.source is None}
    assert sourceless[GuardKind.SHAPE_EXPR]["expr"] == "Eq(Mod(s0*s1, 8), 0)"
    assert sourceless[GuardKind.GLOBAL_STATE]["grad_enabled"] is True
    assert gs.shape_relations == ("s0 >= 2", "Ne(s1, 1)")
    assert GuardSet.loads(gs.dumps()) == gs


def test_torch_level_graph_1_0_golden_runs() -> None:
    directory = CONTRACTS / "graph_torch_1.0"
    ir = load(directory)
    assert ir.version == (1, 0) and ir.dialect == "torch"
    assert set(ir.modules) == {"conv", "bn", "fc"}
    assert ir.modules["bn"].cls == "torch.nn.BatchNorm2d" and not ir.modules["bn"].training
    io = load_file(str(directory / "io.safetensors"))
    gm = to_fx(ir)
    torch.testing.assert_close(gm(io["input"]), io["output"])


def test_aten_level_graph_1_0_golden_runs_at_any_size() -> None:
    directory = CONTRACTS / "graph_aten_1.0"
    ir = load(directory)
    assert ir.version == (1, 0) and ir.dialect == "aten"
    x_meta = ir.placeholders[0].meta
    assert isinstance(x_meta, TensorMeta) and all(isinstance(d, str) for d in x_meta.shape)
    io = load_file(str(directory / "io.safetensors"))
    gm = to_fx(ir)
    out0, out1 = gm(io["x"], io["w"])
    torch.testing.assert_close(out0, io["out0"])
    torch.testing.assert_close(out1, io["out1"])
    # Symbolic sizes: the same graph runs at another size and matches eager.
    x, w = torch.randn(3, 5), torch.randn(5, 2)
    h = torch.relu(x @ w) * 2.0
    got0, got1 = gm(x, w)
    torch.testing.assert_close(got0, h.sum(dim=0))
    torch.testing.assert_close(got1, h.view(-1)[:3])


def test_aten_level_graph_1_1_golden_runs_and_compiles(tmp_path: Path) -> None:
    # 1.1: a node's optional ``recompute`` region. Every later reader loads it, and
    # ember.inductor compiles it at the size it was written at and at another.
    directory = CONTRACTS / "graph_aten_1.1"
    graph = load(directory)
    assert graph.version == (1, 1) and graph.dialect == "aten"
    assert {n.name: n.recompute for n in graph.nodes if n.recompute is not None} == {"mm": 1, "gelu": 1}
    io = load_file(str(directory / "io.safetensors"))
    torch.testing.assert_close(to_fx(graph)(io["x"], io["w"]), io["out"])
    inductor = pytest.importorskip("ember.inductor")
    options = inductor.InductorOptions(cache_dir=str(tmp_path / "cache"), fallback_on_error=False)
    for x, w in ((io["x"], io["w"]), (torch.randn(7, 3), torch.randn(3, 2))):
        compiled = inductor.compile_graph(graph, [x, w], options)
        h = torch.nn.functional.gelu(x @ w)
        torch.testing.assert_close(compiled(x, w), (h * torch.sigmoid(h)).sum(-1))


def test_golden_text_reads_the_same_through_loads() -> None:
    for name in ("graph_torch_1.0", "graph_aten_1.0", "graph_aten_1.1"):
        text = (CONTRACTS / name / "graph.json").read_text()
        assert loads(text) == load(CONTRACTS / name)
