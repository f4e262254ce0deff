"""The public API: ``compile``, ``optimize``, ``reset``, escape hatches.

``compile(fn_or_module, backend=..., fullgraph=..., dynamic=..., mode=...,
options=...)`` has torch.compile's signature. On a function (or bound method)
it returns a :class:`CompiledFunction`; on an ``nn.Module`` it returns an
:class:`OptimizedModule` whose ``forward`` is compiled and which *shares* the
original module's parameters, buffers, submodules and hooks (so
``state_dict()`` keys, ``parameters()``, ``.to()``, ``load_state_dict`` and
attribute reads/writes all pass through to the original, unprefixed).

``disable``, ``allow_in_graph`` and ``disallow_in_graph`` fill the
registries of ``trace_rules`` (read by capture and the frame hook).

:data:`STATE` is the process's one :class:`RuntimeState` (stances, run mode,
the recursion guard, timings, active ``with optimize()`` blocks): created
here, at the public entry, and handed to every runtime.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

from . import cache as cache_mod
from . import frame_cache, frame_hook, trace_rules
from .backends import Backend, CompileOptionsError, resolve_backend
from .config import OPTION_NAMES, DynamoOptions, config, not_implemented
from .debug_dir import debug_dir_from_env
from .distributed import FULLGRAPH_MESSAGE, DDPForward, is_ddp, wrapped_module
from .errors import Unsupported
from .frame import CompilerFn, FrameHooks, FrameState, GuardedCode
from .function_entry import CompiledFunction, CompiledMethod, Runtime, RuntimeState
from .optimizer import CompiledOptimizerStep, is_optimizer_step

F = TypeVar("F", bound=Callable[..., Any])

MODES: tuple[str, ...] = (
    "default",
    "reduce-overhead",
    "max-autotune",
    "max-autotune-no-cudagraphs",
)
STANCES: tuple[str, ...] = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile")

#: The process's runtime switches, handed to every runtime made here.
STATE = RuntimeState()


def capture(state: FrameState, compiler: CompilerFn, options: Any, hooks: FrameHooks) -> GuardedCode:
    """ember's capture (``convert_frame``), imported on the first miss so that
    ``import ember.dynamo`` stays cheap (a downward import: no cycle)."""
    from .convert_frame import convert_frame

    return convert_frame(state, compiler, options, hooks)


def new_runtime(
    backend: Backend | CompilerFn, options: DynamoOptions,
    frames: frame_cache.FrameStore | None = None,
) -> Runtime:
    """A runtime over ``backend`` (resolved by ``resolve_backend``; a bare backend function is
    taken as it is) with this process's state and ember's capture."""
    return Runtime(backend, options, convert=capture, state=STATE, frames=frames)


def frame_store(backend: Backend, snapshot: DynamoOptions) -> frame_cache.FrameStore | None:
    """The disk-backed frame store of a backend given by its registered name (None otherwise:
    a backend object may hold state, so its frames are kept in memory only; so are they
    under ``EMBER_COMPILE_DEBUG``)."""
    if not isinstance(backend.spec, str) or snapshot.debug_dir is not None:
        return None  # with EMBER_COMPILE_DEBUG the user wants to see this process compile
    if logging.getLogger("ember.dynamo").isEnabledFor(logging.DEBUG):
        return None  # so with EMBER_LOGS=+dynamo (every traced instruction)
    folder = frame_cache.store_dir_from_env()
    if folder is None:
        return None
    what = snapshot.replace(
        debug_dir=None, run_only=False, fail_on_recompile=False, cache_size_limit=0, strict=False
    )
    options = sorted(backend.options.items(), key=lambda kv: kv[0])
    key = repr((backend.spec, backend.mode, options, what))
    return frame_cache.FrameStore(key, folder)


# -- compile / optimize ------------------------------------------------------


def make_runtime(
    backend: str | CompilerFn,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    mode: str | None = None,
    options: dict[str, Any] | None = None,
) -> Runtime:
    """Resolve the backend (once: ``resolve_backend``) and snapshot ``config`` into a
    :class:`Runtime`."""
    if mode is not None and options:
        raise CompileOptionsError(
            "ember.dynamo.compile: pass either mode or options, not both (as torch.compile)"
        )
    if mode is not None and mode not in MODES:
        raise CompileOptionsError(
            f"ember.dynamo.compile: unknown mode {mode!r}; known modes: {', '.join(MODES)}"
        )
    opts = dict(options or {})
    dynamo_opts = {k: opts.pop(k) for k in list(opts) if k in OPTION_NAMES}
    resolved = resolve_backend(backend, mode, opts, option_names=OPTION_NAMES)
    snapshot = snapshot_options(fullgraph=fullgraph, dynamic=dynamic, **dynamo_opts)
    _refuse_not_implemented(snapshot)
    return new_runtime(resolved, snapshot, frame_store(resolved, snapshot))


def _refuse_not_implemented(options: DynamoOptions) -> None:
    why = not_implemented(options)
    if why is not None:
        raise CompileOptionsError(why)


def snapshot_options(**overrides: Any) -> DynamoOptions:
    """``config`` now, with ``overrides``, and the environment read (the public entry):
    ``EMBER_COMPILE_DEBUG``, ``EMBER_DEBUG_FUNCTION``, ``EMBER_VERBOSE``.

    ``dynamic=None`` (``compile``'s default) leaves ``config.dynamic`` in force.
    """
    if "dynamic" in overrides and overrides["dynamic"] is None:
        del overrides["dynamic"]
    options = config.to_options(**overrides)
    if options.debug_dir is None:
        base = debug_dir_from_env()
        if base is not None:
            options = options.replace(debug_dir=base)
    name = os.environ.get("EMBER_DEBUG_FUNCTION", "").strip()
    if options.debug_function is None and name:
        options = options.replace(debug_function=name)
    if not options.verbose and os.environ.get("EMBER_VERBOSE", "0") in ("1", "true", "True"):
        options = options.replace(verbose=True)
    return options


def wrap_target(target: Any, runtime: Runtime) -> Any:
    """``target`` (function, method, module, callable object) compiled with ``runtime``."""
    if isinstance(target, OptimizedModule):
        target = target._orig_mod
    if isinstance(target, torch.nn.ModuleList):
        return compile_regions(target, runtime)
    if isinstance(target, type) and issubclass(target, torch.nn.Module):
        return compile_class(target, runtime)
    if isinstance(target, torch.nn.Module):
        if is_ddp(target) and runtime.options.fullgraph:
            raise Unsupported(FULLGRAPH_MESSAGE)
        return OptimizedModule(target, runtime)
    if isinstance(target, CompiledMethod):
        return CompiledMethod(target.__wrapped__, runtime, target.__self__)
    if isinstance(target, CompiledOptimizerStep):
        return CompiledOptimizerStep(target.optimizer, runtime)
    if is_optimizer_step(target):
        return CompiledOptimizerStep(target.__self__, runtime)
    if isinstance(target, CompiledFunction):
        target = target.__wrapped__
    if getattr(target, "_ember_disabled", False):
        return target
    if isinstance(target, types.MethodType) and isinstance(target.__func__, types.FunctionType):
        return CompiledMethod(target.__func__, runtime, target.__self__)
    if isinstance(target, types.FunctionType):
        return CompiledFunction(target, runtime)
    call = type(target).__dict__.get("__call__") if callable(target) else None
    if isinstance(call, types.FunctionType):
        return CompiledMethod(call, runtime, target)
    raise TypeError(
        f"ember.dynamo.compile expects a Python function, method or nn.Module, got "
        f"{type(target).__name__} ({target!r}); builtins and C functions have no bytecode "
        "to capture"
    )


def _python_forward(cls: type[torch.nn.Module]) -> types.FunctionType:
    forward: Any = cls.forward
    if isinstance(forward, CompiledFunction):
        forward = forward.__wrapped__
    if not isinstance(forward, types.FunctionType) or forward is torch.nn.Module.forward:
        raise TypeError(
            f"ember.dynamo.compile: {cls.__name__}.forward is not a Python function and cannot be captured"
        )
    return forward


def compile_class(cls: type[torch.nn.Module], runtime: Runtime) -> type[torch.nn.Module]:
    """Regional compilation: every instance of ``cls`` runs one compiled ``forward``.

    ``cls.forward`` is replaced (in place) by a compiled function with one
    cache: the first instance called is captured and compiled; another
    instance reuses that capture, bound to its own parameters (its guards
    name the class and parameter metadata, not the instance).
    """
    cls.forward = CompiledFunction(_python_forward(cls), runtime)
    return cls


def compile_regions(blocks: torch.nn.ModuleList, runtime: Runtime) -> torch.nn.ModuleList:
    """Regional compilation of a ``ModuleList`` (in place; the list is returned).

    Each block's ``forward`` becomes a compiled method sharing one runtime, so
    identical blocks (same class, same parameter shapes) are captured and
    compiled once and the others reuse that graph with their own
    parameters. ``state_dict`` keys and the parameters are unchanged.
    """
    for block in blocks:
        if isinstance(block, OptimizedModule):
            block = block._orig_mod
        forward = _python_forward(type(block))
        block.__dict__["forward"] = CompiledMethod(forward, runtime, block)
    return blocks


def compile(
    model: Any = None,
    *,
    backend: str | CompilerFn = "inductor",
    fullgraph: bool = False,
    dynamic: bool | None = None,
    mode: str | None = None,
    options: dict[str, Any] | None = None,
    disable: bool = False,
) -> Any:
    """Compile a function or ``nn.Module`` (torch.compile's signature).

    Used directly (``compile(fn, backend="eager")``) or as a decorator
    (``@compile`` / ``@compile(backend="eager")``). ``options`` keys that name
    :class:`DynamoOptions` fields (e.g. ``cache_size_limit``) set those; the
    rest go to the backend's ``configure(mode, options)`` hook.
    """

    def apply(target: Any) -> Any:
        if disable:
            return target
        runtime = make_runtime(
            backend, fullgraph=fullgraph, dynamic=dynamic, mode=mode, options=options
        )
        return wrap_target(target, runtime)

    if model is None:
        return apply
    return apply(model)


class OptimizeContext:
    """What ``optimize(backend)`` returns: a decorator for functions, methods and modules."""

    def __init__(self, runtime_factory: Callable[[], Runtime]) -> None:
        self._factory = runtime_factory
        self._entered: list[Runtime] = []

    def __call__(self, target: Any) -> Any:
        return wrap_target(target, self._factory())

    def __enter__(self) -> None:
        """Capture every user function called inside the block (the PEP 523 hook)."""
        runtime = self._factory()
        STATE.enter_hook(runtime)
        self._entered.append(runtime)

    def __exit__(self, *exc: object) -> None:
        if self._entered:
            STATE.exit_hook(self._entered.pop())


def optimize(
    backend: str | CompilerFn = "inductor",
    *,
    nopython: bool = False,
    dynamic: bool | None = None,
    disable: bool = False,
) -> OptimizeContext:
    """TorchDynamo's ``optimize(backend, nopython=False)`` decorator.

    ``@optimize(my_compiler)`` on a function or method, or
    ``optimize("eager")(module)``. ``nopython=True`` is ``fullgraph=True``.
    """
    resolved = resolve_backend(backend)  # unknown names fail here
    _refuse_not_implemented(snapshot_options(dynamic=dynamic))

    def factory() -> Runtime:
        return new_runtime(resolved, snapshot_options(fullgraph=nopython, dynamic=dynamic))

    if disable:
        return _PassThrough(factory)
    return OptimizeContext(factory)


class _PassThrough(OptimizeContext):
    """``optimize(..., disable=True)``: leaves everything uncompiled."""

    def __call__(self, target: Any) -> Any:
        return target


# -- modules -----------------------------------------------------------------

_MODULE_INTERNALS = tuple(k for k in torch.nn.Module().__dict__ if k != "training")


class OptimizedModule(torch.nn.Module):
    """An ``nn.Module`` whose ``forward`` is compiled, sharing the original's state.

    Parameters, buffers, submodules and hooks are the *same* dicts as the
    original module's, so ``state_dict()`` has the original keys, optimizers
    over either module's ``parameters()`` update both, and hooks registered
    on either run. Other attribute reads fall through to the original module;
    ``train()``/``eval()`` switch both. ``_orig_mod`` is the original.

    A ``DistributedDataParallel`` module keeps its own forward (buffer
    broadcast, bucket preparation) running eagerly around its wrapped
    module's forward, which is the one compiled.
    """

    def __init__(self, mod: torch.nn.Module, runtime: Runtime) -> None:
        super().__init__()
        for key in _MODULE_INTERNALS:
            if key in mod.__dict__:
                self.__dict__[key] = mod.__dict__[key]
        self.__dict__["_orig_mod"] = mod
        self.__dict__["training"] = mod.training
        inner = wrapped_module(mod)
        forward = inner.forward
        if not isinstance(forward, types.MethodType) or not isinstance(
            forward.__func__, types.FunctionType
        ):
            raise TypeError(
                f"ember.dynamo.compile: {type(inner).__name__}.forward is not a Python method "
                "and cannot be captured"
            )
        compiled = CompiledMethod(forward.__func__, runtime, inner)
        self.__dict__["forward"] = DDPForward(mod, compiled) if inner is not mod else compiled

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_orig_mod"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(inspect.getattr_static(type(self), name, None), "__set__"):
            # a data descriptor of this object's own class (``__class__``, which FSDP2's
            # ``fully_shard`` sets to make the module an FSDPModule; a property)
            object.__setattr__(self, name, value)
        elif name == "training":
            self.__dict__["training"] = value
            self.__dict__["_orig_mod"].training = value
        elif isinstance(value, torch.nn.Parameter | torch.nn.Module) or name in self.__dict__:
            super().__setattr__(name, value)  # into the shared _parameters/_modules
        else:
            setattr(self.__dict__["_orig_mod"], name, value)

    def train(self, mode: bool = True) -> OptimizedModule:
        self.__dict__["_orig_mod"].train(mode)
        self.__dict__["training"] = mode
        return self

    def __dir__(self) -> list[str]:
        return sorted(set(object.__dir__(self)) | set(dir(self.__dict__["_orig_mod"])))

    def __repr__(self) -> str:
        return f"OptimizedModule({self.__dict__['_orig_mod']!r})"


# -- reset / stances / run ---------------------------------------------------


def reset() -> None:
    """Forget every compiled entry and compile timing; next calls capture afresh."""
    cache_mod.clear_all()
    STATE.compile_times.clear()


class _Stance:
    """The value ``set_stance`` returns: the change is already made; ``with`` undoes it on exit."""

    def __init__(self, previous: str) -> None:
        self._previous = previous

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        STATE.stance = self._previous


def set_stance(stance: str = "default") -> _Stance:
    """Change how compiled callables behave from now on (torch.compiler.set_stance).

    ``"default"``; ``"force_eager"`` (run everything eagerly, compile nothing);
    ``"eager_on_recompile"`` (use cached graphs, run eagerly instead of
    recompiling); ``"fail_on_recompile"`` (raise ``RecompileError`` naming the
    failing guard instead of recompiling). Also a context manager.
    """
    if stance not in STANCES:
        raise ValueError(f"unknown stance {stance!r}; known stances: {', '.join(STANCES)}")
    previous = STATE.stance
    STATE.stance = stance
    return _Stance(previous)


@contextmanager
def _run_only() -> Iterator[None]:
    STATE.run_only += 1
    try:
        yield
    finally:
        STATE.run_only -= 1


def run(fn: Any = None) -> Any:
    """Run mode: use cached graphs, compile nothing new (eager on a miss).

    ``with ember.dynamo.run(): ...`` or ``ember.dynamo.run(compiled_fn)``: run
    mode holds for the whole call, so resume functions and compiled callees
    reached from it compile nothing either (TorchDynamo's ``run``).
    """
    if fn is None:
        return _run_only()
    if isinstance(fn, OptimizedModule | CompiledFunction):
        return FrozenCallable(fn)
    return fn  # nothing of it was compiled: run mode runs it as it is


class FrozenCallable:
    """``run(compiled)``: calls ``compiled`` with run mode on for the whole call."""

    def __init__(self, compiled: Any) -> None:
        self.__wrapped__ = compiled
        functools.update_wrapper(self, compiled, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with _run_only():
            return self.__wrapped__(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__wrapped__, name)

    def __repr__(self) -> str:
        return f"<ember run-only {self.__wrapped__!r}>"


# -- registries the capture engine reads ---------------------------------------


def disable(fn: Any = None, recursive: bool = True) -> Any:
    """Never capture ``fn``: it runs eagerly, even when called from compiled code.

    ``recursive=False`` skips only ``fn``'s own frame: called from captured code
    (a graph break), it runs with the caller's PEP 523 hook on, so the functions
    it calls are captured with the caller's backend and cache. Usable as
    ``@disable`` or ``@disable(recursive=False)``.
    """
    if fn is None:
        return functools.partial(disable, recursive=recursive)
    if isinstance(fn, CompiledFunction):
        fn = fn.__wrapped__
    if isinstance(fn, OptimizedModule):
        fn = fn._orig_mod

    code = getattr(fn, "__code__", None)
    if isinstance(code, types.CodeType):
        trace_rules.disable_code(code)
    if recursive:

        @functools.wraps(fn)
        def disabled(*args: Any, **kwargs: Any) -> Any:
            with frame_hook.suspended():
                return fn(*args, **kwargs)
    else:

        @functools.wraps(fn)
        def disabled(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

    # "frame": a graph break calls it with the PEP 523 hook on, so its callees are captured
    disabled._ember_disabled = True if recursive else "frame"  # type: ignore[attr-defined]
    return disabled


is_disabled = trace_rules.is_disabled
is_allowed_in_graph = trace_rules.is_allowed_in_graph
is_disallowed_in_graph = trace_rules.is_disallowed_in_graph
graph_break = trace_rules.graph_break


def allow_in_graph(fn: F) -> F:
    """Put calls to ``fn`` in the graph as one opaque node instead of tracing into it."""
    trace_rules.allow_in_graph(fn)
    return fn


def disallow_in_graph(fn: F) -> F:
    """Never put ``fn`` in a graph: a call to it is a graph break."""
    trace_rules.disallow_in_graph(fn)
    return fn


def is_compiling() -> bool:
    """``True`` while ember is capturing (capture folds it to ``True`` in graphs)."""
    return STATE.compiling > 0


trace_rules.register_control(is_compiling, "is_compiling")
trace_rules.register_control(allow_in_graph, "allow_in_graph")


def compile_times(repr: str = "str") -> Any:
    """Time spent per compile phase: ``{phase: [seconds, ...]}`` or a table (``repr="str"``)."""
    times = {k: list(v) for k, v in STATE.compile_times.items()}
    if repr != "str":
        return times
    lines = ["ember.dynamo compile times (seconds)", f"{'phase':<20} {'count':>5} {'total':>9} {'max':>9}"]
    for phase, values in sorted(times.items()):
        lines.append(f"{phase:<20} {len(values):>5} {sum(values):>9.4f} {max(values):>9.4f}")
    return "\n".join(lines)


def options_of(compiled: Any) -> DynamoOptions:
    """The options a compiled callable was built with (for tests and reports)."""
    if isinstance(compiled, OptimizedModule):
        compiled = compiled.__dict__["forward"]
    if isinstance(compiled, CompiledFunction):
        return compiled.runtime.options
    raise TypeError(f"{compiled!r} is not an ember compiled callable")
