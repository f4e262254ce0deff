"""Every malformed input is a FormatError naming the file, node and field, never a raw KeyError."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx
from safetensors.torch import load_file, save_file
from torch import nn

from ember.ir import (
    FormatError,
    GraphIR,
    UnsupportedGraphError,
    dumps,
    from_fx,
    load,
    loads,
    save,
    to_fx,
)


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.register_buffer("offset", torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)).sum(dim=0) + self.offset


def small_ir() -> GraphIR:
    torch.manual_seed(0)
    return from_fx(torch.fx.symbolic_trace(Small()), [torch.randn(2, 4)])


def small_json() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(dumps(small_ir()))
    return data


def _node(data: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(n for n in data["nodes"] if n["name"] == name)
    return found


def _expect(data: object, message: str, *, file: str = "g.json") -> FormatError:
    text = data if isinstance(data, (str, bytes)) else json.dumps(data)
    with pytest.raises(FormatError, match=message) as info:
        loads(text, file=file)
    assert str(info.value).startswith(file), "the message must start with the file name"
    return info.value


def test_names_in_sample() -> None:
    assert [n["name"] for n in small_json()["nodes"]] == ["x", "lin", "relu", "sum_1", "offset", "add", "output"]


# --- text that is not a graph IR ----------------------------------------------


def test_truncated_file() -> None:
    text = dumps(small_ir())
    _expect(text[: len(text) // 2], "not valid JSON.*truncated")


@pytest.mark.parametrize("text", ["", "hello", "{'single': 'quotes'}", "[1, 2]", "null"])
def test_not_json_or_not_an_object(text: str) -> None:
    _expect(text, "not valid JSON|must be a JSON object")


def test_binary_garbage() -> None:
    _expect(b"\xff\xfe\x00garbage", "not UTF-8|not valid JSON")


# --- header --------------------------------------------------------------------


def test_newer_major_names_both_versions() -> None:
    data = small_json()
    data["version"] = [2, 1]
    err = _expect(data, r"version 2\.1 is a newer major version than this reader supports \(1\.1")
    assert err.field == "version"


def test_older_major_is_rejected_too() -> None:
    data = small_json()
    data["version"] = [0, 9]
    _expect(data, r"version 0\.9 is a older major|0\.9.*1\.1")


def test_newer_minor_with_unknown_optional_fields_loads() -> None:
    data = small_json()
    data["version"] = [1, 9]
    data["added_in_1_9"] = True
    _node(data, "relu")["added_in_1_9"] = {"$tuple": []}
    ir = loads(json.dumps(data))
    assert ir.version == (1, 9)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("format"), "expected format 'ember.graph', got None"),
        (lambda d: d.update(format="ember.guards"), "expected format 'ember.graph'"),
        (lambda d: d.update(version="1.0"), "MAJOR, MINOR"),
        (lambda d: d.update(version=[1]), "MAJOR, MINOR"),
        (lambda d: d.pop("dialect"), "missing field 'dialect'"),
        (lambda d: d.update(dialect="tosa"), "dialect must be one of"),
        (lambda d: d.pop("nodes"), "missing field 'nodes'"),
        (lambda d: d.update(nodes={}), "field 'nodes' must be a list"),
        (lambda d: d.pop("params"), "missing field 'params'"),
        (lambda d: d.update(modules=[]), "field 'modules' must be an object"),
    ],
)
def test_bad_top_level_fields(mutate: Callable[[dict[str, Any]], object], message: str) -> None:
    data = small_json()
    mutate(data)
    _expect(data, message)


# --- nodes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "mutate", "message"),
    [
        ("relu", lambda n: n.pop("target"), "node 'relu', field 'target': node is missing field 'target'"),
        ("relu", lambda n: n.pop("args"), "node 'relu', field 'args': node is missing field 'args'"),
        ("relu", lambda n: n.update(args={"a": 1}), "node 'relu', field 'args': node field 'args' must be a list"),
        ("relu", lambda n: n.update(kwargs=[]), "node 'relu', field 'kwargs'"),
        ("relu", lambda n: n.update(op="call_evil"), "node 'relu', field 'op': unknown op 'call_evil'"),
        ("relu", lambda n: n.update(target="os.system"), "node 'relu', field 'target': unknown op target 'os.system'"),
        ("relu", lambda n: n.update(target="torch.save"), "node 'relu', field 'target': unknown op target 'torch.save'"),
        ("relu", lambda n: n.update(target="aten::nope.default"), "node 'relu', field 'target': unknown op target 'aten::nope.default'"),
        ("relu", lambda n: n.update(target="evil::op.default"), "namespace 'evil'"),
        ("relu", lambda n: n.update(target=7), "node 'relu', field 'target': node field 'target' must be a string"),
        ("sum_1", lambda n: n.update(target="Tensor.__reduce_ex__"), "node 'sum_1', field 'target': unknown method target"),
        ("sum_1", lambda n: n.update(target="sum"), "expected 'Tensor.<method>'"),
        ("lin", lambda n: n.update(target="ghost"), "node 'lin', field 'target': call_module target 'ghost'"),
        ("offset", lambda n: n.update(target="nothing.here"), "node 'offset', field 'target': get_attr target"),
        ("relu", lambda n: n.update(args=[{"$node": "ghost"}]), "node 'relu', field 'args': reference to undefined node 'ghost'"),
        ("relu", lambda n: n.update(args=[{"$node": "add"}]), "node 'relu', field 'args': reference to undefined node 'add'"),
        ("relu", lambda n: n.update(kwargs={"x": {"$node": "ghost"}}), "reference to undefined node 'ghost'"),
        ("relu", lambda n: n.update(args=[{"$mystery": 1}]), "node 'relu', field 'args': unknown value tag"),
        ("relu", lambda n: n.update(name="lin"), "node 'lin', field 'name': duplicate node name"),
        ("relu", lambda n: n.update(name="not a name"), "field 'name': node name must be an identifier"),
        ("relu", lambda n: n.update(name=3), "field 'name'"),
        ("relu", lambda n: n.update(meta={"tensor": {"dtype": "float32"}}), "node 'relu', field 'meta.shape'.*missing field 'shape'"),
        ("relu", lambda n: n["meta"]["tensor"].update(dtype="float33"), "node 'relu', field 'meta': unknown dtype 'float33'"),
        ("relu", lambda n: n["meta"]["tensor"].update(shape=[2.5, 3]), "node 'relu', field 'meta.shape': a size must be"),
        ("relu", lambda n: n["meta"]["tensor"].update(shape=["s0 +", 3]), "node 'relu', field 'meta': bad size expression"),
        ("relu", lambda n: n["meta"]["tensor"].update(requires_grad="yes"), "field 'meta.requires_grad'.*true or false"),
        ("relu", lambda n: n["meta"]["tensor"].update(stride=[1]), "shape has 2 dims but stride has 1"),
        ("relu", lambda n: n.update(meta={"blob": 1}), "unknown metadata kind 'blob'"),
        ("relu", lambda n: n.update(target="getattr", args=[{"$node": "x"}, "__class__"]), "getattr needs a public attribute name"),
    ],
)
def test_bad_nodes(node: str, mutate: Callable[[dict[str, Any]], object], message: str) -> None:
    data = small_json()
    mutate(_node(data, node))
    _expect(data, message)


def test_bad_node_message_shows_neighbours() -> None:
    data = small_json()
    _node(data, "relu")["args"] = [{"$node": "ghost"}]
    err = _expect(data, "ghost")
    assert ">> %relu" in str(err) and "%lin" in str(err) and "%sum_1" in str(err)


def test_output_must_be_last_and_present() -> None:
    data = small_json()
    data["nodes"] = data["nodes"][:-1]
    _expect(data, "must end with exactly one 'output' node")
    data = small_json()
    data["nodes"].insert(1, dict(data["nodes"][-1], name="early"))
    _expect(data, "'output' must be the last node")


def test_aten_dialect_rejects_torch_level_nodes() -> None:
    data = small_json()
    data["dialect"] = "aten"
    _expect(data, "not allowed in the aten dialect")


# --- modules and tensor tables --------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda m: m.update({"class": "builtins.object"}), "node 'lin', field 'class': unknown module class 'builtins.object'"),
        (lambda m: m.update({"class": "torch.nn.functional.relu"}), "unknown module class"),
        (lambda m: m.update({"class": "torch.nn.modules.linear.os"}), "unknown module class"),
        (lambda m: m.pop("training"), "node 'lin', field 'training'"),
        (lambda m: m["params"].update(weight="nowhere.weight"), "refers to param 'nowhere.weight'"),
        (lambda m: m["params"].update(weight=3), "tensor name or null"),
        (lambda m: m["attrs"].update(in_features={"$bogus": [1]}), "unknown value tag '\\$bogus'"),
        (lambda m: m.update(function_attrs={"act": "os.system"}), "node 'lin', field 'function_attrs.act': unknown op target 'os.system'"),
        (lambda m: m.update(function_attrs={"act": 3}), "must be a target string"),
        (lambda m: m.update(children={"sub": {"class": "builtins.object"}}), "node 'lin.sub'"),
    ],
)
def test_bad_modules(mutate: Callable[[dict[str, Any]], object], message: str) -> None:
    data = small_json()
    mutate(data["modules"]["lin"])
    _expect(data, message)


def test_bad_tensor_table_entry() -> None:
    data = small_json()
    data["buffers"]["offset"]["dtype"] = 5
    _expect(data, "field 'buffers.offset.dtype'")


# --- weights on disk ------------------------------------------------------------


def test_parameter_missing_from_weights_file(tmp_path: Path) -> None:
    directory = save(small_ir(), tmp_path / "g")
    weights = directory / "weights.safetensors"
    tensors = load_file(str(weights))
    del tensors["lin.weight"]
    save_file(tensors, str(weights))
    with pytest.raises(FormatError, match="field 'lin.weight': tensor 'lin.weight' listed in graph.json is missing") as info:
        load(directory)
    assert str(info.value).startswith(str(weights))


def test_weights_with_wrong_dtype_or_extra_tensor(tmp_path: Path) -> None:
    directory = save(small_ir(), tmp_path / "g")
    weights = directory / "weights.safetensors"
    tensors = load_file(str(weights))
    tensors["lin.bias"] = tensors["lin.bias"].double()
    save_file(tensors, str(weights))
    with pytest.raises(FormatError, match="'lin.bias' is float64\\[3\\] in the weights file but graph.json says float32\\[3\\]"):
        load(directory)
    tensors["lin.bias"] = tensors["lin.bias"].float()
    tensors["stowaway"] = torch.zeros(1)
    save_file(tensors, str(weights))
    with pytest.raises(FormatError, match="tensors the graph does not list: \\['stowaway'\\]"):
        load(directory)


def test_truncated_or_missing_weights_file(tmp_path: Path) -> None:
    directory = save(small_ir(), tmp_path / "g")
    weights = directory / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:40])
    with pytest.raises(FormatError, match="cannot read the weights") as info:
        load(directory)
    assert str(weights) in str(info.value)
    weights.unlink()
    with pytest.raises(FormatError, match="cannot read the weights"):
        load(directory)


def test_missing_graph_file(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="graph.json: cannot read the graph IR"):
        load(tmp_path / "nothing")


def test_truncated_graph_file_on_disk(tmp_path: Path) -> None:
    directory = save(small_ir(), tmp_path / "g")
    graph = directory / "graph.json"
    graph.write_text(graph.read_text()[:100])
    with pytest.raises(FormatError, match="truncated") as info:
        load(directory)
    assert str(info.value).startswith(str(graph))


def test_to_fx_without_weights_is_a_clear_error() -> None:
    ir = loads(dumps(small_ir()))
    with pytest.raises(FormatError, match="field 'tensors': weights missing for 3 tensor\\(s\\), first 'lin.bias'"):
        to_fx(ir)
    with pytest.raises(FormatError, match="cannot save: no data for 3 tensor"):
        save(ir, "/nonexistent/never-written")


def test_weight_shape_mismatch_in_memory() -> None:
    ir = small_ir()
    bad = dict(ir.tensors)
    bad["offset"] = torch.ones(4)
    with pytest.raises(FormatError, match="tensor 'offset' is float32\\[4\\] but its metadata says float32\\[3\\]"):
        ir.with_tensors(bad).verify()


# --- graphs from_fx cannot represent ----------------------------------------------


class Custom(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def my_helper(x: torch.Tensor) -> torch.Tensor:
    return x + 1


def test_user_module_in_call_module_is_unsupported() -> None:
    class Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
            return isinstance(m, Custom) or super().is_leaf_module(m, qualname)

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Custom()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)

    outer = Outer()
    gm = torch.fx.GraphModule(outer, Tracer().trace(outer))
    with pytest.raises(UnsupportedGraphError, match="node 'inner', field 'target': call_module on .*Custom"):
        from_fx(gm)


def test_user_function_target_is_unsupported() -> None:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_function(my_helper, (x,)))
    with pytest.raises(UnsupportedGraphError, match="node 'my_helper', field 'target': call_function target .*my_helper is not in the ember.ir allow-list"):
        from_fx(torch.fx.GraphModule(nn.Module(), g))


def test_unencodable_argument_is_unsupported() -> None:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_function(torch.add, (x, {1, 2})))
    with pytest.raises(FormatError, match="node 'add', field 'args': cannot encode a value of type builtins.set"):
        dumps(from_fx(torch.fx.GraphModule(nn.Module(), g)))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["buffers"].update({"a..b": d["buffers"]["offset"]}), "'a..b' is not a dotted attribute path"),
        (lambda d: d["constants"].update({"__class__": d["buffers"]["offset"]}), "'__class__' is not a dotted attribute path"),
        (lambda d: d["constants"].update({"offset": d["buffers"]["offset"]}), "'offset' is both a buffers and a constants entry"),
        (lambda d: d["constants"].update({"offset.inner": d["buffers"]["offset"]}), "'offset.inner' is nested under tensor 'offset'"),
    ],
)
def test_bad_tensor_paths(mutate: Callable[[dict[str, Any]], object], message: str) -> None:
    data = small_json()
    mutate(data)
    _expect(data, message)


def test_unsupported_weight_dtype_is_a_format_error(tmp_path: Path) -> None:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_function(torch.add, (x, g.get_attr("c"))))
    root = nn.Module()
    root.register_buffer("c", torch.ones(2, dtype=torch.complex128))
    ir = from_fx(torch.fx.GraphModule(root, g))
    with pytest.raises(FormatError, match="safetensors cannot write these weights.*complex128"):
        save(ir, tmp_path / "g")
    assert not (tmp_path / "g" / "graph.json").exists()


def test_sparse_values_get_no_metadata_rather_than_wrong_metadata() -> None:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(g.call_method("to_sparse", (x,)))
    ir = from_fx(torch.fx.GraphModule(nn.Module(), g), [torch.eye(3)])
    assert ir.node("to_sparse").meta is None
    assert ir.node("x").meta is not None


def test_a_verified_graph_is_not_walked_again_but_an_edited_copy_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """``loads`` verifies; ``to_fx`` of that graph (or of it with weights attached) does not walk
    its nodes a second time. A graph made from other nodes is verified in full."""
    import dataclasses

    ir = loads(dumps(small_ir()))
    weights = small_ir().tensors
    walked: list[str] = []
    check = GraphIR._verify_node

    def counting(self: GraphIR, node: Any, seen: set[str], *, is_last: bool) -> None:
        walked.append(node.name)
        check(self, node, seen, is_last=is_last)

    monkeypatch.setattr(GraphIR, "_verify_node", counting)
    to_fx(ir.with_tensors(weights))
    assert walked == []
    bad = dataclasses.replace(ir, nodes=ir.nodes[:-1])  # no output node
    with pytest.raises(FormatError, match="must end with"):
        bad.verify()
    relu = next(n for n in ir.nodes if n.op == "call_function")
    renamed = dataclasses.replace(ir, nodes=tuple(
        dataclasses.replace(n, target="aten.no_such_op.default") if n is relu else n for n in ir.nodes))
    with pytest.raises(FormatError):
        to_fx(renamed.with_tensors(weights))
    assert relu.name in walked
