"""Frame entry: the function-level path into capture, and the runtime behind both paths.

``compile``/``optimize`` wrap a Python function in a :class:`CompiledFunction`.
A call binds the arguments into an ``f_locals`` dict, checks the cached
entries for the function's code object in order, and on a hit runs the
entry's transformed code as a function over the original globals, closure
and defaults. On a miss it hands a ``FrameState`` to the capture function
(``convert_frame``, given by the public API: this module never imports
capture), caches the ``GuardedCode`` it returns and runs it.

A :class:`Runtime` is one (backend, options) pair with its cache table; it
is also the ``FrameHooks`` object capture receives, so resume functions and
callees it wraps with :meth:`Runtime.wrap_function` share the cache and
backend of the function that produced them.

:class:`RuntimeState` holds the process's switches (stance, run mode, the
recursion guard, compile timings, listeners and the active ``with
optimize()`` blocks). One instance is created by the public API and handed
to every runtime; nothing here reads a module global.

Recursion guard: while capture runs (tracing or the backend compile), every
``CompiledFunction`` call runs its original code eagerly, so frames entered
from inside a compile are never captured.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ember.ir.cache_entry import paused_gc
from ember.ir.logs import reason as one_line
from ember.ir.stages import stage

from . import frame_cache, frame_hook, trace_rules
from .backends import Backend
from .cache import CacheTable, CodeCache, RecompileError, first_failure
from .compiled_graph import GraphCompiler
from .config import DynamoOptions
from .debug_dir import frame_folder, record_event, write_frame
from .errors import Unsupported
from .frame import CompilerFn, ConvertFn, FrameState, GuardedCode
from .logs import get_logger, log_capture
from .resume import ResumeCodes

_CO_VARARGS = inspect.CO_VARARGS
_CO_VARKEYWORDS = inspect.CO_VARKEYWORDS

log_recompiles = get_logger("recompiles")
log_breaks = get_logger("graph_breaks")
log_guards = get_logger("guards")
log_dynamo = get_logger("dynamo")
log_perf = get_logger("perf_hints")

CaptureListener = Callable[["CaptureEvent"], None]


class RuntimeState:
    """The process's runtime switches, read on the miss path only (never per
    cached call, except ``compiling``)."""

    def __init__(self) -> None:
        #: >0 while capture runs: compiled callables run eagerly.
        self.compiling = 0
        #: "default" | "force_eager" | "eager_on_recompile" | "fail_on_recompile"
        self.stance = "default"
        #: >0 inside ``with ember.dynamo.run():`` -- no new compiles.
        self.run_only = 0
        #: Phase name -> seconds per occurrence (``compile_times()``).
        self.compile_times: dict[str, list[float]] = {}
        #: Called with every capture / recompile / break (CompileProfiler).
        self.listeners: list[CaptureListener] = []
        #: The runtimes of the active ``with optimize(...)`` blocks, innermost last.
        self.hook_runtimes: list[Runtime] = []
        #: Beside each: whether it is an eager fallback's (``Runtime.run_hooked(fallback=True)``)
        self.hook_fallbacks: list[bool] = []

    def record_time(self, phase: str, seconds: float) -> None:
        self.compile_times.setdefault(phase, []).append(seconds)

    # -- the PEP 523 path -------------------------------------------------------
    def enter_hook(self, runtime: Runtime, fallback: bool = False) -> None:
        """Start capturing every user frame with ``runtime`` (``with optimize():``), or
        with ``fallback`` every frame called below a frame that runs eagerly."""
        if frame_hook.load() is None:
            raise TypeError(
                "`with ember.dynamo.optimize(...):` cannot capture the functions called inside "
                "the block here: that needs ember's PEP 523 frame hook, which is unavailable "
                f"({frame_hook.unavailable()}). Compile the function instead, which works on "
                "every supported Python: fn = ember.dynamo.optimize(backend)(fn) or "
                "ember.dynamo.compile(fn)"
            )
        self.hook_runtimes.append(runtime)
        self.hook_fallbacks.append(fallback)
        frame_hook.install(self.on_frame)

    def exit_hook(self, runtime: Runtime) -> None:
        """Stop capturing with ``runtime``; the enclosing block (if any) takes over."""
        fallback = False
        if runtime in self.hook_runtimes:
            index = len(self.hook_runtimes) - 1 - self.hook_runtimes[::-1].index(runtime)
            del self.hook_runtimes[index]
            fallback = self.hook_fallbacks.pop(index)
        if not fallback:  # an eager fallback's callees are met again on the next call
            runtime.frame_wrappers.clear()
        if not self.hook_runtimes and frame_hook.loaded() is not None:
            frame_hook.install(None)

    def on_frame(self, func: types.FunctionType, values: tuple[Any, ...]) -> Any:
        """The hook's callback: run ``func``'s frame through the innermost active runtime."""
        hook = frame_hook.loaded()
        assert hook is not None
        code = func.__code__
        if not self.hook_runtimes:
            return hook.SKIP
        if self.hook_fallbacks[-1]:
            if trace_rules.is_never_captured(code) or trace_rules.is_disabled_code(code):
                hook.mark_skip(code)
                return hook.SKIP
            if not holds_tensors(values):
                return hook.SKIP  # as TorchDynamo: nothing to capture (`is_compiling()` itself)
        elif trace_rules.is_library_code(code) or trace_rules.is_disabled_code(code):
            hook.mark_skip(code)
            return hook.SKIP
        return self.hook_runtimes[-1].frame_wrapper(func).runner_for(values, hook.SKIP)


def holds_tensors(values: Any, depth: int = 0) -> bool:
    """Whether a frame's arguments hold a tensor or a module, looking into plain
    tuples, lists and dicts (exactly those types, as TorchDynamo does: a
    ``ModelOutput`` argument alone does not make a frame worth capturing)."""
    kinds = (torch.Tensor, torch.nn.Module)
    for v in values:
        if isinstance(v, kinds):
            return True
        if depth < 4 and type(v) in (tuple, list) and holds_tensors(v, depth + 1):
            return True
        if depth < 4 and type(v) is dict and holds_tensors(tuple(v.values()), depth + 1):
            return True
    return False


class CaptureEvent:
    """What a listener hears: one compiled frame, a recompile, a skipped frame, the cache limit."""

    __slots__ = ("runtime", "kind", "code", "guarded", "reason", "user_stack")

    def __init__(
        self,
        runtime: Runtime,
        kind: str,
        code: types.CodeType,
        guarded: Any,
        reason: str | None,
        user_stack: list[Any] | None = None,
    ) -> None:
        self.runtime = runtime
        self.kind = kind  # "capture" | "recompile" | "skip" | "cache_limit"
        self.code = code
        self.guarded = guarded
        self.reason = reason
        self.user_stack = user_stack or []


class Runtime:
    """One compiled callable's backend, options and cache table (the ``FrameHooks``)."""

    def __init__(
        self,
        backend: Backend | CompilerFn,
        options: DynamoOptions,
        *,
        convert: ConvertFn,
        state: RuntimeState,
        table: CacheTable | None = None,
        frames: frame_cache.FrameStore | None = None,
    ) -> None:
        #: the backend resolved once (``backends.resolve_backend``; a bare function as it is)
        self.backend = backend if isinstance(backend, Backend) else Backend.of(backend)
        self.options = options
        self.state = state
        #: what every graph of this runtime is compiled by: the backend with the wrappers
        #: around its result (``compiled_graph.py``), for functions, modules, regional
        #: blocks, stored frames and optimizer steps alike
        self.compiler = GraphCompiler(self.backend, options, state)
        self.table = table if table is not None else CacheTable()
        if frames is not None:
            self.table.frames = frames
        elif self.table.frames is None:
            # In memory only: other instances of a captured block reuse its frame.
            self.table.frames = frame_cache.FrameStore(f"in-process {id(self.table)}", None)
        self.frames: frame_cache.FrameStore = self.table.frames
        self._convert = convert
        #: Hear this runtime's captures (``explain``); global ones are in ``state``.
        self.listeners: list[CaptureListener] = []
        #: id(func) -> (func, its CompiledFunction) for frames met by the PEP 523 hook.
        self.frame_wrappers: dict[int, tuple[types.FunctionType, CompiledFunction]] = {}

    def emit(
        self,
        kind: str,
        code: types.CodeType,
        guarded: Any = None,
        reason: str | None = None,
        user_stack: list[Any] | None = None,
        folder: Path | None = None,
    ) -> None:
        if self.options.debug_dir is not None:  # EMBER_COMPILE_DEBUG: the run's events.jsonl
            record_event(self.options.debug_dir, kind, code, guarded, reason, user_stack, folder)
        listeners = self.state.listeners + self.listeners
        if listeners:
            event = CaptureEvent(self, kind, code, guarded, reason, user_stack)
            for listener in listeners:
                listener(event)

    # -- FrameHooks -----------------------------------------------------------
    def wrap_function(self, fn: types.FunctionType) -> CompiledFunction:
        return CompiledFunction(fn, self)

    @property
    def resume_codes(self) -> ResumeCodes:
        return self.table.resume_codes

    def run_hooked(self, fn: Callable[..., Any], fallback: bool = False) -> Callable[..., Any]:
        """``fn`` run with the frames it calls captured by this runtime (``fallback``:
        ``fn`` is a frame that runs eagerly because capture failed; see ``on_frame``)."""
        if frame_hook.unavailable() is not None:
            return fn  # no PEP 523 hook here: the callees run eagerly too

        @functools.wraps(fn)
        def hooked(*args: Any, **kwargs: Any) -> Any:
            self.state.enter_hook(self, fallback)
            try:
                return fn(*args, **kwargs)
            finally:
                self.state.exit_hook(self)

        return hooked

    def frame_wrapper(self, func: types.FunctionType) -> CompiledFunction:
        """The wrapper the PEP 523 path runs ``func``'s frames through (one per function)."""
        found = self.frame_wrappers.get(id(func))
        if found is None or found[0] is not func:
            found = (func, CompiledFunction(func, self))
            self.frame_wrappers[id(func)] = found
        return found[1]

    # -- compile --------------------------------------------------------------
    def convert(
        self, fn: types.FunctionType, cache: CodeCache, f_locals: dict[str, Any]
    ) -> GuardedCode | None:
        """Capture one call; ``None`` means: run this call (and the code) eagerly."""
        state = FrameState(
            code=fn.__code__,
            f_locals=f_locals,
            f_globals=fn.__globals__,
            closure=fn.__closure__,
            fn_name=fn.__name__,
            seen_sizes=dict(cache.seen_sizes),
        )
        debug_base = self.options.debug_dir
        folder = frame_folder(debug_base, cache.code) if debug_base is not None else None
        self.state.compiling += 1
        start = time.perf_counter()
        try:
            with frame_hook.suspended(), stage("dynamo", label=cache.where(), folder=folder):
                guarded = self._convert(state, self.compiler.in_folder(folder), self.options, self)
        except Unsupported as exc:
            if self.options.fullgraph:
                raise
            reason = str(exc)
            log_breaks.info("skipping %s, running it eagerly: %s", cache.where(), reason)
            cache.mark_eager(reason)
            self.emit("skip", cache.code, None, reason, exc.user_stack, folder=folder)
            return None
        except RecompileError:
            raise
        except Exception as exc:
            if self.options.strict:
                raise
            reason = f"{type(exc).__name__}: {exc}"
            log_dynamo.warning(
                "capture of %s failed (%s); running it eagerly (strict=True or "
                "EMBER_STRICT=1 raises instead)",
                cache.where(),
                one_line(exc),
                exc_info=exc if self.options.verbose or log_dynamo.isEnabledFor(logging.DEBUG) else None,
            )
            cache.mark_eager(reason)
            self.emit("skip", cache.code, None, reason, folder=folder)
            return None
        finally:
            self.state.compiling -= 1
            self.state.record_time("convert_frame", time.perf_counter() - start)
        self._add_entry(cache, guarded, folder=folder)
        frame_cache.remember(
            self.frames, cache.code, guarded, f_locals, fn.__globals__, cache.where(),
            self.compiler if folder is None else None,  # (a debug folder's compiler writes there)
        )
        return guarded

    def _add_entry(
        self, cache: CodeCache, guarded: GuardedCode, *, loaded: bool = False,
        folder: Path | None = None,
    ) -> None:
        """Put an entry in ``cache``: the one path of both producers, a capture
        (:meth:`convert`) and a stored frame bound to this call (:meth:`load`; ``loaded``).
        The graphs of both were built by ``compiled_graph.graph_entry``."""
        cache.add(guarded, loaded=loaded)
        cache.merge_sizes(guarded.input_sizes)
        if guarded.dynamic:
            log_recompiles.info(
                "%s compiled with dynamic dimensions: %s", cache.where(), "; ".join(guarded.dynamic)
            )
        frame_hook.mark_skip(guarded.code)  # the frame hook must not re-capture it
        if folder is not None:
            write_frame(folder, cache.code, guarded)
            log_dynamo.info("debug artifacts for %s in %s", cache.where(), folder)
        log_capture(cache.where(), cache.code, guarded)
        if not loaded and log_guards.isEnabledFor(logging.DEBUG):
            source = getattr(guarded.check_fn, "code", None)
            log_guards.debug("check function of %s:\n%s", cache.where(), source)
        self.emit("capture", cache.code, guarded, "frame cache" if loaded else None, folder=folder)

    def load(
        self, fn: types.FunctionType, cache: CodeCache, f_locals: dict[str, Any]
    ) -> GuardedCode | None:
        """A stored frame of ``fn`` bound to this call (no bytecode interpreted), or None."""
        self.state.compiling += 1
        start = time.perf_counter()
        try:
            with frame_hook.suspended(), paused_gc(), stage("dynamo.frame_cache",
                                                             label=cache.where()):
                guarded = frame_cache.attempt(
                    self.frames,
                    cache.code,
                    f_locals,
                    fn.__globals__,
                    self.compiler,
                    self.wrap_function,
                    cache.where(),
                )
        finally:
            self.state.compiling -= 1
            self.state.record_time("frame_cache_load", time.perf_counter() - start)
        if guarded is None:
            # No stored frame fits this call, but the sizes they were captured with were
            # seen by this code (in this process or the one that stored them): the capture
            # that follows marks the dimensions that differ dynamic, as it would have there.
            for sizes in frame_cache.seen_sizes(self.frames, cache.code):
                cache.merge_sizes(sizes)
            return None
        self._add_entry(cache, guarded, loaded=True)
        return guarded


