"""The PEP 523 path's C side: build, load and switch the frame-evaluation hook.

A small C extension (``eval_frame_hook.c``) replaces the interpreter's
frame-evaluation function while a callback is set. For each Python function
frame it calls ``callback(func, bound_args)``, which returns a runner (run
this instead of the frame) or ``SKIP`` (run the frame as it is). The
callback is the runtime's (``function_entry.RuntimeState.on_frame``); this
module only builds the extension and switches it.

The extension is compiled on first use with the system C compiler and
cached (``EMBER_CACHE_DIR``, default ``~/.cache/ember``), keyed by a hash of
its source and the Python build, then imported into ``sys.modules`` under
``ember_eval_frame_hook``. It supports CPython 3.11 to 3.13; elsewhere (or
without a compiler) :func:`load` returns ``None`` and :func:`unavailable` says why,
and the function-level path keeps working.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import types
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .logs import get_logger

log = get_logger("dynamo")

_SOURCE = Path(__file__).with_name("eval_frame_hook.c")
_MODULE_NAME = "ember_eval_frame_hook"

#: The CPython versions whose frame layout ``eval_frame_hook.c`` knows.
SUPPORTED = ((3, 11), (3, 12), (3, 13))

#: ``callback(func, bound_args) -> runner | module.SKIP``
FrameCallback = Callable[[types.FunctionType, tuple[Any, ...]], Any]


def _cache_dir() -> Path:
    base = os.environ.get("EMBER_CACHE_DIR") or os.path.join(Path.home(), ".cache", "ember")
    return Path(base) / "eval_frame_hook"


def _build() -> types.ModuleType:
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in SUPPORTED:
        raise RuntimeError(
            f"the PEP 523 hook supports CPython 3.11 to 3.13 (the frame layout it reads), "
            f"this is {sys.implementation.name} {sys.version.split()[0]}"
        )
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
    sys.modules[_MODULE_NAME] = module
    return module


#: Code objects marked "skip" before the hook was loaded (the function-level path captures
#: without it): applied when it loads, so an eager fallback's hook later never takes
#: ember's transformed code for a user frame and captures it again.
#: By id: code objects hash by value, and some hold unhashable constants (slices).
_PENDING_SKIPS: dict[int, weakref.ref[types.CodeType]] = {}


@functools.cache
def _load_once() -> tuple[types.ModuleType | None, str | None]:
    try:
        module = _build()
        for ref in list(_PENDING_SKIPS.values()):
            code = ref()
            if code is not None:
                module.mark_skip(code)
        _PENDING_SKIPS.clear()
        return module, None
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        log.info("PEP 523 frame hook unavailable: %s", error)
        return None, error


def load() -> types.ModuleType | None:
    """The compiled hook module, building it on first use; ``None`` if unavailable."""
    return _load_once()[0]


def unavailable() -> str | None:
    """Why the hook cannot be used (``None`` when it can)."""
    return _load_once()[1]


def loaded() -> types.ModuleType | None:
    """The hook module if it was already built (never builds)."""
    module = sys.modules.get(_MODULE_NAME)
    return module if isinstance(module, types.ModuleType) else None


def install(callback: FrameCallback | None) -> None:
    """Set (or with ``None`` clear) the callback; the hook must be loaded."""
    module = loaded()
    if module is None:
        raise RuntimeError("the PEP 523 frame hook is not loaded")
    module.set_callback(callback)


@contextmanager
def suspended() -> Iterator[None]:
    """No frame capture inside (compiles, ``disable``d functions)."""
    hook = loaded()
    if hook is None or hook.get_callback() is None:
        yield
        return
    previous = hook.set_callback(None)
    try:
        yield
    finally:
        hook.set_callback(previous)


def mark_skip(code: types.CodeType) -> None:
    """Never intercept frames of ``code`` (remembered until the hook is loaded)."""
    hook = loaded()
    if hook is not None:
        hook.mark_skip(code)
    else:
        key = id(code)
        _PENDING_SKIPS[key] = weakref.ref(code, lambda _: _PENDING_SKIPS.pop(key, None))


def run_uncaptured(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """``compiled`` run with frame capture suspended (for code compiled while a
    ``with optimize()`` block was active: FX graph code must not be captured)."""
    hook = loaded()
    if hook is None:
        return compiled

    def run(*args: Any, **kwargs: Any) -> Any:
        previous = hook.set_callback(None)
        try:
            return compiled(*args, **kwargs)
        finally:
            hook.set_callback(previous)

    # what ``compiled_graph.rebound`` needs to rebind the wrapped result for another instance
    run.__wrapped__ = compiled  # type: ignore[attr-defined]
    run._ember_rewrap = run_uncaptured  # type: ignore[attr-defined]
    return run
