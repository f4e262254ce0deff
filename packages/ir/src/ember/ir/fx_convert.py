"""FX GraphModule <-> GraphIR.

``from_fx`` reads a GraphModule (torch level, as ``symbolic_trace`` or a
bytecode capturer produce it, or ATen level, as an ATen tracer produces it)
into a :class:`GraphIR`. Node metadata comes from ``node.meta["val"]`` (fake
tensors, SymInts) or ``node.meta["tensor_meta"]``; when neither is there and
``example_inputs`` are given, the graph is run once on fake tensors to compute
it (no real compute). ``to_fx`` builds a runnable GraphModule back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx._lazy_graph_module import _LazyGraphModule

from ember.ir.errors import FormatError, UnsupportedGraphError
from ember.ir.graph import (
    Dialect,
    GraphIR,
    Meta,
    ModuleSpec,
    Node,
    PyTreeCodegen,
    ScalarMeta,
    TensorMeta,
)
from ember.ir.modules import build_module, module_spec
from ember.ir.serialize import to_json
from ember.ir.shapes.fake_mode import EagerLayoutFakeMode
from ember.ir.symbolic import sym_text
from ember.ir.targets import method_name, resolve_method, resolve_target, target_name
from ember.ir.values import NodeRef

log = logging.getLogger("ember.ir")


# --- metadata --------------------------------------------------------------


def _dim(d: object) -> int | str:
    if isinstance(d, torch.SymInt):
        expr = d.node.expr
        return int(expr) if getattr(expr, "is_Integer", False) else sym_text(expr)
    if isinstance(d, int):
        return int(d)
    raise UnsupportedGraphError(f"a size of type {type(d).__name__} is neither an int nor a SymInt")


def meta_of(value: object) -> Meta:
    """Metadata for a node value: a (fake) tensor, a (Sym)scalar, or a tuple/list of them."""
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.is_nested:
            return None  # TensorMeta describes dense strided tensors only
        return TensorMeta(
            value.dtype,
            tuple(_dim(s) for s in value.shape),
            tuple(_dim(s) for s in value.stride()),
            value.device,
            bool(value.requires_grad),
        )
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        kind = {torch.SymInt: "int", torch.SymFloat: "float", torch.SymBool: "bool"}[type(value)]
        expr = value.node.expr
        if getattr(expr, "is_number", False) or expr in (True, False):
            concrete: int | float | bool = {"int": int, "float": float, "bool": bool}[kind](expr)
            return ScalarMeta(kind, concrete)  # type: ignore[arg-type]
        return ScalarMeta(kind, sym_text(expr))  # type: ignore[arg-type]
    if isinstance(value, bool):
        return ScalarMeta("bool", value)
    if isinstance(value, int):
        return ScalarMeta("int", value)
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        return ScalarMeta("float", value)
    if isinstance(value, (tuple, list)):
        return tuple(meta_of(v) for v in value)
    return None


def _meta_from_tensor_meta(tm: Any, device: torch.device) -> Meta:
    if isinstance(tm, (tuple, list)) and not hasattr(tm, "dtype"):
        return tuple(_meta_from_tensor_meta(t, device) for t in tm)
    if hasattr(tm, "dtype") and hasattr(tm, "shape") and hasattr(tm, "stride"):
        return TensorMeta(
            tm.dtype,
            tuple(_dim(s) for s in tm.shape),
            tuple(_dim(s) for s in tm.stride),
            device,
            bool(tm.requires_grad),
        )
    return None


class _FakeRecorder(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.values: dict[str, object] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        self.values[n.name] = result
        return result


class _Runner(nn.Module):
    """Lets ``torch.func.functional_call`` swap fake tensors in for ``gm``'s weights."""

    def __init__(self, gm: torch.fx.GraphModule, recorder: _FakeRecorder) -> None:
        super().__init__()
        self.gm = gm
        self.recorder = recorder

    def forward(self, *args: object) -> Any:
        return self.recorder.run(*args)


