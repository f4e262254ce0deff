"""``EMBER_COMPILE_DEBUG=1``: write aotgrad's graphs to a debug directory.

    <EMBER_COMPILE_DEBUG_DIR or ./ember_debug>/aot/<pid>_<n>_<function>/
        joint.txt  forward.txt  backward.txt  (or inference.txt)   readable code
        forward/  backward/  (or inference/)                        ember.ir GraphIR

The variables are read once per ``aot_function`` / ``aot_module`` /
``aot_autograd`` (:func:`debug_dir_from_env`); the path then travels in
``AotOptions.debug_dir``. Writing never breaks a compile: failures are noted
in ``errors.txt``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from pathlib import Path

import torch.fx as fx

import ember.ir as ir
from ember.aotgrad.exchange import to_graph_ir

_COUNTER = itertools.count()


def debug_dir_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """``<base>/aot`` when ``EMBER_COMPILE_DEBUG=1``, else ``None``."""
    env = os.environ if environ is None else environ
    if env.get("EMBER_COMPILE_DEBUG", "0") not in ("1", "true", "True"):
        return None
    base = env.get("EMBER_COMPILE_DEBUG_DIR") or os.path.join(os.getcwd(), "ember_debug")
    return os.path.join(base, "aot")


def write_graphs(base: str, name: str, graphs: Mapping[str, fx.GraphModule]) -> Path:
    """Write each graph as readable code and (except the joint) as GraphIR; the folder."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:60]
    folder = Path(base) / f"{os.getpid()}_{next(_COUNTER):03d}_{safe}"
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
