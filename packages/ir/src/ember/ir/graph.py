"""The graph IR: an FX graph as plain, frozen data.

A :class:`GraphIR` holds nodes (``placeholder``, ``call_function``,
``call_method``, ``call_module``, ``get_attr``, ``output``) whose targets are
stable strings (see :mod:`ember.ir.targets`) and whose args are plain values
with :class:`~ember.ir.values.NodeRef` for references to earlier nodes; tensor
metadata per node; parameters, buffers and constant tensors by name with
their metadata; the leaf modules ``call_module`` nodes run; and, beside the
data, the in-memory tensors (``tensors``), which are not part of equality and
travel in a safetensors file when saved.

``verify()`` checks everything a reader relies on and raises
:class:`FormatError` naming the node (with its neighbours) and the field.
``str(ir)`` prints readable program text.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

import torch

from ember.ir.errors import FormatError
from ember.ir.symbolic import parse_sym_expr
from ember.ir.targets import is_aten_level, resolve_method, resolve_module_class, resolve_target
from ember.ir.values import NodeRef, dtype_name
from ember.ir.versioning import GRAPH_VERSION

Dialect: TypeAlias = Literal["torch", "aten"]
DIALECTS: tuple[str, ...] = ("torch", "aten")
OPS: tuple[str, ...] = ("placeholder", "call_function", "call_method", "call_module", "get_attr", "output")
Dim: TypeAlias = int | str
"""A size or stride: an int, or a sympy expression text over size symbols (``"2*s0"``)."""


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """What a tensor value looks like, without its data."""

    dtype: torch.dtype
    shape: tuple[Dim, ...]
    stride: tuple[Dim, ...]
    device: torch.device
    requires_grad: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(self.shape))
        object.__setattr__(self, "stride", tuple(self.stride))
        if not isinstance(self.device, torch.device):
            object.__setattr__(self, "device", torch.device(self.device))

    @property
    def is_static(self) -> bool:
        """True when every size and stride is an int."""
        return all(isinstance(d, int) for d in (*self.shape, *self.stride))

    @staticmethod
    def of(t: torch.Tensor) -> TensorMeta:
        """Metadata of a real (non-symbolic) tensor."""
        return TensorMeta(t.dtype, tuple(t.shape), tuple(t.stride()), t.device, bool(t.requires_grad))

    def short(self) -> str:
        """``f32[4, s0]`` style text (dtype abbreviation and shape)."""
        dims = ", ".join(str(d) for d in self.shape)
        return f"{_DTYPE_ABBR.get(self.dtype, dtype_name(self.dtype))}[{dims}]"


_DTYPE_ABBR = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "b8", torch.complex64: "c64", torch.complex128: "c128",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ScalarMeta:
    """A Python scalar value of a node: a concrete value or a size expression text."""

    type: Literal["int", "float", "bool"]
    value: int | float | bool | str

    def short(self) -> str:
        return f"{self.type}({self.value})"


Meta: TypeAlias = TensorMeta | ScalarMeta | tuple["Meta", ...] | None


def meta_text(meta: Meta) -> str:
    if meta is None:
        return ""
    if isinstance(meta, tuple):
        return "(" + ", ".join(meta_text(m) or "?" for m in meta) + ("," if len(meta) == 1 else "") + ")"
    return meta.short()


@dataclass(frozen=True, slots=True)
class Node:
    """One FX node as data. ``target`` is a stable string (see ``ember.ir.targets``)."""

    name: str
    op: str
    target: str
    args: tuple[object, ...] = ()
    kwargs: Mapping[str, object] = field(default_factory=dict)
    meta: Meta = None
    stack_trace: str | None = None
    #: the activation-checkpointing region (``torch.utils.checkpoint``) the node belongs
    #: to, numbered from 1: its value is recomputed in backward, not saved (format 1.1)
    recompute: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "kwargs", dict(self.kwargs))

    def inputs(self) -> Iterator[NodeRef]:
        """Every NodeRef in args and kwargs, in order."""
        yield from _refs(self.args)
        yield from _refs(tuple(self.kwargs.values()))


def _refs(value: object) -> Iterator[NodeRef]:
    if isinstance(value, NodeRef):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _refs(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _refs(k)
            yield from _refs(v)
    elif isinstance(value, slice):
        yield from _refs((value.start, value.stop, value.step))


@dataclass(frozen=True, slots=True)
class ModuleSpec:
    """A torch.nn leaf module: its class, plain attributes and where its tensors are.

    ``params`` / ``buffers`` map the module's local names to full names in
    ``GraphIR.params`` / ``GraphIR.buffers`` (``None`` for a slot registered
    as ``None``, like ``Linear(bias=False).bias``). ``function_attrs`` maps
    attributes holding an allow-listed function to its target string.
    """

    cls: str
    training: bool
    attrs: Mapping[str, object] = field(default_factory=dict)
    function_attrs: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str | None] = field(default_factory=dict)
    buffers: Mapping[str, str | None] = field(default_factory=dict)
    non_persistent_buffers: tuple[str, ...] = ()
    children: Mapping[str, ModuleSpec] = field(default_factory=dict)

    def tensor_names(self) -> Iterator[tuple[str, str]]:
        """(kind, full name) for every tensor of this module and its children."""
        for full in self.params.values():
            if full is not None:
                yield "params", full
        for full in self.buffers.values():
            if full is not None:
                yield "buffers", full
        for child in self.children.values():
            yield from child.tensor_names()


@dataclass(frozen=True, slots=True)
class PyTreeCodegen:
    """How ``forward`` packs its arguments/results (FX ``_PyTreeCodeGen``), as pytree spec text."""

    orig_args: tuple[str, ...]
    in_spec: str
    out_spec: str | None


@dataclass(frozen=True, slots=True)
class GraphIR:
    """A graph as data. ``tensors`` holds weights in memory and is not compared."""

    dialect: Dialect
    nodes: tuple[Node, ...]
    params: Mapping[str, TensorMeta] = field(default_factory=dict)
    buffers: Mapping[str, TensorMeta] = field(default_factory=dict)
    constants: Mapping[str, TensorMeta] = field(default_factory=dict)
    modules: Mapping[str, ModuleSpec] = field(default_factory=dict)
    tensors: Mapping[str, torch.Tensor] = field(default_factory=dict, compare=False, repr=False)
    codegen: PyTreeCodegen | None = None
    version: tuple[int, int] = GRAPH_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))

    # --- queries ---------------------------------------------------------
    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    @property
    def placeholders(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.op == "placeholder")

    @property
    def output(self) -> Node:
        return self.nodes[-1]

    def tensor_metas(self) -> dict[str, TensorMeta]:
        """Every named tensor (params, buffers, constants) with its metadata."""
        return {**self.params, **self.buffers, **self.constants}

    def missing_tensors(self) -> list[str]:
        """Names of params/buffers/constants with no tensor in ``tensors``."""
        return [name for name in self.tensor_metas() if name not in self.tensors]

    def with_tensors(self, tensors: Mapping[str, torch.Tensor]) -> GraphIR:
        """The same graph with ``tensors`` as its weights."""
        return dataclasses.replace(self, tensors=dict(tensors))

    # --- verify ------------------------------------------------------------
    def verify(self) -> None:
        """Check the graph is well formed; raise FormatError naming node and field.

        A graph verified once is not walked again: ``loads`` verifies, then ``to_fx`` of it
        (or of ``with_tensors`` of it: the same nodes, tables and modules, other weights)
        would check every node a second time (a stored frame's or plan's graph, rebuilt
        per block of a regional compile and per graph of a warm start). The IR is frozen
        data; the memo holds the very objects checked (``_VERIFIED``), so it never answers
        for a graph built from other ones. The weights in ``tensors`` are checked against
        their metadata every time."""
        if not _was_verified(self):
            self._verify()
            _remember_verified(self)
        self._verify_tensors()

    def _verify(self) -> None:
        if self.dialect not in DIALECTS:
            raise FormatError(f"dialect must be one of {DIALECTS}, got {self.dialect!r}", field="dialect")
        if not self.nodes or self.nodes[-1].op != "output":
            raise FormatError("a graph must end with exactly one 'output' node", field="nodes")
        seen: set[str] = set()
        for i, node in enumerate(self.nodes):
            try:
                self._verify_node(node, seen, is_last=i == len(self.nodes) - 1)
            except FormatError as e:
                raise FormatError(e.problem + self._neighbours(i), file=e.file, node=node.name, field=e.field) from None
            seen.add(node.name)
        for path, spec in self.modules.items():
            _verify_module(spec, path, self)
        _verify_paths(self)
        for kind, table in (("params", self.params), ("buffers", self.buffers), ("constants", self.constants)):
            for name, meta in table.items():
                _verify_meta(meta, f"{kind}.{name}")

    def _verify_tensors(self) -> None:
        """The weights in memory against their metadata (checked on every ``verify``)."""
        for kind, table in (("params", self.params), ("buffers", self.buffers), ("constants", self.constants)):
            for name, meta in table.items():
                t = self.tensors.get(name)
                if t is not None and meta.is_static and (tuple(t.shape) != meta.shape or t.dtype != meta.dtype):
                    raise FormatError(
                        f"tensor {name!r} is {dtype_name(t.dtype)}{list(t.shape)} but its metadata says "
                        f"{dtype_name(meta.dtype)}{list(meta.shape)}",
                        field=f"{kind}.{name}",
                    )

    def _neighbours(self, i: int) -> str:
        lines = []
        for j in range(max(0, i - 1), min(len(self.nodes), i + 2)):
            mark = ">>" if j == i else "  "
            lines.append(f"\n  {mark} {format_node(self.nodes[j])}")
        return "".join(lines)

    def _verify_node(self, node: Node, seen: set[str], *, is_last: bool) -> None:
        if not isinstance(node.name, str) or not node.name.isidentifier():
            raise FormatError(f"node name must be an identifier, got {node.name!r}", field="name")
        if node.name in seen:
            raise FormatError(f"duplicate node name {node.name!r}", field="name")
        if node.op not in OPS:
            raise FormatError(f"unknown op {node.op!r} (expected one of {', '.join(OPS)})", field="op")
        if node.op == "output" and not is_last:
            raise FormatError("'output' must be the last node", field="op")
        if node.op == "placeholder" and not node.target.lstrip("*").isidentifier():
            raise FormatError(f"placeholder target must be an argument name, got {node.target!r}", field="target")
        for key in node.kwargs:
            if not isinstance(key, str) or not key.isidentifier():
                raise FormatError(f"keyword argument names must be identifiers, got {key!r}", field="kwargs")
        for ref in node.inputs():
            if ref.name not in seen:
                raise FormatError(f"reference to undefined node {ref.name!r} (dangling or used before it is defined)", field="args")
        _verify_meta(node.meta, "meta")
        if node.op == "call_function":
            resolve_target(node.target, node=node.name)
            if self.dialect == "aten" and not is_aten_level(node.target):
                raise FormatError(f"target {node.target!r} is not allowed in the aten dialect", field="target")
            if node.target == "getattr":
                attr = node.args[1] if len(node.args) > 1 else None
                if not isinstance(attr, str) or attr.startswith("_"):
                    raise FormatError(f"getattr needs a public attribute name, got {attr!r}", field="args")
        elif node.op == "call_method":
            resolve_method(node.target, node=node.name)
            if self.dialect == "aten":
                raise FormatError("call_method is not allowed in the aten dialect", field="op")
        elif node.op == "call_module":
            if node.target not in self.modules:
                raise FormatError(f"call_module target {node.target!r} is not in the graph's modules", field="target")
            if self.dialect == "aten":
                raise FormatError("call_module is not allowed in the aten dialect", field="op")
        elif node.op == "get_attr" and node.target not in self.tensor_metas():
            raise FormatError(f"get_attr target {node.target!r} is not a parameter, buffer or constant of the graph", field="target")

    # --- printing ------------------------------------------------------------
    def __str__(self) -> str:
        lines = [f"graph(dialect={self.dialect!r}, version={self.version[0]}.{self.version[1]}):"]
        lines += [f"  {format_node(n)}" for n in self.nodes]
        for title, table in (("params", self.params), ("buffers", self.buffers), ("constants", self.constants)):
            if table:
                lines.append(f"{title}:")
                lines += [
                    f"  {name}: {meta.short()}{' requires_grad' if meta.requires_grad else ''}"
                    for name, meta in table.items()
                ]
        if self.modules:
            lines.append("modules:")
            lines += [f"  {path}: {_module_text(spec)}" for path, spec in self.modules.items()]
        return "\n".join(lines)


def _arg_text(value: object) -> str:
    if isinstance(value, NodeRef):
        return f"%{value.name}"
    if isinstance(value, list):
        return "[" + ", ".join(_arg_text(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(_arg_text(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_arg_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, torch.dtype):
        return str(value)
    return repr(value)


def format_node(node: Node) -> str:
    """One line of program text: ``%relu: f32[4, 8] = torch.relu(%x)`` (``  # recompute 1``
    after a node of checkpoint region 1)."""
    line = _format_node(node)
    return line if node.recompute is None else f"{line}  # recompute {node.recompute}"


def _format_node(node: Node) -> str:
    head = f"%{node.name}"
    meta = meta_text(node.meta)
    if meta:
        head += f": {meta}"
    args = [_arg_text(a) for a in node.args] + [f"{k}={_arg_text(v)}" for k, v in node.kwargs.items()]
    call = ", ".join(args)
    if node.op == "placeholder":
        default = f" = {args[0]}" if args else ""
        return f"{head} = placeholder {node.target}{default}"
    if node.op == "output":
        return f"return {call}"
    if node.op == "get_attr":
        return f"{head} = get_attr {node.target}"
    if node.op == "call_module":
        return f"{head} = call_module {node.target}({call})"
    return f"{head} = {node.target}({call})"


def _module_text(spec: ModuleSpec) -> str:
    attrs = ", ".join([f"{k}={v!r}" for k, v in spec.attrs.items()] + [f"{k}={t}" for k, t in spec.function_attrs.items()])
    mode = "train" if spec.training else "eval"
    return f"{spec.cls}({attrs}) [{mode}]"


def _verify_meta(meta: object, where: str) -> None:
    if meta is None:
        return
    if isinstance(meta, tuple):
        for i, m in enumerate(meta):
            _verify_meta(m, f"{where}[{i}]")
        return
    if isinstance(meta, ScalarMeta):
        if meta.type not in ("int", "float", "bool"):
            raise FormatError(f"scalar type must be int, float or bool, got {meta.type!r}", field=where)
        if isinstance(meta.value, str):
            parse_sym_expr(meta.value, field=where)
        return
    if not isinstance(meta, TensorMeta):
        raise FormatError(f"expected tensor or scalar metadata, got {type(meta).__name__}", field=where)
    if not isinstance(meta.dtype, torch.dtype):
        raise FormatError(f"dtype must be a torch.dtype, got {meta.dtype!r}", field=where)
    if len(meta.shape) != len(meta.stride):
        raise FormatError(f"shape has {len(meta.shape)} dims but stride has {len(meta.stride)}", field=where)
    for d in (*meta.shape, *meta.stride):
        if isinstance(d, str):
            parse_sym_expr(d, field=where)
        elif not isinstance(d, int) or isinstance(d, bool):
            raise FormatError(f"a size must be an int or an expression string, got {d!r}", field=where)


_PATH_PART = re.compile(r"[A-Za-z0-9_]+")


def _verify_paths(ir: GraphIR) -> None:
    """Module paths and tensor names are dotted attribute paths that do not collide."""
    kinds: dict[str, str] = {}
    for kind, names in (
        ("module", list(ir.modules)),
        ("params", list(ir.params)),
        ("buffers", list(ir.buffers)),
        ("constants", list(ir.constants)),
    ):
        for name in names:
            parts = name.split(".")
            if not all(_PATH_PART.fullmatch(p) and not p.startswith("__") for p in parts):
                raise FormatError(f"{name!r} is not a dotted attribute path (parts of letters, digits and _)", field=kind)
            owned_by_module = kind in ("params", "buffers") and any(name.startswith(m + ".") for m in ir.modules)
            if name in kinds and not owned_by_module:
                raise FormatError(f"{name!r} is both a {kinds[name]} and a {kind} entry", field=kind)
            kinds.setdefault(name, kind)
    for name in (*ir.params, *ir.buffers, *ir.constants):
        for i in range(1, name.count(".") + 1):
            prefix = name.rsplit(".", i)[0]
            if prefix in kinds and kinds[prefix] != "module":
                raise FormatError(f"{name!r} is nested under tensor {prefix!r}", field=kinds[name])


def _verify_module(spec: ModuleSpec, path: str, ir: GraphIR) -> None:
    resolve_module_class(spec.cls, node=path)
    for key, target in spec.function_attrs.items():
        try:
            resolve_target(target, node=path)
        except FormatError as e:
            raise FormatError(e.problem, node=path, field=f"function_attrs.{key}") from None
    for name, child in spec.children.items():
        _verify_module(child, f"{path}.{name}", ir)
    for kind, full in spec.tensor_names():
        table = ir.params if kind == "params" else ir.buffers
        if full not in table:
            raise FormatError(f"module {path!r} refers to {kind[:-1]} {full!r}, which the graph does not list", node=path, field=kind)


#: ``id(ir.nodes)`` -> the fields of a GraphIR that passed ``verify`` (the objects
#: themselves, so an id is never reused while its entry lives); the oldest go first.
_VERIFIED: dict[int, tuple[object, ...]] = {}
_VERIFIED_MAX = 512


def _verified_fields(ir: GraphIR) -> tuple[object, ...]:
    return (ir.dialect, ir.nodes, ir.params, ir.buffers, ir.constants, ir.modules, ir.codegen, ir.version)


def _was_verified(ir: GraphIR) -> bool:
    found = _VERIFIED.get(id(ir.nodes))
    return found is not None and all(a is b for a, b in zip(found, _verified_fields(ir), strict=True))


def _remember_verified(ir: GraphIR) -> None:
    if len(_VERIFIED) >= _VERIFIED_MAX:
        del _VERIFIED[next(iter(_VERIFIED))]
    _VERIFIED[id(ir.nodes)] = _verified_fields(ir)