def _fake_values(gm: torch.fx.GraphModule, example_inputs: Sequence[object]) -> dict[str, object]:
    """Run ``gm`` once on fake copies of ``example_inputs`` and of its weights; node name -> fake value.

    Weights are swapped for fakes too, so nothing real is computed or mutated
    (a BatchNorm in training mode would otherwise update its real running stats).
    """
    flat = list(example_inputs)
    n_placeholders = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    if len(flat) != n_placeholders:
        flat = pytree.tree_leaves(list(example_inputs))
    # Inputs that are already fake (a capturer's own fake mode) keep their mode and their symbols.
    existing = next((x.fake_mode for x in flat if isinstance(x, FakeTensor)), None)
    mode = existing if existing is not None else EagerLayoutFakeMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(x) if isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor) else x for x in flat]
    state: dict[str, torch.Tensor] = {f"gm.{k}": mode.from_tensor(v) for k, v in [*gm.named_parameters(), *gm.named_buffers()]}
    recorder = _FakeRecorder(gm)
    try:
        with mode:
            torch.func.functional_call(_Runner(gm, recorder), state, tuple(fakes), strict=False, tie_weights=True)
    except Exception as e:  # metadata is optional: keep what was computed, say why the rest is missing
        log.warning("ember.ir.from_fx: fake propagation stopped (%s: %s); later nodes have no metadata", type(e).__name__, e)
    return recorder.values


# --- from_fx -----------------------------------------------------------------


def detect_dialect(gm: torch.fx.GraphModule) -> Dialect:
    """``aten`` when every call is an ATen/prims overload or operator/math/builtin; else ``torch``."""
    saw_op = False
    for n in gm.graph.nodes:
        if n.op in ("call_method", "call_module"):
            return "torch"
        if n.op == "call_function":
            if isinstance(n.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
                saw_op = True
            elif getattr(n.target, "__module__", None) not in ("_operator", "operator", "math", "builtins") and not (
                getattr(n.target, "__name__", "").startswith("sym_")
            ):
                return "torch"
    return "aten" if saw_op else "torch"


def _plain(value: object, node: str, field: str) -> object:
    """FX argument -> IR value: fx.Node -> NodeRef, immutable containers -> plain ones."""
    if isinstance(value, torch.fx.Node):
        return NodeRef(value.name)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_plain(v, node, field) for v in value)
    if isinstance(value, list):
        return [_plain(v, node, field) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v, node, field) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(*(_plain(v, node, field) for v in (value.start, value.stop, value.step)))
    if isinstance(value, torch.Tensor):
        raise UnsupportedGraphError("a tensor constant inside node arguments (use get_attr)", node=node, field=field)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise UnsupportedGraphError("a symbolic scalar inside node arguments that is not a node", node=node, field=field)
    return value


def _attr(gm: nn.Module, path: str) -> tuple[nn.Module, str, object]:
    owner_path, _, name = path.rpartition(".")
    owner = gm.get_submodule(owner_path) if owner_path else gm
    return owner, name, getattr(owner, name)


def from_fx(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[object] | None = None,
    *,
    dialect: Dialect | None = None,
) -> GraphIR:
    """Read an FX GraphModule into a GraphIR (weights kept in memory in ``tensors``).

    Raises :class:`UnsupportedGraphError` (a FormatError) naming the node and
    field for anything the IR cannot hold: targets outside the allow-list,
    user-defined modules in ``call_module``, unencodable constants.
    """
    nodes_fx = list(gm.graph.nodes)
    need_fake = example_inputs is not None and any(
        not {"val", "tensor_meta", "ember_meta"} & n.meta.keys() for n in nodes_fx if n.op != "output"
    )
    fake = _fake_values(gm, example_inputs) if need_fake and example_inputs is not None else {}
    device = next((t.device for t in gm.parameters()), torch.device("cpu"))
    params: dict[str, TensorMeta] = {}
    buffers: dict[str, TensorMeta] = {}
    constants: dict[str, TensorMeta] = {}
    modules: dict[str, ModuleSpec] = {}
    tensors: dict[str, torch.Tensor] = {}
    nodes: list[Node] = []
    for n in nodes_fx:
        if n.op == "call_function":
            target = target_name(n.target, node=n.name)
        elif n.op == "call_method":
            target = method_name(n.target, node=n.name)
        else:
            target = str(n.target)
        if n.op == "call_module" and target not in modules:
            modules[target] = module_spec(gm.get_submodule(target), target, params, buffers, tensors)
        if n.op == "get_attr":
            _record_attr(gm, target, n.name, params, buffers, constants, tensors)
        meta = _node_meta(n, fake, device)
        trace = n.meta.get("stack_trace")
        nodes.append(
            Node(
                name=n.name,
                op=n.op,
                target=target,
                args=tuple(_plain(a, n.name, "args") for a in n.args),
                kwargs={k: _plain(v, n.name, "kwargs") for k, v in n.kwargs.items()},
                meta=meta if n.op != "output" else None,
                stack_trace=trace if isinstance(trace, str) else None,
                recompute=_recompute_region(n),
            )
        )
    ir = GraphIR(
        dialect=dialect or detect_dialect(gm),
        nodes=tuple(nodes),
        params=params,
        buffers=buffers,
        constants=constants,
        modules=modules,
        tensors=tensors,
        codegen=_codegen_of(gm),
    )
    ir.verify()
    try:
        to_json(ir)  # everything from_fx accepts must also be writable by dumps
    except FormatError as e:
        raise UnsupportedGraphError(e.problem, file=e.file, node=e.node, field=e.field) from None
    return ir


