"""On-disk cache of traced and partitioned graphs: a second process skips tracing.

Used for functions that are FX graphs (``aot_module(gm)``, the dynamo backends)
when ``AotOptions(cache=True)``. The key hashes the graph's ember.ir
serialization (stack traces left out), the call signature (input sizes,
strides, dtypes, devices, requires_grad, non-tensor arguments, argument
structure), grad mode and autocast state, the decomposition table and
partitioner, ember.aotgrad's own source files and torch's version. The entry
holds the forward and backward (or inference) ATen graphs as ember.ir JSON
and the runtime's bookkeeping (mutated inputs, output slots, tangent mask,
gradient inputs, saved count, output structure). A hit hands the loaded
graphs to the compilers as a fresh trace would, with fake example inputs
rebuilt from the IR's metadata.

Layout: ``<cache_dir>/aot/<key[:2]>/<key>.json``, first line the sha256 of the
rest; written atomically, deleted and traced again when damaged. Graphs the
IR cannot hold (user modules, ops outside its allow-list) are traced every
time. Tensor constants are stored by reference only: a constant that is one of
the source graph's parameters or buffers (an inference graph reads its weights
so) is stored as that weight's name and bound to the live weight when the
entry is loaded; a small CPU constant made while tracing (``x[:, 0] = 1`` traces a
scalar tensor) is stored by value, exactly; any other constant makes the plan
uncacheable. Weight data is never on disk, so new weights never meet a stale entry.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import TreeSpec, treespec_dumps, treespec_loads

import ember.ir as ir
from ember.aotgrad.aliasing import steps_from_json, steps_json
from ember.aotgrad.joint import OutputSlot
from ember.aotgrad.sizes import has_unbacked
from ember.ir.cache_entry import (
    code_digest,
    entry_path,
    graph_key_text,
    load_entry,
    remember_stored_text,
    source_fingerprint,
    store_entry,
)

LOG = logging.getLogger("ember.aotgrad")

#: Bumped when the entry layout changes.
FORMAT = 4




@dataclass
class StoredPlan:
    """A traced, partitioned graph pair and the runtime's bookkeeping, without compiled code."""

    forward: fx.GraphModule
    backward: fx.GraphModule | None
    num_inputs: int
    mutated_inputs: tuple[int, ...]
    num_user_outputs: int
    outputs: tuple[OutputSlot, ...]
    tangent_mask: tuple[bool, ...]
    grad_inputs: tuple[int, ...]
    num_saved: int
    out_spec: TreeSpec
    copied_inputs: tuple[int, ...] = ()
    grad_tangents: tuple[tuple[int, ...], ...] = ()
    output_strides: tuple[tuple[int, tuple[int, ...]], ...] = ()

    def bookkeeping(self) -> dict[str, Any]:
        """The runtime's calling convention: every field but the graphs and the output structure."""
        skip = {"forward", "backward", "out_spec"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}


def fn_name(fn: Any) -> str:
    if isinstance(fn, functools.partial):
        return f"partial({fn_name(fn.func)}, {fn.args!r}, {sorted(fn.keywords.items())!r})"
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"


def table_fingerprint(table: Mapping[Any, Any]) -> str:
    """The decomposition table as text: each op, the function decomposing it, and its code
    (a table with its own ``fingerprint()``, a ``LazyDecompTable``, says it without being built)."""
    own = getattr(table, "fingerprint", None)
    if callable(own):
        return str(own())
    return repr(sorted(_table_item(op, fn) for op, fn in table.items()))


#: (op, function, its code object) -> that entry's text: digesting ~1000 functions' code
#: took ~30 ms per backend call, and a regional compile makes one call per block.
_ITEMS: dict[tuple[Any, Any, Any], str] = {}


def _table_item(op: Any, fn: Any) -> str:
    try:
        key = (op, fn, getattr(fn, "__code__", None))
        found = _ITEMS.get(key)
    except TypeError:  # an unhashable callable: not memoised
        return f"{op}={fn_name(fn)}:{code_digest(fn)}"
    if found is None:
        found = _ITEMS[key] = f"{op}={fn_name(fn)}:{code_digest(fn)}"
    return found


def plan_key(gm: fx.GraphModule, call: str, decompositions: str, partitioner: str) -> str | None:
    """Key of tracing ``gm`` for the call described by ``call``; None when uncacheable."""
    graph = graph_key_text(gm, LOG)
    if graph is None:
        return None
    h = hashlib.sha256()
    for part in (f"ember.aotgrad plan cache {FORMAT}", source_fingerprint(Path(__file__).resolve().parent),
                 torch.__version__,
                 decompositions, partitioner, call, graph):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