def _transformed(fn: types.FunctionType, code: types.CodeType) -> types.FunctionType:
    """``fn`` with its code replaced: same globals, closure, defaults and name."""
    new = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    return new


def _add_cells(f_locals: dict[str, Any], cells: tuple[tuple[str, types.CellType], ...]) -> None:
    for name, cell in cells:
        try:
            f_locals[name] = cell.cell_contents
        except ValueError:  # an empty cell: nothing to guard
            continue


def _locals_builder(names: tuple[str, ...]) -> Callable[[tuple[Any, ...]], dict[str, Any]]:
    """``args -> {name: arg}`` as one generated dict display (2-3x faster than dict(zip))."""
    items = ", ".join(f"{name!r}: a[{i}]" for i, name in enumerate(names))
    builder: Callable[[tuple[Any, ...]], dict[str, Any]] = eval(f"lambda a: {{{items}}}")
    return builder


_MISSING = object()


def _binder_for(fn: types.FunctionType) -> Callable[..., dict[str, Any]]:
    """A generated function with ``fn``'s parameters returning its bound ``f_locals``.

    Python does the binding (fast, with Python's own error messages); every
    default is a sentinel replaced by a live read of ``fn.__defaults__`` /
    ``fn.__kwdefaults__``, so in-place changes to them are always seen.
    """
    code = fn.__code__
    n, k, posonly = code.co_argcount, code.co_kwonlyargcount, code.co_posonlyargcount
    names = code.co_varnames
    if not all(name.isidentifier() for name in names[: code.co_argcount + k + 2]):
        # Compiler-made functions (comprehensions: parameter ``.0``) are only ever
        # called with their exact positional arguments.
        positional = names[:n]

        def exact(*args: Any) -> dict[str, Any]:
            if len(args) != len(positional):
                raise TypeError(f"{fn.__qualname__} takes {len(positional)} positional arguments")
            return dict(zip(positional, args, strict=True))

        return exact
    defaults = fn.__defaults__ or ()
    first_default = n - len(defaults)
    params: list[str] = []
    fill: list[str] = []
    for i in range(n):
        if i >= first_default:
            params.append(f"{names[i]}=_ember_missing_")
            fill.append(f"    if {names[i]} is _ember_missing_: {names[i]} = _ember_fn_.__defaults__[{i - first_default}]")
        else:
            params.append(names[i])
        if posonly and i == posonly - 1:
            params.append("/")
    i = n + k
    if code.co_flags & _CO_VARARGS:
        params.append(f"*{names[i]}")
        i += 1
    elif k:
        params.append("*")
    kwdefaults = fn.__kwdefaults__ or {}
    for name in names[n : n + k]:
        if name in kwdefaults:
            params.append(f"{name}=_ember_missing_")
            fill.append(f"    if {name} is _ember_missing_: {name} = _ember_fn_.__kwdefaults__[{name!r}]")
        else:
            params.append(name)
    if code.co_flags & _CO_VARKEYWORDS:
        params.append(f"**{names[i]}")
    bound = names[: i + (1 if code.co_flags & _CO_VARKEYWORDS else 0)]
    body = ", ".join(f"{name!r}: {name}" for name in bound)
    source = "\n".join([f"def bind({', '.join(params)}):", *fill, f"    return {{{body}}}"])
    namespace: dict[str, Any] = {"_ember_missing_": _MISSING, "_ember_fn_": fn}
    exec(compile(source, f"<ember binder for {fn.__qualname__}>", "exec"), namespace)
    binder: Callable[..., dict[str, Any]] = namespace["bind"]
    return binder


