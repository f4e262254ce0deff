"""``EMBER_COMPILE_DEBUG=1``: write aotgrad's graphs to the debug folder (``ember.ir.debug``).

    <folder>/
        joint.txt  forward.txt  backward.txt  (or inference.txt)   readable code
        forward/  backward/  (or inference/)                        ember.ir GraphIR
        compiled_forward/  compiled_backward/  (or compiled_inference/)
                                     named for the graph compiler (ember.inductor writes there)

``<folder>`` is the one the frontend named in the source graph's ``meta``
(ember.dynamo: ``<frame folder>/graph_<i>_backend``); for aotgrad used on its
own it is ``<base>/aot/<pid>_<n>_<function>``, with the variables read once
per ``aot_function`` / ``aot_module`` / ``aot_autograd``
(:func:`debug_dir_from_env`, the path then travels in ``AotOptions.debug_dir``).
The graphs are written whether they were traced or loaded from the plan
cache (the joint graph only when traced). Writing never breaks a compile:
failures are noted in ``errors.txt``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from pathlib import Path

import torch.fx as fx

import ember.ir as ir
from ember.aotgrad.exchange import to_graph_ir

#: Numbers the folders of aotgrad used on its own (process-wide, like the run folder).
_COUNTER = itertools.count()


def debug_dir_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """``<base>/aot`` when ``EMBER_COMPILE_DEBUG=1``, else ``None``."""
    return ir.debug.package_folder("aot", environ)


def own_folder(base: str, name: str) -> Path:
    """A fresh folder under ``base`` for one compile of ``name`` (aotgrad on its own)."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:60]
    return Path(base) / f"{os.getpid()}_{next(_COUNTER):03d}_{safe}"


def write_graphs(folder: Path, graphs: Mapping[str, fx.GraphModule]) -> Path:
    """Write each graph as readable code and (except the joint) as GraphIR; the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    for kind, gm in graphs.items():
        try:
            (folder / f"{kind}.txt").write_text(gm.print_readable(print_output=False))
            if kind != "joint":
                ir.save(to_graph_ir(gm), folder / kind)
        except Exception as e:  # a debug aid must never break the compile
            errors.append(f"{kind}: {type(e).__name__}: {e}")
    if errors:
        (folder / "errors.txt").write_text("\n".join(errors) + "\n")
    return folder