def _recompute_region(n: torch.fx.Node) -> int | None:
    """``n.meta["recompute"]``: the checkpoint region a node belongs to (see ``Node.recompute``)."""
    region = n.meta.get("recompute")
    return region if isinstance(region, int) and not isinstance(region, bool) and region >= 1 else None


def _node_meta(n: torch.fx.Node, fake: Mapping[str, object], device: torch.device) -> Meta:
    try:
        if "ember_meta" in n.meta:  # a graph built by to_fx: keep the IR's own metadata
            meta: Meta = n.meta["ember_meta"]
        elif "val" in n.meta:
            meta = meta_of(n.meta["val"])
        elif "tensor_meta" in n.meta:
            meta = _meta_from_tensor_meta(n.meta["tensor_meta"], device)
        else:
            meta = meta_of(fake[n.name]) if n.name in fake else None
    except FormatError as e:  # e.g. a size expression with a function the IR cannot write
        log.warning("ember.ir.from_fx: node %r keeps no metadata: %s", n.name, e.problem)
        return None
    except (RuntimeError, TypeError, ValueError) as e:  # tensor kinds whose sizes/strides cannot be read
        log.warning("ember.ir.from_fx: node %r keeps no metadata: %s: %s", n.name, type(e).__name__, e)
        return None
    return meta


def _record_attr(
    gm: torch.fx.GraphModule,
    target: str,
    node: str,
    params: dict[str, TensorMeta],
    buffers: dict[str, TensorMeta],
    constants: dict[str, TensorMeta],
    tensors: dict[str, torch.Tensor],
) -> None:
    try:
        owner, name, value = _attr(gm, target)
    except AttributeError:
        raise UnsupportedGraphError(f"get_attr target {target!r} does not exist on the module", node=node, field="target") from None
    if not isinstance(value, torch.Tensor):
        raise UnsupportedGraphError(
            f"get_attr of a {type(value).__name__}: only parameters, buffers and tensor constants are supported",
            node=node,
            field="target",
        )
    if isinstance(value, nn.Parameter):
        params[target] = TensorMeta.of(value)
    elif name in owner._buffers:
        buffers[target] = TensorMeta.of(value)
    else:
        constants[target] = TensorMeta.of(value)
    tensors[target] = value


def _codegen_of(gm: torch.fx.GraphModule) -> PyTreeCodegen | None:
    info = getattr(gm.graph._codegen, "pytree_info", None)
    if info is None:
        return None
    out = pytree.treespec_dumps(info.out_spec) if info.out_spec is not None else None
    return PyTreeCodegen(tuple(info.orig_args), pytree.treespec_dumps(info.in_spec), out)


# --- to_fx -------------------------------------------------------------------


