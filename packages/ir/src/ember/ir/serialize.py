"""GraphIR <-> JSON text (``dumps`` / ``loads``).

The text is stable: keys sorted, nodes in graph order, names as in the graph.
Weights are not in the text, only their metadata; :mod:`ember.ir.weights`
stores the data beside it. Every problem is a :class:`FormatError` naming the
file, the node and the field; a half-built graph is never returned.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TypeVar, cast

from ember.ir.errors import FormatError
from ember.ir.graph import (
    DIALECTS,
    OPS,
    GraphIR,
    Meta,
    ModuleSpec,
    Node,
    PyTreeCodegen,
    ScalarMeta,
    TensorMeta,
)
from ember.ir.values import JSON, decode_value, dtype_name, encode_value, parse_device, parse_dtype
from ember.ir.versioning import GRAPH_FORMAT, GRAPH_VERSION, check_header, parse_json

T = TypeVar("T")


# --- writing -------------------------------------------------------------------


def tensor_meta_json(meta: TensorMeta) -> dict[str, JSON]:
    return {
        "dtype": dtype_name(meta.dtype),
        "shape": list(meta.shape),
        "stride": list(meta.stride),
        "device": str(meta.device),
        "requires_grad": meta.requires_grad,
    }


def meta_json(meta: Meta) -> JSON:
    if meta is None:
        return None
    if isinstance(meta, tuple):
        return {"tuple": [meta_json(m) for m in meta]}
    if isinstance(meta, ScalarMeta):
        return {"scalar": {"type": meta.type, "value": encode_value(meta.value)}}
    return {"tensor": tensor_meta_json(meta)}


def _node_json(node: Node) -> dict[str, JSON]:
    out: dict[str, JSON] = {
        "name": node.name,
        "op": node.op,
        "target": node.target,
        "args": [encode_value(a, field="args") for a in node.args],
        "kwargs": {k: encode_value(v, field="kwargs") for k, v in node.kwargs.items()},
        "meta": meta_json(node.meta),
    }
    if node.stack_trace is not None:
        out["stack_trace"] = node.stack_trace
    if node.recompute is not None:
        out["recompute"] = node.recompute
    return out


def _module_json(spec: ModuleSpec) -> dict[str, JSON]:
    return {
        "class": spec.cls,
        "training": spec.training,
        "attrs": {k: encode_value(v, field=f"attrs.{k}") for k, v in spec.attrs.items()},
        "function_attrs": dict(spec.function_attrs),
        "params": dict(spec.params),
        "buffers": dict(spec.buffers),
        "non_persistent_buffers": list(spec.non_persistent_buffers),
        "children": {k: _module_json(c) for k, c in spec.children.items()},
    }


def to_json(ir: GraphIR) -> dict[str, JSON]:
    """The JSON object for ``ir`` (without weights)."""
    nodes: list[JSON] = []
    for node in ir.nodes:
        try:
            nodes.append(_node_json(node))
        except FormatError as e:
            raise e.with_context(node=node.name) from None
    codegen: JSON = None
    if ir.codegen is not None:
        codegen = {
            "orig_args": list(ir.codegen.orig_args),
            "in_spec": ir.codegen.in_spec,
            "out_spec": ir.codegen.out_spec,
        }
    return {
        "format": GRAPH_FORMAT,
        "version": list(GRAPH_VERSION),
        "dialect": ir.dialect,
        "nodes": nodes,
        "params": {k: tensor_meta_json(m) for k, m in ir.params.items()},
        "buffers": {k: tensor_meta_json(m) for k, m in ir.buffers.items()},
        "constants": {k: tensor_meta_json(m) for k, m in ir.constants.items()},
        "modules": {k: _module_json(s) for k, s in ir.modules.items()},
        "codegen": codegen,
    }


def _compact(value: JSON) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=False, separators=(", ", ": "))


def dumps(ir: GraphIR) -> str:
    """Stable JSON text for ``ir``; verifies first. Weights are not included.

    Keys are sorted and nodes keep graph order. The layout puts one node, one
    tensor and one module per line, so files diff well and are written with
    the C JSON encoder.
    """
    ir.verify()
    data = to_json(ir)
    lines = ["{"]
    keys = sorted(data)
    for i, key in enumerate(keys):
        value = data[key]
        comma = "," if i < len(keys) - 1 else ""
        if key == "nodes" and isinstance(value, list) and value:
            body = ",\n".join(f"  {_compact(n)}" for n in value)
            lines.append(f' "nodes": [\n{body}\n ]{comma}')
        elif isinstance(value, dict) and value and key != "codegen":
            body = ",\n".join(f"  {_compact(k)}: {_compact(value[k])}" for k in sorted(value))
            lines.append(f" {_compact(key)}: {{\n{body}\n }}{comma}")
        else:
            lines.append(f" {_compact(key)}: {_compact(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- reading -------------------------------------------------------------------


def _get(obj: Mapping[str, JSON], key: str, kind: type[T] | tuple[type, ...], what: str, *, optional: bool = False, default: JSON = None) -> T:
    if key not in obj:
        if optional:
            return cast(T, default)
        raise FormatError(f"{what} is missing field {key!r}", field=key)
    value = obj[key]
    bad_bool = isinstance(value, bool) and kind in (int, float)
    if not isinstance(value, kind) or bad_bool:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise FormatError(f"{what} field {key!r} must be {_json_name(names)}, got {_short(value)}", field=key)
    return cast(T, value)


def _json_name(pytype: str) -> str:
    return {"dict": "an object", "list": "a list", "str": "a string", "bool": "true or false", "int": "an int"}.get(pytype, pytype)


def _short(value: JSON) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _dim(d: JSON, where: str) -> int | str:
    if isinstance(d, bool) or not isinstance(d, (int, str)):
        raise FormatError(f"a size must be an int or an expression string, got {_short(d)}", field=where)
    return d


def tensor_meta_from_json(data: JSON, where: str) -> TensorMeta:
    if not isinstance(data, dict):
        raise FormatError(f"tensor metadata must be an object, got {_short(data)}", field=where)
    try:
        shape = _get(data, "shape", list, "tensor metadata")
        stride = _get(data, "stride", list, "tensor metadata")
        return TensorMeta(
            dtype=parse_dtype(_get(data, "dtype", str, "tensor metadata")),
            shape=tuple(_dim(d, "shape") for d in shape),
            stride=tuple(_dim(d, "stride") for d in stride),
            device=parse_device(_get(data, "device", str, "tensor metadata")),
            requires_grad=_get(data, "requires_grad", bool, "tensor metadata"),
        )
    except FormatError as e:
        raise FormatError(e.problem, node=e.node, field=f"{where}.{e.field}" if e.field else where) from None


def meta_from_json(data: JSON, where: str = "meta") -> Meta:
    if data is None:
        return None
    if not isinstance(data, dict) or len(data) != 1:
        raise FormatError(f"metadata must be null or one of {{'tensor'|'scalar'|'tuple': ...}}, got {_short(data)}", field=where)
    ((kind, body),) = data.items()
    if kind == "tensor":
        return tensor_meta_from_json(body, where)
    if kind == "tuple":
        if not isinstance(body, list):
            raise FormatError("tuple metadata must be a list", field=where)
        return tuple(meta_from_json(m, f"{where}[{i}]") for i, m in enumerate(body))
    if kind == "scalar":
        if not isinstance(body, dict):
            raise FormatError("scalar metadata must be an object", field=where)
        scalar_type = _get(body, "type", str, "scalar metadata")
        value = decode_value(_get(body, "value", (int, float, str, dict), "scalar metadata"), field=where)
        if scalar_type not in ("int", "float", "bool") or not isinstance(value, (int, float, str)):
            raise FormatError(f"bad scalar metadata {_short(body)}", field=where)
        return ScalarMeta(scalar_type, value)  # type: ignore[arg-type]
    raise FormatError(f"unknown metadata kind {kind!r} (expected tensor, scalar or tuple)", field=where)


def _node_from_json(data: JSON, index: int) -> Node:
    if not isinstance(data, dict):
        raise FormatError(f"a node must be an object, got {_short(data)}", node=f"nodes[{index}]")
    raw_name = data.get("name")
    where = raw_name if isinstance(raw_name, str) else f"nodes[{index}]"
    try:
        name = _get(data, "name", str, "node")
        op = _get(data, "op", str, "node")
        if op not in OPS:
            raise FormatError(f"unknown op {op!r} (expected one of {', '.join(OPS)})", field="op")
        args = _get(data, "args", list, "node")
        kwargs = _get(data, "kwargs", dict, "node")
        trace = _get(data, "stack_trace", str, "node", optional=True)
        recompute = _get(data, "recompute", int, "node", optional=True)
        if isinstance(recompute, bool) or (recompute is not None and recompute < 1):
            raise FormatError(f"'recompute' must be a region number >= 1, got {recompute!r}", field="recompute")
        return Node(
            name=name,
            op=op,
            target=_get(data, "target", str, "node"),
            args=tuple(decode_value(a, field="args") for a in args),
            kwargs={k: decode_value(v, field="kwargs") for k, v in kwargs.items()},
            meta=meta_from_json(data.get("meta"), "meta"),
            stack_trace=trace,
            recompute=recompute,
        )
    except FormatError as e:
        raise e.with_context(node=where) from None


def _module_from_json(data: JSON, path: str) -> ModuleSpec:
    if not isinstance(data, dict):
        raise FormatError(f"a module must be an object, got {_short(data)}", node=path)
    try:
        params = _get(data, "params", dict, "module")
        buffers = _get(data, "buffers", dict, "module")
        for table, key in ((params, "params"), (buffers, "buffers")):
            for local, full in table.items():
                if full is not None and not isinstance(full, str):
                    raise FormatError(f"{key}[{local!r}] must be a tensor name or null", field=key)
        non_persistent = _get(data, "non_persistent_buffers", list, "module")
        children = _get(data, "children", dict, "module")
        attrs = _get(data, "attrs", dict, "module")
        function_attrs = _get(data, "function_attrs", dict, "module", optional=True, default={})
        for key, target in function_attrs.items():
            if not isinstance(target, str):
                raise FormatError(f"function_attrs[{key!r}] must be a target string", field="function_attrs")
        return ModuleSpec(
            cls=_get(data, "class", str, "module"),
            training=_get(data, "training", bool, "module"),
            attrs={k: decode_value(v, field=f"attrs.{k}") for k, v in attrs.items()},
            function_attrs=cast(dict[str, str], function_attrs),
            params=cast(dict[str, str | None], params),
            buffers=cast(dict[str, str | None], buffers),
            non_persistent_buffers=tuple(str(b) for b in non_persistent),
            children={k: _module_from_json(c, f"{path}.{k}") for k, c in children.items()},
        )
    except FormatError as e:
        raise e.with_context(node=path) from None


def _table(data: Mapping[str, JSON], key: str, read: Callable[[JSON, str], T]) -> dict[str, T]:
    raw = _get(data, key, dict, "graph IR")
    return {name: read(value, f"{key}.{name}") for name, value in raw.items()}


def from_json(data: dict[str, JSON], *, file: str | None = None) -> GraphIR:
    """Build and verify a GraphIR from its JSON object (no weights)."""
    try:
        version = check_header(data, format_name=GRAPH_FORMAT, version=GRAPH_VERSION, file=file)
        dialect = _get(data, "dialect", str, "graph IR")
        if dialect not in DIALECTS:
            raise FormatError(f"dialect must be one of {DIALECTS}, got {dialect!r}", field="dialect")
        raw_nodes = _get(data, "nodes", list, "graph IR")
        nodes = tuple(_node_from_json(n, i) for i, n in enumerate(raw_nodes))
        raw_codegen: dict[str, JSON] | None = _get(data, "codegen", (dict, type(None)), "graph IR", optional=True)
        codegen = None
        if raw_codegen is not None:
            try:
                orig = _get(raw_codegen, "orig_args", list, "codegen")
                out_spec: str | None = _get(raw_codegen, "out_spec", (str, type(None)), "codegen")
                codegen = PyTreeCodegen(tuple(str(a) for a in orig), _get(raw_codegen, "in_spec", str, "codegen"), out_spec)
            except FormatError as e:
                raise FormatError(e.problem, field=f"codegen.{e.field}") from None
        raw_modules = _get(data, "modules", dict, "graph IR")
        ir = GraphIR(
            dialect=dialect,  # type: ignore[arg-type]
            nodes=nodes,
            params=_table(data, "params", tensor_meta_from_json),
            buffers=_table(data, "buffers", tensor_meta_from_json),
            constants=_table(data, "constants", tensor_meta_from_json),
            modules={path: _module_from_json(m, path) for path, m in raw_modules.items()},
            codegen=codegen,
            version=version,
        )
        ir.verify()
    except FormatError as e:
        raise e.with_context(file=file) from None
    return ir


def loads(text: str | bytes, *, file: str | None = None) -> GraphIR:
    """Read graph IR text (weights are not in it: use ``load`` for a saved directory)."""
    return from_json(parse_json(text, file=file, what="graph IR"), file=file)
