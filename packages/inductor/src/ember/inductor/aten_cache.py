"""On-disk cache of inference graphs traced to ATen (``aten_trace.trace_to_aten``).

The inference path of the backend traces the frontend's torch-level graph to
ATen on fake tensors before the graph cache can be asked, and torch's
``FakeTensorMode`` imports all of TorchDynamo the first time it is made (1-2 s
of a warm start). This cache keeps the traced graph as ember.ir JSON, keyed
by the torch-level graph's serialization (``graph_key_text``), the layouts of
the inputs and of the weights, torch's version and ember.inductor's source,
so a second process rebuilds the ATen graph with ``ember.ir.to_fx`` and no
fake tensor. Weights are never stored: the traced graph reads them as
``_param<k>`` constants, bound again from the live module in the same order
``trace_to_aten`` uses (the entry names the weight behind each). Entries follow ADR 0007 (checksummed, atomic,
rebuilt with a warning when damaged); ``graph_cache=False`` or
``EMBER_GRAPH_CACHE=0`` turn it off with the graph cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import torch
import torch.fx

import ember.ir as ir
from ember.ir.cache_entry import (
    entry_path,
    graph_key_text,
    load_entry,
    source_fingerprint,
    store_entry,
)

from .aten_trace import trace_to_aten

log = logging.getLogger("ember.inductor")

#: Bumped when the entry layout changes.
FORMAT = 1


def _weights(gm: torch.fx.GraphModule) -> dict[str, torch.Tensor]:
    """The weights by name, in the order ``trace_to_aten`` numbers them (``_param<k>``)."""
    out = {n: p.detach() for n, p in gm.named_parameters()}
    out.update({n: b.detach() for n, b in gm.named_buffers()})
    return out


def _layout(x: torch.Tensor) -> tuple[Any, ...]:
    return tuple(x.shape), tuple(x.stride()), str(x.dtype), str(x.device), x.storage_offset()


def aten_key(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> str | None:
    if not all(isinstance(x, torch.Tensor) for x in example_inputs):
        return None
    graph = graph_key_text(gm, log)
    if graph is None:
        return None
    h = hashlib.sha256()
    for part in (
        f"ember.inductor aten trace {FORMAT}",
        source_fingerprint(Path(__file__).resolve().parent),
        torch.__version__,
        repr([_layout(x) for x in example_inputs]),
        repr(sorted((n, _layout(w)) for n, w in _weights(gm).items())),
        graph,
    ):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _parse(text: str) -> tuple[ir.GraphIR, list[str]]:
    data = json.loads(text)
    if data.get("format") != FORMAT:
        raise ValueError(f"entry format {data.get('format')!r}, expected {FORMAT}")
    return ir.loads(data["graph"]), [str(n) for n in data["weights"]]


def cached_trace_to_aten(
    gm: torch.fx.GraphModule, example_inputs: list[Any], cache_dir: str | None
) -> torch.fx.GraphModule:
    """``trace_to_aten(gm, example_inputs)``, from the disk cache when it was traced before."""
    key = aten_key(gm, example_inputs) if cache_dir is not None else None
    if key is None or cache_dir is None:
        return trace_to_aten(gm, example_inputs)
    path = entry_path(cache_dir, "aten", key)
    stored = load_entry(path, _parse, log)
    if stored is not None:
        graph_ir, names = stored
        live = _weights(gm)
        try:
            # ``_param<k>`` of the stored trace is the weight named ``names[k]`` (module
            # rebuilding may register a module's tensors in another order).
            weights = {f"_param{k}": live[name] for k, name in enumerate(names)}
            return ir.to_fx(graph_ir.with_tensors({name: weights[name] for name in graph_ir.tensor_metas()}))
        except (ir.FormatError, KeyError) as e:
            log.warning("aten trace cache entry %s does not fit this graph (%s); tracing again", path, e)
    aten_gm = trace_to_aten(gm, example_inputs)
    try:
        text = json.dumps({
            "format": FORMAT,
            "graph": ir.dumps(ir.from_fx(aten_gm, dialect="aten")),
            "weights": list(_weights(gm)),
        })
    except (ir.FormatError, TypeError, ValueError) as e:
        log.debug("aten trace not cached (%s: %s)", type(e).__name__, e)
        return aten_gm
    store_entry(path, text, _parse, log)
    return aten_gm
