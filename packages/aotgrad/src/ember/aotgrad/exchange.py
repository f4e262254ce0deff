"""Forward and backward graphs as ember.ir ATen-dialect graphs.

aotgrad hands its graphs to compilers in-process as live GraphModules; with
``AotOptions(exchange_dir=...)`` every graph is first written to disk as an
ember.ir ``GraphIR`` (``graph.json`` + ``weights.safetensors``) and read back,
so a compiler (ember.inductor, a minifier repro) sees exactly what the
serialized contract carries.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
import torch.fx as fx

import ember.ir as ir


def example_inputs(gm: fx.GraphModule) -> list[torch.Tensor]:
    """The (fake) values of ``gm``'s placeholders, recorded while tracing."""
    return [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]


def to_graph_ir(gm: fx.GraphModule) -> ir.GraphIR:
    """``gm`` (a forward, backward or inference graph) as an ATen-dialect GraphIR."""
    return ir.from_fx(gm, example_inputs(gm), dialect="aten")


def round_trip(gm: fx.GraphModule, directory: str | Path, name: str) -> fx.GraphModule:
    """Save ``gm`` as GraphIR under a fresh ``directory/name_*`` and load it back.

    The loaded module keeps ``meta["val"]`` of its placeholders (copied from
    ``gm``) so compilers can read input metadata as they do for live graphs.
    """
    Path(directory).mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"{name}_", dir=directory))
    ir.save(to_graph_ir(gm), path)
    loaded = ir.to_fx(ir.load(path))
    for new, old in zip((n for n in loaded.graph.nodes if n.op == "placeholder"),
                        (n for n in gm.graph.nodes if n.op == "placeholder")):
        new.meta.setdefault("val", old.meta.get("val"))
    return loaded
