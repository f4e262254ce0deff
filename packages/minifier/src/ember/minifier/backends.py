"""Backends by name: ``ember.backends`` entry points or ``module:attribute`` import paths.

The minifier never imports ember.dynamo, ember.aotgrad or ember.inductor: a
backend is whatever the ``ember.backends`` entry-point group names, or a
callable with the torch.compile backend signature
``backend(gm, example_inputs) -> compiled``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.fx as fx

from ember.minifier.errors import BackendNotFound

BackendFn = Callable[[fx.GraphModule, list[Any]], Callable[..., Any]]


@dataclass(frozen=True, slots=True)
class BackendRef:
    """How a fresh process finds a backend again.

    ``name`` is an entry-point name or ``module:qualname``; ``path`` is a
    directory to put on ``sys.path`` first (for backends defined in scripts or tests).
    """

    name: str
    path: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path}


def available_backends() -> list[str]:
    return [ep.name for ep in importlib.metadata.entry_points(group="ember.backends")]


def resolve(name: str, path: str | None = None) -> BackendFn:
    """The backend called ``name``: an ``ember.backends`` entry point or ``module:attr``."""
    for ep in importlib.metadata.entry_points(group="ember.backends"):
        if ep.name == name:
            fn: BackendFn = ep.load()
            return fn
    if ":" in name:
        module, _, qual = name.partition(":")
        if path and path not in sys.path:
            sys.path.insert(0, path)
        try:
            obj: Any = importlib.import_module(module)
            for part in qual.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            pass
        else:
            return obj  # type: ignore[no-any-return]
    raise BackendNotFound(name, available_backends())


def ref_for(backend: str | BackendFn) -> BackendRef | None:
    """A `BackendRef` a fresh process can resolve, or ``None`` (e.g. a lambda or closure)."""
    if isinstance(backend, str):
        if backend in available_backends() or ":" not in backend:
            return BackendRef(backend)
        backend = resolve(backend)
    module = getattr(backend, "__module__", None)
    qual = getattr(backend, "__qualname__", None)
    if not module or not qual or "<" in qual:
        return None
    for ep in importlib.metadata.entry_points(group="ember.backends"):
        if ep.value.replace(" ", "") == f"{module}:{qual}":
            return BackendRef(ep.name)
    mod = sys.modules.get(module)
    file = getattr(mod, "__file__", None)
    path = str(Path(file).resolve().parent) if file and module != "__main__" else None
    if module == "__main__":
        return None
    return BackendRef(f"{module}:{qual}", path)


def backend_label(backend: str | BackendFn) -> str:
    if isinstance(backend, str):
        return f"backend {backend!r}"
    return f"backend {getattr(backend, '__qualname__', repr(backend))!r}"


def as_callable(backend: str | BackendFn) -> BackendFn:
    return resolve(backend) if isinstance(backend, str) else backend


def call_compiled(compiled: Callable[..., Any], inputs: Sequence[Any]) -> Any:
    """Call a compiled graph, honouring the boxed calling convention (``_boxed_call``)."""
    if getattr(compiled, "_boxed_call", False):
        return compiled(list(inputs))
    return compiled(*inputs)