# --- entries -------------------------------------------------------------------------------------


Weights = dict[str, torch.Tensor]


def weights_of(source: fx.GraphModule | None) -> Weights:
    """The source graph's parameters and buffers by name (what constants may refer to)."""
    if source is None:
        return {}
    out: Weights = dict(source.named_parameters())
    out.update({n: b for n, b in source.named_buffers()})
    return out


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.device == b.device and a.dtype == b.dtype and a.shape == b.shape
            and a.stride() == b.stride() and a.storage_offset() == b.storage_offset()
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())


def _graph_json(gm: fx.GraphModule, weights: Weights) -> dict[str, Any]:
    """The graph as ember.ir text, and the weight each tensor constant is (by name)."""
    from ember.aotgrad.exchange import to_graph_ir

    graph_ir = to_graph_ir(gm)
    refs: dict[str, str] = {}
    values: dict[str, dict[str, Any]] = {}
    for const, value in graph_ir.tensors.items():
        name = next((n for n, w in weights.items() if _same_memory(value, w)), None)
        if name is not None:
            refs[const] = name
            continue
        small = _small_constant_json(value)
        if small is None:
            raise ValueError(
                f"the graph holds tensor constant {const!r}, which is not a weight of the "
                "source graph nor a small CPU constant"
            )
        values[const] = small
    return {"ir": ir.dumps(graph_ir), "constants": refs, "values": values}


#: Largest tensor constant made while tracing that is stored by value (``x[:, 0] = 1``
#: traces ``fill(x, tensor(1))``: a scalar tensor that is no weight of the source graph).
SMALL_CONSTANT_NUMEL = 64

_EXACT_DTYPES = {
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
}


def _small_constant_json(value: torch.Tensor) -> dict[str, Any] | None:
    """A small, contiguous, CPU, real-valued constant as exact data; None for anything else."""
    if (
        type(value) is not torch.Tensor
        or value.device.type != "cpu"
        or value.requires_grad
        or value.dtype not in _EXACT_DTYPES
        or value.numel() > SMALL_CONSTANT_NUMEL
        or not value.is_contiguous()
        or value.storage_offset() != 0
    ):
        return None
    flat = value.detach().reshape(-1).tolist()
    data = [float(x).hex() if value.is_floating_point() else int(x) for x in flat]
    return {"dtype": ir.dtype_name(value.dtype), "shape": list(value.shape), "data": data}


def _small_constant(data: dict[str, Any]) -> torch.Tensor:
    dtype = ir.parse_dtype(str(data["dtype"]))
    if dtype not in _EXACT_DTYPES:
        raise ValueError(f"stored constant of dtype {dtype}")
    shape = [int(n) for n in data["shape"]]
    raw = data["data"]
    flat = [float.fromhex(x) for x in raw] if dtype.is_floating_point else [int(x) for x in raw]
    return torch.tensor(flat, dtype=dtype).reshape(shape)


class _Placeholders:
    """Example values for a loaded graph's placeholders.

    On the CPU they are real tensors that are never written or read: the
    allocation is uninitialised (pages untouched), and creating them needs no
    ``FakeTensorMode``, whose first use imports all of TorchDynamo (1-2 s of a
    warm start). Other devices get fake tensors (the mode made on first need).
    """

    def __init__(self) -> None:
        self._mode: FakeTensorMode | None = None

    def value(self, meta: ir.TensorMeta) -> torch.Tensor:
        shape, stride = meta.shape, meta.stride
        if meta.device.type == "cpu":
            return torch.empty_strided(shape, stride, dtype=meta.dtype, device=meta.device)  # type: ignore[arg-type]
        if self._mode is None:
            from ember.ir.shapes import EagerLayoutFakeMode

            self._mode = EagerLayoutFakeMode(allow_non_fake_inputs=True)
        with self._mode:
            return torch.empty_strided(shape, stride, dtype=meta.dtype, device=meta.device)  # type: ignore[arg-type]


@functools.lru_cache(maxsize=128)
def _graph_ir(text: str) -> ir.GraphIR:
    """A stored graph's IR, parsed once per process: the IR is immutable (constants are
    attached per load with ``with_tensors``), and a regional compile loads the same plan
    once per block."""
    return ir.loads(text)


