"""``EMBER_COMPILE_DEBUG=1``: where every package writes its debug output.

One folder per process run, and in it one folder per compiled frame that
holds what every stage made of it::

    <EMBER_COMPILE_DEBUG_DIR or ./ember_debug>/run_<YYYYmmdd_HHMMSS>_<pid>/
        frame_000_toy_example/            ember.dynamo: bytecode, guards, graph_0.txt, graph_0/
            graph_0_backend/              what the backend made of graph 0:
                joint.txt forward.txt backward.txt forward/ backward/   ember.aotgrad
                compiled_forward/ compiled_backward/                    ember.inductor (per graph)
                output_code.py kernel0.cpp                              ember.inductor (inference)

A frontend tells the stages below where a graph's output goes by the graph
itself: ``gm.meta[DEBUG_DIR_KEY]`` (:func:`set_debug_dir`). Each stage that
derives new graphs from it carries the entry on (:func:`debug_dir_of`,
:func:`set_debug_dir`), so ember.aotgrad and ember.inductor write into
ember.dynamo's frame folder without importing ember.dynamo, and a graph
compiled later (aotgrad compiles on its first call, from its plan cache or
not) still lands there. A stage used on its own, with no such entry, writes
under ``<base>/<package>/`` (``aot``, ``inductor``), beside the run folders.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The ``GraphModule.meta`` key naming the folder a graph's debug output goes to.
DEBUG_DIR_KEY = "ember_debug_dir"


def debug_base_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The base folder when ``EMBER_COMPILE_DEBUG=1`` (``EMBER_COMPILE_DEBUG_DIR``,
    default ``./ember_debug``), else ``None``."""
    env = os.environ if environ is None else environ
    if env.get("EMBER_COMPILE_DEBUG", "0") not in ("1", "true", "True"):
        return None
    return env.get("EMBER_COMPILE_DEBUG_DIR") or os.path.join(os.getcwd(), "ember_debug")


@functools.cache
def run_folder(base: str) -> Path:
    """This process's folder under ``base`` (made once; the same for every package)."""
    stamp = time.strftime("%Y%m%d_%H%M%S")
    run = Path(base) / f"run_{stamp}_{os.getpid()}"
    run.mkdir(parents=True, exist_ok=True)
    return run


def package_folder(package: str, environ: Mapping[str, str] | None = None) -> str | None:
    """``<base>/<package>`` for a stage used on its own, when ``EMBER_COMPILE_DEBUG=1``."""
    base = debug_base_from_env(environ)
    if base is None:
        return None
    return os.path.join(base, package)


def debug_dir_of(gm: Any) -> str | None:
    """The folder a frontend named for this graph's debug output, if any."""
    meta = getattr(gm, "meta", None)
    if isinstance(meta, dict):
        value = meta.get(DEBUG_DIR_KEY)
        if isinstance(value, str):
            return value
    return None


def set_debug_dir(gm: Any, folder: str | os.PathLike[str] | None) -> None:
    """Name (or with ``None``, leave unnamed) the folder for ``gm``'s debug output."""
    meta = getattr(gm, "meta", None)
    if folder is not None and isinstance(meta, dict):
        meta[DEBUG_DIR_KEY] = os.fspath(folder)
