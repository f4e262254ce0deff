"""Trace rules: which callables and frames capture treats specially.

The registries behind ``disable``, ``allow_in_graph`` and
``disallow_in_graph`` (filled by users, read by capture and the frame hook),
the runtime's own control functions (``graph_break()``, ``is_compiling()``),
and the files whose frames the PEP 523 hook never captures (the standard
library, site-packages with torch in it, ember itself, generated code).

This module imports nothing from ember.dynamo: everything else may read it.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import types
from collections.abc import Callable
from typing import Any

import torch

import ember

#: id(fn) -> fn; capture puts calls to these in the graph as one opaque node.
ALLOWED_IN_GRAPH: dict[int, Any] = {}
#: id(fn) -> fn; capture never puts calls to these in a graph (a break instead).
DISALLOWED_IN_GRAPH: dict[int, Any] = {}
#: id(code) -> code of functions given to ``disable``: their frames run as they are.
DISABLED_CODES: dict[int, types.CodeType] = {}
#: id(fn) -> (fn, kind) of the runtime's control functions (``graph_break``, ``is_compiling``).
CONTROL_FUNCTIONS: dict[int, tuple[Any, str]] = {}


def graph_break() -> None:
    """Force a graph break here when captured; does nothing when run eagerly."""


def register_control(fn: Any, kind: str) -> None:
    """Mark ``fn`` as a control function of ``kind`` ("graph_break" | "is_compiling")."""
    CONTROL_FUNCTIONS[id(fn)] = (fn, kind)


register_control(graph_break, "graph_break")
# torch's own "am I being compiled?" queries: True while ember traces, as under
# TorchDynamo, so libraries take their compile-friendly paths.
for _query in (torch.compiler.is_compiling, torch.compiler.is_dynamo_compiling):
    register_control(_query, "is_compiling")


#: torch modules whose Python functions are traced like user code (inlined),
#: not put in the graph as one call: helpers, decorators' wrappers.
INLINED_TORCH_MODULES = frozenset({"torch.nn.modules.utils", "torch.utils._contextlib"})


def is_inlined_torch_function(fn: Any) -> bool:
    return isinstance(fn, types.FunctionType) and (
        fn.__module__ in INLINED_TORCH_MODULES or is_torch_module_method(fn)
    )


def is_torch_module_method(fn: types.FunctionType) -> bool:
    """A method of a torch.nn module class read from the class (``nn.LayerNorm.forward``,
    called as ``nn.LayerNorm.forward(self, x)`` by a subclass that overrides ``forward``):
    traced like the module's own code, not put in the graph as one call taking a module."""
    module = fn.__module__ or ""
    if not module.startswith("torch.nn.modules."):
        return False
    owner_name, _, name = fn.__qualname__.rpartition(".")
    owner = getattr(sys.modules.get(module), owner_name, None)
    return (
        isinstance(owner, type)
        and issubclass(owner, torch.nn.Module)
        and owner is not torch.nn.Module  # its machinery (__call__, hooks, state) stays as it is
        and owner.__dict__.get(name) is fn
    )


def allow_in_graph(fn: Any) -> None:
    ALLOWED_IN_GRAPH[id(fn)] = fn
    DISALLOWED_IN_GRAPH.pop(id(fn), None)


def disallow_in_graph(fn: Any) -> None:
    DISALLOWED_IN_GRAPH[id(fn)] = fn
    ALLOWED_IN_GRAPH.pop(id(fn), None)


def disable_code(code: types.CodeType) -> None:
    DISABLED_CODES[id(code)] = code


def _torch_disabled(fn: Any) -> str | None:
    """``torch.compiler.disable``'s mark on its wrapper: ``"frame"`` for
    ``recursive=False``, ``"all"`` otherwise, ``None`` for other callables."""
    if getattr(fn, "_torchdynamo_disable", False) is not True:
        return None
    return "frame" if getattr(fn, "_torchdynamo_disable_recursive", True) is False else "all"


def is_frame_disabled(fn: Any) -> bool:
    """Whether ``fn`` is ``disable(recursive=False)``'s (ember's or torch.compiler's):
    only its own frame runs eagerly."""
    return getattr(fn, "_ember_disabled", None) == "frame" or _torch_disabled(fn) == "frame"


def is_torch_disabled(fn: Any) -> bool:
    """Whether ``fn`` is ``torch.compiler.disable(fn)``'s wrapper (recursive): it runs
    eagerly with every frame below it, which its wrapper does not tell ember's hook."""
    return _torch_disabled(fn) == "all"


def is_disabled(fn: Any) -> bool:
    """Whether capture must leave ``fn`` alone (``ember.dynamo.disable`` or
    ``torch.compiler.disable`` was applied to it)."""
    return bool(getattr(fn, "_ember_disabled", False)) or _torch_disabled(fn) is not None


def is_allowed_in_graph(fn: Any) -> bool:
    return id(fn) in ALLOWED_IN_GRAPH and ALLOWED_IN_GRAPH[id(fn)] is fn


def is_disallowed_in_graph(fn: Any) -> bool:
    return id(fn) in DISALLOWED_IN_GRAPH and DISALLOWED_IN_GRAPH[id(fn)] is fn


