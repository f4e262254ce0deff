"""The PEP 523 path: capture every user frame called inside ``with optimize(...)``.

A small C extension (``eval_frame_hook.c``) replaces the interpreter's
frame-evaluation function while a context is active. For each Python
function frame it asks :func:`on_frame` first, which either runs the frame
through the active runtime's cache (capturing it on a miss, exactly like
the function-level path) or tells the hook to run it as it is.

The extension is compiled on first use with the system C compiler and
cached (``EMBER_CACHE_DIR``, default ``~/.cache/ember``), keyed by a hash of
its source and the Python build. It supports CPython 3.11; elsewhere (or
without a compiler) :func:`load` returns ``None`` and :func:`unavailable`
says why, and the function-level path keeps working.

Frames never captured: code in the standard library, site-packages
(torch included), ember's own packages, FX-generated graph code, and code
objects marked with ``mark_skip`` (the transformed code ember runs, and
frames capture gave up on).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import subprocess
import sys
import sysconfig
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .logs import get_logger

log = get_logger("dynamo")

_SOURCE = Path(__file__).with_name("eval_frame_hook.c")
_MODULE_NAME = "ember_eval_frame_hook"

_state: dict[str, Any] = {"module": None, "error": None, "tried": False}
#: The runtimes of the active ``with optimize(...)`` blocks, innermost last.
ACTIVE: list[Any] = []
_WRAPPERS: dict[int, tuple[Any, Any]] = {}
#: id(code) -> code of functions given to ``disable``: their frames always run as they are.
DISABLED_CODES: dict[int, types.CodeType] = {}  # (id(runtime), id(func)) hash -> (func, CompiledFunction)


def _cache_dir() -> Path:
    base = os.environ.get("EMBER_CACHE_DIR") or os.path.join(Path.home(), ".cache", "ember")
    return Path(base) / "eval_frame_hook"


def _build() -> types.ModuleType:
    if sys.implementation.name != "cpython" or sys.version_info[:2] != (3, 11):
        raise RuntimeError(f"the PEP 523 hook supports CPython 3.11 only, this is {sys.version.split()[0]}")
    source = _SOURCE.read_bytes()
    key = hashlib.sha256(source + sys.version.encode() + sys.executable.encode()).hexdigest()[:16]
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    target = _cache_dir() / f"{_MODULE_NAME}_{key}{suffix}"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        include = sysconfig.get_paths()["include"]
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        cmd = [
            os.environ.get("CC", "gcc"), "-O2", "-shared", "-fPIC", f"-I{include}",
            str(_SOURCE), "-o", str(tmp),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"building the frame hook failed: {' '.join(cmd)}\n{done.stderr[-2000:]}")
        os.replace(tmp, target)  # atomic: concurrent builders never load a half-written file
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, target)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load the frame hook from {target}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load() -> types.ModuleType | None:
    """The compiled hook module, building it on first use; ``None`` if unavailable."""
    if not _state["tried"]:
        _state["tried"] = True
        try:
            _state["module"] = _build()
        except Exception as exc:
            _state["error"] = f"{type(exc).__name__}: {exc}"
            log.info("PEP 523 frame hook unavailable: %s", _state["error"])
    return loaded()


def unavailable() -> str | None:
    """Why the hook cannot be used (``None`` when it can)."""
    load()
    return _state["error"] if _state["module"] is None else None


def loaded() -> types.ModuleType | None:
    """The hook module if it was already built (never builds)."""
    module = _state["module"]
    return module if isinstance(module, types.ModuleType) else None


# -- which frames to leave alone ------------------------------------------------


def _skip_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    import ember

    roots.update(str(p) for p in getattr(ember, "__path__", []))
    return tuple(sorted(os.path.join(os.path.realpath(r), "") for r in roots))


_SKIP_ROOTS: tuple[str, ...] = ()


def _is_library_code(code: types.CodeType) -> bool:
    global _SKIP_ROOTS
    name = code.co_filename
    if name.startswith("<"):
        # FX graph code (<eval_with_key>), frozen modules, dataclass/namedtuple methods
        # (<string>), ember's generated code: none of it is the user's model code.
        return True
    if not _SKIP_ROOTS:
        _SKIP_ROOTS = _skip_roots()
    return os.path.realpath(name).startswith(_SKIP_ROOTS)


def on_frame(func: types.FunctionType, values: tuple[Any, ...]) -> Any:
    """The hook's callback: run ``func``'s frame through the innermost active runtime."""
    hook = _state["module"]
    code = func.__code__
    if not ACTIVE:
        return hook.SKIP
    if _is_library_code(code):
        hook.mark_skip(code)
        return hook.SKIP
    if id(code) in DISABLED_CODES:
        hook.mark_skip(code)
        return hook.SKIP
    runtime = ACTIVE[-1]
    key = hash((id(runtime), id(func)))
    found = _WRAPPERS.get(key)
    if found is None or found[0] is not func or found[1].runtime is not runtime:
        from .eval_frame import CompiledFunction

        found = (func, CompiledFunction(func, runtime))
        _WRAPPERS[key] = found
    return found[1].runner_for(values, hook.SKIP)


@contextmanager
def suspended() -> Iterator[None]:
    """No frame capture inside (compiles, ``disable``d functions)."""
    hook = _state["module"]
    if hook is None or hook.get_callback() is None:
        yield
        return
    previous = hook.set_callback(None)
    try:
        yield
    finally:
        hook.set_callback(previous)


def enter(runtime: Any) -> None:
    """Start capturing frames with ``runtime`` (``optimize(...).__enter__``)."""
    hook = load()
    if hook is None:
        raise TypeError(
            "`with ember.dynamo.optimize(...):` needs the PEP 523 frame hook, which is unavailable "
            f"here ({_state['error']}); decorate the function instead: "
            "fn = ember.dynamo.optimize(backend)(fn)"
        )
    ACTIVE.append(runtime)
    hook.set_callback(on_frame)


def exit(runtime: Any) -> None:
    """Stop capturing with ``runtime``; the enclosing context (if any) takes over."""
    hook = _state["module"]
    if runtime in ACTIVE:
        ACTIVE.reverse()
        ACTIVE.remove(runtime)
        ACTIVE.reverse()
    if hook is not None and not ACTIVE:
        hook.set_callback(None)
        _WRAPPERS.clear()


def mark_skip(code: types.CodeType) -> None:
    """Never intercept frames of ``code`` (no-op when the hook is not built)."""
    hook = _state["module"]
    if hook is not None:
        hook.mark_skip(code)


def guard_callable(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """``compiled`` run with capture suspended, if a context is active now; else as is."""
    hook = _state["module"]
    if hook is None or not ACTIVE:
        return compiled

    def run_uncaptured(*args: Any, **kwargs: Any) -> Any:
        previous = hook.set_callback(None)
        try:
            return compiled(*args, **kwargs)
        finally:
            hook.set_callback(previous)

    return run_uncaptured


if log.isEnabledFor(logging.DEBUG):
    log.debug("frame hook source %s", _SOURCE)