def _call_with_slots(fn: Callable[..., Any], code: types.CodeType, values: tuple[Any, ...]) -> Any:
    """Call ``fn`` (same signature as ``code``) with bound argument slots."""
    n, k = code.co_argcount, code.co_kwonlyargcount
    args = list(values[:n])
    kwargs = dict(zip(code.co_varnames[n : n + k], values[n : n + k]))
    i = n + k
    if code.co_flags & _CO_VARARGS:
        args.extend(values[i])
        i += 1
    if code.co_flags & _CO_VARKEYWORDS:
        kwargs.update(values[i])
    return fn(*args, **kwargs)


class CompiledFunction:
    """A Python function whose calls go through ember's cache and capture.

    Attributes ``__wrapped__`` (the original function) and ``__name__``/
    ``__doc__``/``__qualname__`` are the original's, as with
    ``functools.wraps``.
    """

    def __init__(self, fn: types.FunctionType, runtime: Runtime) -> None:
        if not isinstance(fn, types.FunctionType):
            raise TypeError(
                f"ember.dynamo can only capture Python functions, got {type(fn).__name__}"
            )
        code = fn.__code__
        self._fn = fn
        self._runtime = runtime
        self._state = runtime.state
        self._cache = runtime.table.get(code)
        self._globals = fn.__globals__
        self._nargs = code.co_argcount
        self._names = code.co_varnames[: code.co_argcount]
        self._simple = not (code.co_flags & (_CO_VARARGS | _CO_VARKEYWORDS)) and (
            code.co_kwonlyargcount == 0
        )
        self._to_locals = _locals_builder(self._names)
        self._binder = _binder_for(fn)
        self._seen_defaults = fn.__defaults__
        self._seen_kwdefaults = fn.__kwdefaults__
        # Free variables are guarded as L['name'] (their cell contents).
        self._cells = tuple(zip(code.co_freevars, fn.__closure__ or (), strict=True))
        self._pairs: tuple[tuple[Callable[..., bool], Callable[..., Any]], ...] = ()
        self._version = -1
        #: ``fn`` run with its callees captured (made on the first eager fallback, kept)
        self._fallback_run: Callable[..., Any] | None = None
        self.__wrapped__ = fn
        self.__name__ = fn.__name__
        self.__qualname__ = fn.__qualname__
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__

    def __repr__(self) -> str:
        return f"<ember compiled function {self.__qualname__}>"

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        """Used as a method decorator: bind ``obj`` like a plain function would."""
        if obj is None:
            return self
        return types.MethodType(self, obj)

    @property
    def runtime(self) -> Runtime:
        return self._runtime

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._state.compiling:
            return self._fn(*args, **kwargs)
        if kwargs or not self._simple or len(args) != self._nargs:
            f_locals = self._bind(args, kwargs)
            if f_locals is None:  # the call does not fit the signature: let Python say why
                return self._fn(*args, **kwargs)
        else:
            f_locals = self._to_locals(args)
        if self._cells:
            _add_cells(f_locals, self._cells)
        if self._version != self._cache.version:
            self._sync()
        f_globals = self._globals
        for check, run in self._pairs:
            if check(f_locals, f_globals):
                return run(*args, **kwargs)
        compiled = self._miss(f_locals)
        if compiled is None:
            return self._run_eagerly(args, kwargs)
        return compiled(*args, **kwargs)

    def _run_eagerly(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call run as it is. Where capture failed for this code (or hit the cache
        limit), the frames it calls are still captured, each on its own, as TorchDynamo
        does: a frame that falls back to eager does not take its callees with it
        (transformers' LongT5 stack raises while traced, its blocks do not)."""
        state, options = self._state, self._runtime.options
        if (
            self._cache.eager_reason is None
            or options.run_only
            or state.run_only
            or state.stance != "default"
            or options.debug_function is not None
        ):
            return self._fn(*args, **kwargs)
        if self._fallback_run is None:
            self._fallback_run = self._runtime.run_hooked(self._fn, fallback=True)
        return self._fallback_run(*args, **kwargs)

    def runner_for(self, values: tuple[Any, ...], skip: Any) -> Any:
        """What to run for one call given its bound argument slots (the PEP 523 path).

        ``values`` are the frame's argument slots in ``co_varnames`` order
        (positional, keyword-only, ``*args``, ``**kwargs``). Returns a
        no-argument callable running the cached or freshly captured code, or
        ``skip`` when the frame should run as it is (eagerly).
        """
        code = self._fn.__code__
        names = code.co_varnames[: len(values)]
        f_locals = dict(zip(names, values))
        if self._cells:
            _add_cells(f_locals, self._cells)
        if self._version != self._cache.version:
            self._sync()
        f_globals = self._globals
        for check, run in self._pairs:
            if check(f_locals, f_globals):
                return functools.partial(_call_with_slots, run, code, values)
        compiled = self._miss(f_locals)
        if compiled is None:
            return skip
        return functools.partial(_call_with_slots, compiled, code, values)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        """Bind like Python does, defaults applied (calls that may use defaults or keywords)."""
        fn = self._fn
        if fn.__defaults__ is not self._seen_defaults or fn.__kwdefaults__ is not self._seen_kwdefaults:
            # Defaults were replaced: rebuild the binder and the transformed functions
            # (they carry the defaults too). In-place changes to __kwdefaults__ are
            # shared with both, so they need nothing.
            self._seen_defaults = fn.__defaults__
            self._seen_kwdefaults = fn.__kwdefaults__
            self._binder = _binder_for(fn)
            self._version = -1
        try:
            return self._binder(*args, **kwargs)
        except TypeError:
            return None

    def _sync(self) -> None:
        cache = self._cache
        self._pairs = tuple(
            (entry.check_fn, _transformed(self._fn, entry.code)) for entry in cache.entries
        )
        self._version = cache.version

    def _miss(self, f_locals: dict[str, Any]) -> Callable[..., Any] | None:
        """No entry matched: compile (returns the function to run) or ``None`` = run eagerly."""
        cache = self._cache
        options = self._runtime.options
        state = self._state
        if (
            cache.eager_reason is not None
            or options.run_only
            or state.run_only
            or state.stance == "force_eager"
        ):
            return None
        if options.debug_function is not None and cache.code.co_name != options.debug_function:
            reason = f"EMBER_DEBUG_FUNCTION={options.debug_function} names another function"
            log_dynamo.info("skipping %s, running it eagerly: %s", cache.where(), reason)
            cache.mark_eager(reason)
            self._runtime.emit("skip", cache.code, None, reason)
            return None
        loaded = self._runtime.load(self._fn, cache, f_locals)
        if loaded is not None:
            self._sync()
            return _transformed(self._fn, loaded.code)
        if cache.entries:
            reason = first_failure(cache.entries, f_locals, self._globals)
            if options.fail_on_recompile or state.stance == "fail_on_recompile":
                raise RecompileError(
                    f"ember.dynamo: recompile of {cache.where()} forbidden by "
                    f"set_stance('fail_on_recompile'); the cached graph no longer applies "
                    f"because {reason}. Call set_stance('default') to allow it, or mark the "
                    "dimension dynamic."
                )
            if state.stance == "eager_on_recompile":
                return None
            if cache.captured() >= options.cache_size_limit:
                self._hit_limit(cache, reason, options.cache_size_limit)
                return None
            log_recompiles.info("recompiling %s because %s", cache.where(), reason)
            self._runtime.emit("recompile", cache.code, None, reason)
        guarded = self._runtime.convert(self._fn, cache, f_locals)
        if guarded is None:
            return None
        self._sync()
        return _transformed(self._fn, guarded.code)

    def _hit_limit(self, cache: CodeCache, reason: str, limit: int) -> None:
        message = (
            f"ember.dynamo hit cache_size_limit ({limit}) for {cache.where()}; "
            f"last recompile reason: {reason}. Running this code eagerly from now on "
            "(cached graphs are still used where their guards pass). Raise "
            "ember.dynamo.config.cache_size_limit, or make the changing value dynamic."
        )
        cache.mark_eager(reason)
        self._runtime.emit("cache_limit", cache.code, None, reason)
        if not cache.warned:
            cache.warned = True
            log_recompiles.warning("%s", message)
            warnings.warn(message, RuntimeWarning, stacklevel=4)


class CompiledMethod(CompiledFunction):
    """A ``CompiledFunction`` bound to one object (``compile(mod)``, ``compile(obj.method)``)."""

    def __init__(self, fn: types.FunctionType, runtime: Runtime, bound_self: Any) -> None:
        super().__init__(fn, runtime)
        self.__self__ = bound_self

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return CompiledFunction.__call__(self, self.__self__, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<ember compiled method {self.__qualname__} of {type(self.__self__).__name__}>"