def _load_graph(data: dict[str, Any], placeholders: _Placeholders, weights: Weights) -> fx.GraphModule:
    graph_ir = _graph_ir(data["ir"])
    refs: dict[str, str] = data["constants"]
    values: dict[str, dict[str, Any]] = data.get("values", {})
    if refs or values:
        missing = sorted(set(refs.values()) - set(weights))
        if missing:
            raise ValueError(f"the source graph has no weight {missing[0]!r}")
        # the weights themselves (not detached aliases), so ``param.data = other`` is seen
        tensors = {c: weights[w] for c, w in refs.items()}
        tensors.update({c: _small_constant(v) for c, v in values.items()})
        graph_ir = graph_ir.with_tensors(tensors)
    gm = ir.to_fx(graph_ir, lazy_code=True)
    remember_stored_text(gm, data["ir"])  # the backend's graph key, without serializing gm
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        meta = node.meta.get("ember_meta")
        if not isinstance(meta, ir.TensorMeta) or not meta.is_static:
            raise ValueError(f"placeholder {node.name} has no static tensor metadata")
        node.meta["val"] = placeholders.value(meta)
    return gm


def _slot_json(slot: OutputSlot) -> dict[str, Any]:
    return {"kind": slot.kind, "index": slot.index, "views": steps_json(slot.views),
            "value": ir.encode_value(slot.value), "requires_grad": slot.requires_grad}


def _slot(data: dict[str, Any]) -> OutputSlot:
    return OutputSlot(str(data["kind"]), int(data["index"]), steps_from_json(data["views"]),
                      ir.decode_value(data["value"]), bool(data["requires_grad"]))


def _dump(plan: StoredPlan, weights: Weights) -> str:
    return json.dumps({
        "format": FORMAT,
        "forward": _graph_json(plan.forward, weights),
        "backward": None if plan.backward is None else _graph_json(plan.backward, weights),
        "num_inputs": plan.num_inputs,
        "mutated_inputs": list(plan.mutated_inputs),
        "num_user_outputs": plan.num_user_outputs,
        "outputs": [_slot_json(s) for s in plan.outputs],
        "tangent_mask": list(plan.tangent_mask),
        "grad_inputs": list(plan.grad_inputs),
        "num_saved": plan.num_saved,
        "out_spec": treespec_dumps(plan.out_spec),
        "copied_inputs": list(plan.copied_inputs),
        "grad_tangents": [list(t) for t in plan.grad_tangents],
        "output_strides": [[k, list(st)] for k, st in plan.output_strides],
    })


def _load(text: str, weights: Weights) -> StoredPlan:
    d = json.loads(text)
    if d.get("format") != FORMAT:
        raise ValueError(f"entry format {d.get('format')!r}, expected {FORMAT}")
    mode = _Placeholders()
    return StoredPlan(
        forward=_load_graph(d["forward"], mode, weights),
        backward=None if d["backward"] is None else _load_graph(d["backward"], mode, weights),
        num_inputs=int(d["num_inputs"]),
        mutated_inputs=tuple(int(i) for i in d["mutated_inputs"]),
        num_user_outputs=int(d["num_user_outputs"]),
        outputs=tuple(_slot(s) for s in d["outputs"]),
        tangent_mask=tuple(bool(b) for b in d["tangent_mask"]),
        grad_inputs=tuple(int(i) for i in d["grad_inputs"]),
        num_saved=int(d["num_saved"]),
        out_spec=treespec_loads(d["out_spec"]),
        copied_inputs=tuple(int(i) for i in d["copied_inputs"]),
        grad_tangents=tuple(tuple(int(k) for k in t) for t in d["grad_tangents"]),
        output_strides=tuple((int(k), tuple(int(x) for x in st))
                             for k, st in d["output_strides"]),
    )


def lookup(cache_dir: str, key: str, source: fx.GraphModule | None = None) -> StoredPlan | None:
    """The entry for ``key`` (constants bound to ``source``'s weights), or None; a damaged
    entry is deleted (and traced again)."""
    weights = weights_of(source)
    return load_entry(entry_path(cache_dir, "aot", key), lambda text: _load(text, weights), LOG)


def store(cache_dir: str, key: str, plan: StoredPlan, source: fx.GraphModule | None = None) -> bool:
    """Write the entry atomically; False (nothing written) when a graph cannot be serialized."""
    if any(gm is not None and has_unbacked(gm) for gm in (plan.forward, plan.backward)):
        # a size that depends on data (``u0``): a graph rebuilt from the entry would carry
        # it without the shape environment that says it has no value (ADR 0046)
        LOG.debug("ember.aotgrad: plan not cached (a size depends on tensor data)")
        return False
    weights = weights_of(source)
    try:
        text = _dump(plan, weights)
    except Exception as e:  # an op, constant or output the IR cannot hold
        LOG.debug("ember.aotgrad: plan not cached (%s: %s)", type(e).__name__, e)
        return False
    return store_entry(entry_path(cache_dir, "aot", key), text, lambda t: _load(t, weights), LOG)