def _install(root: nn.Module, path: str, value: object, kind: str) -> None:
    """Put ``value`` at dotted ``path`` under ``root``, creating plain containers."""
    *parents, name = path.split(".")
    owner = root
    for part in parents:
        child = owner._modules.get(part)
        if child is None:
            child = nn.Module()
            owner._modules[part] = child
        owner = child
    if kind == "module":
        owner._modules[name] = value  # type: ignore[assignment]
    elif kind == "params":
        owner._parameters[name] = value  # type: ignore[assignment]
    elif kind == "buffers":
        owner._buffers[name] = value  # type: ignore[assignment]
    else:
        object.__setattr__(owner, name, value)


def _fx_value(value: object, env: Mapping[str, torch.fx.Node]) -> Any:
    if isinstance(value, NodeRef):
        return env[value.name]
    if isinstance(value, tuple):
        return tuple(_fx_value(v, env) for v in value)
    if isinstance(value, list):
        return [_fx_value(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _fx_value(v, env) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(_fx_value(value.start, env), _fx_value(value.stop, env), _fx_value(value.step, env))
    return value


def to_fx(ir: GraphIR, *, lazy_code: bool = False) -> torch.fx.GraphModule:
    """Build a runnable GraphModule; FormatError if the IR is bad or weights are missing.

    ``lazy_code``: generate the module's Python code on its first call (or ``.code``)
    rather than now: for a graph rebuilt from a cache entry, which a backend whose own
    cache hits never runs (FX code generation is ~10% of a warm start). The entry's
    graph was generated once already, in the process that stored it.
    """
    ir.verify()
    missing = ir.missing_tensors()
    if missing:
        raise FormatError(
            f"weights missing for {len(missing)} tensor(s), first {missing[0]!r}: this GraphIR carries no data "
            "for them (load it with ember.ir.load(path), or attach tensors with GraphIR.with_tensors)",
            field="tensors",
        )
    root = nn.Module()
    owned: set[str] = set()
    metas = ir.tensor_metas()
    for path, spec in ir.modules.items():
        _install(root, path, build_module(spec, path, ir.tensors, metas), "module")
        owned.update(full for _, full in spec.tensor_names())
    for kind, table in (("params", ir.params), ("buffers", ir.buffers), ("constants", ir.constants)):
        for name, meta in table.items():
            if name in owned:
                continue
            t = ir.tensors[name]
            if kind == "params" and not isinstance(t, nn.Parameter):
                t = nn.Parameter(t, requires_grad=meta.requires_grad)
            _install(root, name, t, kind)
    graph = torch.fx.Graph()
    env: dict[str, torch.fx.Node] = {}
    for node in ir.nodes:
        target: Any
        if node.op == "call_function":
            target = resolve_target(node.target, node=node.name)
        elif node.op == "call_method":
            target = resolve_method(node.target, node=node.name)
        else:
            target = node.target
        fx_node = graph.create_node(
            node.op,
            target,
            args=_fx_value(node.args, env),
            kwargs=_fx_value(dict(node.kwargs), env),
            name=node.name,
        )
        fx_node.meta["ember_meta"] = node.meta
        if node.stack_trace is not None:
            fx_node.meta["stack_trace"] = node.stack_trace
        if node.recompute is not None:
            fx_node.meta["recompute"] = node.recompute
        env[node.name] = fx_node
    if ir.codegen is not None:
        _set_codegen(graph, ir.codegen)
    if lazy_code:
        return _LazyGraphModule(root, graph)
    try:
        return torch.fx.GraphModule(root, graph)
    except Exception as e:  # FX code generation rejects arguments that verify() cannot judge (arity, ...)
        raise FormatError(
            f"the graph passed verification but FX cannot generate code for it ({type(e).__name__}: {e}); "
            "a node probably has the wrong number or kind of arguments for its target",
            field="nodes",
        ) from e


def _set_codegen(graph: torch.fx.Graph, cg: PyTreeCodegen) -> None:
    from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo

    try:
        in_spec = pytree.treespec_loads(cg.in_spec)
        out_spec = pytree.treespec_loads(cg.out_spec) if cg.out_spec is not None else None
    except Exception as e:
        raise FormatError(f"bad pytree spec: {e}", field="codegen") from None
    graph._codegen = _PyTreeCodeGen(_PyTreeInfo(list(cg.orig_args), in_spec, out_spec))


