"""On-disk cache of whole compiled graphs: a second process skips lowering and codegen.

The kernel cache (``cache.py``) saves the C++ compiler's time; this one saves
the rest. A graph's key hashes its ember.ir serialization (the ATen graph
as data, stack traces left out), the sizes, strides and dtypes of its inputs,
the options that change generated code, the source of ember.inductor itself,
any lowering registered from outside it, and torch's version. The entry holds
what ``compile_fx`` needs to run the graph without lowering it again: the
wrapper's source, each kernel's source and arguments, the wrapper's
constants (ATen ops by name, dtypes, ...), which ``get_attr`` attribute each
graph constant reads (its data comes from the live module, never the disk),
input layouts, output structure and the compile report.

Layout: ``<cache_dir>/graphs/<key[:2]>/<key>.json``; the first line is the
sha256 of the rest. Files are written under a temporary name and moved into
place (atomic); a file whose digest does not match is deleted and the graph
compiled again, never loaded. A graph the IR cannot hold (an op outside its
allow-list, an unencodable constant) is compiled every time, as before.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch.utils._pytree import TreeSpec, treespec_dumps, treespec_loads

from ember.ir import parse_sym_expr, sym_text
from ember.ir.cache_entry import (
    code_digest,
    entry_path,
    graph_key_text,
    load_entry,
    source_fingerprint,
    store_entry,
)

from .codegen.backend import KernelSource
from .logs import log
from .lowering_registry import LOWERINGS

#: Bumped when the entry layout changes (3: symbolic sizes, kernel size arguments).
FORMAT = 3


@dataclass
class GraphArtifact:
    """Everything a compiled graph is rebuilt from, without its tensors."""

    wrapper_source: str
    kernel_sources: dict[str, str]
    kernel_args: dict[str, list[str]]
    #: backend-specific launch data per kernel (``KernelSource.meta``), where there is any
    kernel_meta: dict[str, dict[str, Any]]
    consts: list[Any]
    constant_targets: dict[str, str]
    input_layouts: list[tuple[tuple[Any, ...], tuple[Any, ...], torch.dtype]]
    out_spec: TreeSpec | None
    n_outputs: int
    fallbacks: dict[str, int] = field(default_factory=dict)
    #: (op, reason) of each extern call, replayed to the perf_hints log on a cache hit
    externs: list[tuple[str, str]] = field(default_factory=list)
    #: size symbols each kernel takes after its buffers
    kernel_sizes: dict[str, list[str]] = field(default_factory=dict)
    #: graph inputs that are symbolic ints (besides the tensors of ``input_layouts``)
    n_size_inputs: int = 0
    #: sizes are symbolic: the wrapper binds them and checks its inputs itself
    symbolic: bool = False

    def kernels(self) -> dict[str, KernelSource]:
        return {
            name: KernelSource(src, self.kernel_args[name], self.kernel_meta.get(name, {}),
                               self.kernel_sizes.get(name, []))
            for name, src in self.kernel_sources.items()
        }


# --- the key -------------------------------------------------------------------------------------


def outside_lowerings() -> list[str]:
    """Lowerings registered from outside ember.inductor (``register_lowering`` in user code)."""

    out = []
    for op, fn in LOWERINGS.items():
        module = getattr(fn, "__module__", "") or ""
        if module.startswith("ember.inductor"):
            continue
        out.append(f"{op}={module}.{getattr(fn, '__qualname__', '?')}:{code_digest(fn)}")
    return sorted(out)


def graph_key(gm: torch.fx.GraphModule, example_inputs: list[Any], options_key: str) -> str | None:
    """The cache key of compiling ``gm`` for these inputs with these options, or None (uncacheable)."""
    graph = graph_key_text(gm, log)
    if graph is None:
        return None
    h = hashlib.sha256()
    # symbolic sizes enter the key as expressions (``s0``), so one entry serves every size
    inputs = [
        (tuple(map(str, x.shape)), tuple(map(str, x.stride())), str(x.dtype), x.device.type)
        if isinstance(x, torch.Tensor) else ("int", str(x))
        for x in example_inputs
        if isinstance(x, (torch.Tensor, torch.SymInt))
    ]
    for part in (
        f"ember.inductor graph cache {FORMAT}",
        source_fingerprint(Path(__file__).resolve().parent),
        torch.__version__,
        options_key,
        repr(outside_lowerings()),
        repr(inputs),
        graph,
    ):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


# --- entries -------------------------------------------------------------------------------------


def _encode_const(value: Any) -> Any:
    from ember.ir import encode_value, target_name

    if isinstance(value, torch._ops.OpOverload):
        name = target_name(value)
        if _decode_const({"op": name}) is not value:  # must load back as the same op
            raise ValueError(f"op {name} does not resolve back to itself")
        return {"op": name}
    encoded = encode_value(value)
    if _decode_const({"value": encoded}) != value:
        raise ValueError(f"constant {value!r} does not decode back to itself")
    return {"value": encoded}


def _decode_const(data: Any) -> Any:
    from ember.ir import decode_value, resolve_target

    if "op" in data:
        return resolve_target(data["op"])
    return decode_value(data["value"])


def _dump(art: GraphArtifact) -> str:
    from ember.ir import encode_value

    return json.dumps(
        {
            "format": FORMAT,
            "wrapper_source": art.wrapper_source,
            "kernels": {
                name: {
                    "source": src,
                    "args": art.kernel_args[name],
                    "meta": art.kernel_meta.get(name, {}),
                    "sizes": art.kernel_sizes.get(name, []),
                }
                for name, src in art.kernel_sources.items()
            },
            "consts": [_encode_const(c) for c in art.consts],
            "constant_targets": art.constant_targets,
            "inputs": [[_dims(s), _dims(st), encode_value(dt)] for s, st, dt in art.input_layouts],
            "n_size_inputs": art.n_size_inputs,
            "symbolic": art.symbolic,
            "out_spec": None if art.out_spec is None else treespec_dumps(art.out_spec),
            "n_outputs": art.n_outputs,
            "fallbacks": art.fallbacks,
            "externs": [list(e) for e in art.externs],
        }
    )


def _load(text: str) -> GraphArtifact:
    from ember.ir import decode_value

    d = json.loads(text)
    if d.get("format") != FORMAT:
        raise ValueError(f"entry format {d.get('format')!r}, expected {FORMAT}")
    kernels = d["kernels"]
    inputs = []
    for size, stride, dtype in d["inputs"]:
        dt = decode_value(dtype)
        if not isinstance(dt, torch.dtype):
            raise ValueError(f"input dtype {dtype!r}")
        inputs.append((_read_dims(size), _read_dims(stride), dt))
    return GraphArtifact(
        wrapper_source=d["wrapper_source"],
        kernel_sources={name: k["source"] for name, k in kernels.items()},
        kernel_args={name: list(k["args"]) for name, k in kernels.items()},
        kernel_meta={name: dict(k["meta"]) for name, k in kernels.items() if k["meta"]},
        consts=[_decode_const(c) for c in d["consts"]],
        constant_targets=dict(d["constant_targets"]),
        input_layouts=inputs,
        out_spec=None if d["out_spec"] is None else treespec_loads(d["out_spec"]),
        n_outputs=int(d["n_outputs"]),
        fallbacks={str(k): int(v) for k, v in d["fallbacks"].items()},
        externs=[(str(op), str(reason)) for op, reason in d["externs"]],
        kernel_sizes={name: list(k.get("sizes", [])) for name, k in kernels.items()},
        n_size_inputs=int(d.get("n_size_inputs", 0)),
        symbolic=bool(d.get("symbolic", False)),
    )


def _dims(values: Any) -> list[Any]:
    """Sizes for JSON: ints, and symbolic ones as expression text."""
    return [v if isinstance(v, int) else sym_text(v) for v in values]


def _read_dims(values: Any) -> tuple[Any, ...]:
    if all(isinstance(v, int) for v in values):
        return tuple(values)
    from .sizes import as_size  # symbolic sizes only: sympy is imported with them

    return tuple(v if isinstance(v, int) else as_size(parse_sym_expr(v)) for v in values)


def lookup(cache_dir: str, key: str) -> GraphArtifact | None:
    """The entry for ``key``, or None; a corrupted, truncated or unreadable entry is deleted."""
    return load_entry(entry_path(cache_dir, "graphs", key), _load, log)


def store(cache_dir: str, key: str, art: GraphArtifact) -> bool:
    """Write the entry atomically; False (nothing written) when part of it cannot be encoded."""
    try:
        text = _dump(art)
    except Exception as e:  # an op or constant the IR's value encoding does not know
        log.debug("ember.inductor: graph not cached (%s: %s)", type(e).__name__, e)
        return False
    return store_entry(entry_path(cache_dir, "graphs", key), text, _load, log)