def control_kind(value: Any) -> str | None:
    """How a callable met while tracing must be treated, by the registries.

    ``"graph_break"``, ``"is_compiling"``, ``"disabled"``, ``"allowed"``,
    ``"disallowed"``, or ``None`` (trace it normally).
    """
    hit = CONTROL_FUNCTIONS.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    try:
        if is_disabled(value):
            code = getattr(getattr(value, "_torchdynamo_orig_callable", None), "__code__", None)
            if isinstance(code, types.CodeType):
                # torch.compiler.disable's function: its own frame is never captured,
                # however it is reached (its wrapper switches off TorchDynamo only)
                disable_code(code)
            return "disabled"
        if is_allowed_in_graph(value):
            return "allowed"
        if is_disallowed_in_graph(value):
            return "disallowed"
    except TypeError:
        return None
    return None


# -- frames the PEP 523 hook leaves alone ----------------------------------------


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.update(str(p) for p in ember.__path__)  # every installed ember package
    return tuple(sorted(os.path.join(os.path.realpath(r), "") for r in roots))


#: Directories whose code is never user code (computed once, at import).
LIBRARY_ROOTS: tuple[str, ...] = _library_roots()


def is_library_code(code: types.CodeType) -> bool:
    """Code the frame hook never captures: libraries, ember, generated code."""
    name = code.co_filename
    if name.startswith("<"):
        # FX graph code (<eval_with_key>), frozen modules, dataclass/namedtuple methods
        # (<string>), ember's generated code: none of it is the user's model code.
        return True
    return os.path.realpath(name).startswith(LIBRARY_ROOTS)


#: installed packages whose frames are never captured, not even below a frame that
#: fell back to eager (``is_never_captured``): torch itself, its stack, test runners
NEVER_CAPTURED_PACKAGES = (
    "torch", "torchgen", "functorch", "triton", "numpy", "sympy", "mpmath", "networkx",
    "bytecode", "safetensors", "_pytest", "pytest", "pluggy", "xdist", "execnet",
)  # fmt: skip


def _site_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("purelib", "platlib") if k in paths}
    return tuple(sorted(os.path.join(os.path.realpath(r), "") for r in roots))


def _never_captured_roots() -> tuple[str, ...]:
    roots = {str(p) for p in ember.__path__}
    for site in _site_roots():
        roots.update(os.path.join(site, pkg) for pkg in NEVER_CAPTURED_PACKAGES)
    return tuple(sorted(os.path.join(os.path.realpath(r), "") for r in roots))


def _stdlib_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib") if k in paths}
    return tuple(sorted(os.path.join(os.path.realpath(r), "") for r in roots))


#: Directories whose code is never captured, even below an eager fallback.
NEVER_CAPTURED_ROOTS: tuple[str, ...] = _never_captured_roots()
#: The standard library's directories, and the installed packages' (which a
#: virtual environment's ``platstdlib`` contains)
STDLIB_ROOTS: tuple[str, ...] = _stdlib_roots()
SITE_ROOTS: tuple[str, ...] = _site_roots()


def is_never_captured(code: types.CodeType) -> bool:
    """Code no frame capture ever takes: generated code, the standard library, ember,
    torch and the packages in ``NEVER_CAPTURED_PACKAGES``. Other installed libraries
    (transformers) are captured below a frame that fell back to eager, as under
    TorchDynamo, but not by ``with optimize():`` (``is_library_code``)."""
    return _never_captured_file(code.co_filename)


@functools.lru_cache(maxsize=4096)
def _never_captured_file(name: str) -> bool:
    if name.startswith("<"):
        return True
    path = os.path.realpath(name)
    if path.startswith(NEVER_CAPTURED_ROOTS):
        return True
    return path.startswith(STDLIB_ROOTS) and not path.startswith(SITE_ROOTS)


def is_disabled_code(code: types.CodeType) -> bool:
    return DISABLED_CODES.get(id(code)) is code


class GraphCallable:
    """A callable made while tracing, as an FX ``call_function`` target.

    FX prints a target whose ``__module__`` is torch's by its qualified name
    (``torch.sum``), which for ``vmap(torch.sum)`` -- ``functools.wraps`` copies
    the name -- would call ``torch.sum`` itself. This wrapper is ember's, so FX
    keeps the object and calls it.
    """

    def __init__(self, fn: Callable[..., Any], label: str) -> None:
        self.fn = fn
        self.__name__ = label.replace("(", "_").replace(")", "").replace(".", "_")
        self.__qualname__ = self.__name__
        self.label = label

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<ember graph callable {self.label}>"


def names_itself(fn: Any) -> bool:
    """Whether ``fn`` is what its ``__module__`` and ``__qualname__`` name (a
    ``functools.wraps`` wrapper of a torch function is not)."""
    obj: Any = sys.modules.get(getattr(fn, "__module__", None) or "")
    for part in str(getattr(fn, "__qualname__", "<>")).split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    return obj is fn


def as_graph_target(fn: Any) -> Any:
    """``fn`` as a node target FX calls as itself (see ``GraphCallable``)."""
    if str(getattr(fn, "__module__", "")).split(".")[0] == "torch" and not names_itself(fn):
        return GraphCallable(fn, str(getattr(fn, "__name__", "fn")))
    return fn
