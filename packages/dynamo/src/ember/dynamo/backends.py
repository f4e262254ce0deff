"""Backend registry: names to compiler functions.

A backend has torch.compile's signature::

    backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable

Names resolve in this order: backends registered in this process with
:func:`register_backend`, then the ``ember.backends`` entry-point group, so
installing ``ember-aotgrad`` is what makes ``"aot_eager"`` available and
installing ``ember-inductor`` is what makes ``"inductor"`` available.
ember.dynamo itself ships only ``eager``. Any callable is accepted as is.

:func:`resolve_backend` is the one step from ``compile(..., backend=, mode=,
options=)`` to a :class:`Backend`: the name looked up, ``mode``/``options``
applied through the backend's ``configure`` hook, the minifier's repro hook put
around it (``EMBER_REPRO_AFTER``). A ``Runtime`` holds that object, and every
compiled callable of the runtime (functions, modules, regional blocks, optimizer
steps) compiles its graphs through it (``compiled_graph.GraphCompiler``).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import torch

from .frame import CompilerFn

LOG = logging.getLogger("ember.dynamo")

ENTRY_POINT_GROUP = "ember.backends"

#: Backends registered in this process (by ``register_backend``); filled at import
#: and by users, never elsewhere.
_REGISTRY: dict[str, CompilerFn] = {}


class InvalidBackendError(ValueError, KeyError):
    """A backend name that no installed package provides (a ``KeyError`` of
    :data:`BACKENDS` too).

    Example::

        unknown ember backend 'inductr'; installed backends: aot_eager, eager,
        inductor. Install the package that provides it (ember-inductor gives
        'inductor', ember-aotgrad gives 'aot_eager'), register one with
        @ember.dynamo.register_backend('inductr'), or pass a callable
        backend(gm, example_inputs).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class CompileOptionsError(ValueError):
    """A ``mode`` or ``options`` key that ``compile`` does not know.

    Example::

        ember.dynamo.compile: unknown options key(s) 'max_autotun'; backend
        'eager' accepts none, and ember.dynamo accepts: cache_size_limit,
        debug_dir, dynamic, ...
    """


def eager(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
    """Run the captured graph with PyTorch eager: returns ``gm.forward``."""
    return gm.forward


def register_backend(
    name: str | None = None,
) -> Callable[[CompilerFn], CompilerFn]:
    """Decorator: make ``fn`` available as ``backend=name`` (default: its ``__name__``).

    ``@register_backend("mine")`` or ``@register_backend()``; re-registering a
    name replaces the earlier backend.
    """

    def register(fn: CompilerFn) -> CompilerFn:
        if not callable(fn):
            raise TypeError(f"register_backend expects a callable, got {type(fn).__name__}")
        key = name if name is not None else getattr(fn, "__name__", None)
        if not isinstance(key, str) or not key:
            raise TypeError("register_backend needs a name for a callable without __name__")
        _REGISTRY[key] = fn
        return fn

    if callable(name):  # used bare: @register_backend
        fn = name
        name = None
        return register(fn)
    return register


def _entry_points() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def list_backends() -> list[str]:
    """Names of every backend available now, sorted."""
    return sorted(set(_REGISTRY) | set(_entry_points()))


def lookup_backend(backend: str | CompilerFn) -> CompilerFn:
    """The compiler function for a name or callable; unknown names raise ``InvalidBackendError``."""
    if callable(backend):
        return backend
    if not isinstance(backend, str):
        raise TypeError(
            f"backend must be a name or a callable backend(gm, example_inputs), "
            f"got {type(backend).__name__}"
        )
    if backend in _REGISTRY:
        return _REGISTRY[backend]
    eps = _entry_points()
    if backend in eps:
        fn = eps[backend].load()
        if not callable(fn):
            raise InvalidBackendError(
                f"ember backend {backend!r} (entry point {eps[backend].value}) is not callable"
            )
        return fn  # type: ignore[no-any-return]
    raise InvalidBackendError(
        f"unknown ember backend {backend!r}; installed backends: {', '.join(list_backends())}. "
        "Install the package that provides it (ember-inductor gives 'inductor', "
        "ember-aotgrad gives 'aot_eager'), register one with "
        f"@ember.dynamo.register_backend({backend!r}), or pass a callable "
        "backend(gm, example_inputs)."
    )


class _Backends(Mapping[str, CompilerFn]):
    """Every available backend by name (TorchDynamo's ``optimizations.BACKENDS``).

    ``BACKENDS["inductor"](gm, example_inputs)`` compiles with that backend, so
    backends combine in a backend of one's own; entries load on first use. An
    unknown name raises :class:`InvalidBackendError` (a ``KeyError``).
    """

    def __getitem__(self, name: str) -> CompilerFn:
        if not isinstance(name, str):
            raise InvalidBackendError(f"backend names are strings, got {name!r}")
        return lookup_backend(name)

    def __iter__(self) -> Iterator[str]:
        return iter(list_backends())

    def __len__(self) -> int:
        return len(list_backends())

    def __repr__(self) -> str:
        return f"ember.dynamo.BACKENDS({', '.join(list_backends())})"


#: The backends by name: ``from ember.dynamo.backends import BACKENDS``.
BACKENDS: Mapping[str, CompilerFn] = _Backends()


REPRO_ENTRY_POINT_GROUP = "ember.repro"


def with_repro_hook(compiler: CompilerFn, environ: Mapping[str, str] | None = None) -> CompilerFn:
    """Let an installed ember.minifier wrap ``compiler`` when ``EMBER_REPRO_AFTER`` is set.

    The minifier is found by entry point (group ``ember.repro``, name
    ``wrap_backend``), never imported, so ember.dynamo works without it. With
    ``EMBER_REPRO_AFTER`` unset nothing is looked up (no import cost); with it set
    and no minifier installed, a warning says what to install.
    """
    env = os.environ if environ is None else environ
    if not env.get("EMBER_REPRO_AFTER"):
        return compiler
    for ep in entry_points(group=REPRO_ENTRY_POINT_GROUP, name="wrap_backend"):
        try:
            wrapped = ep.load()(compiler, after="dynamo")
        except Exception as e:  # a broken optional hook must not break compiling
            LOG.warning("ignoring the ember.repro hook %s: %s: %s", ep.value, type(e).__name__, e)
            continue
        return wrapped  # type: ignore[no-any-return]
    warnings.warn(
        "EMBER_REPRO_AFTER is set but ember-minifier is not installed, so no repro is "
        "written; install it with `pip install ember-minifier` (or packages/minifier).",
        stacklevel=user_stacklevel(),  # the user's compile()/optimize() line
    )
    return compiler


def backend_name(backend: str | CompilerFn) -> str:
    """A printable name for a backend (for logs and reports)."""
    if isinstance(backend, str):
        return backend
    return getattr(backend, "__name__", type(backend).__name__)


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside ember."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("ember."):
        frame = frame.f_back
        level += 1
    return level


def _configured(
    compiler: CompilerFn, mode: str | None, options: dict[str, Any], option_names: Iterable[str]
) -> CompilerFn:
    """Apply ``mode``/backend ``options`` through the backend's ``configure`` hook.

    A backend that takes options exposes ``configure(mode, options) ->
    CompilerFn`` (it raises ``ValueError`` for keys it does not know, and warns
    for a mode it does not implement). A backend without it takes no options,
    and a mode other than "default" is said to change nothing for it.
    """
    configure = getattr(compiler, "configure", None)
    if configure is not None and (mode is not None or options):
        try:
            return configure(mode, options)  # type: ignore[no-any-return]
        except ValueError as exc:
            raise CompileOptionsError(f"ember.dynamo.compile: {exc}") from exc
    name = backend_name(compiler)
    if options:
        raise CompileOptionsError(
            f"ember.dynamo.compile: unknown options key(s) {', '.join(map(repr, sorted(options)))}; "
            f"backend {name!r} takes no options, and ember.dynamo's own are: "
            f"{', '.join(sorted(option_names))}"
        )
    if mode is not None:
        warnings.warn(
            f"ember.dynamo.compile: mode={mode!r} changes nothing with backend {name!r}: modes "
            "configure the inductor backend's code generation (CUDA graphs, autotuning), and "
            f"{name!r} runs each graph as it always does",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
    return compiler


@dataclass(frozen=True, eq=False)
class Backend:
    """A backend resolved once (:func:`resolve_backend`): what a ``Runtime`` holds.

    ``compiler`` is the function graphs are handed to: the looked-up backend,
    configured with ``mode``/``options``, inside the minifier's repro hook when
    ``EMBER_REPRO_AFTER`` is set. ``spec`` is what the user passed (a registered
    name keys the disk frame store, ``api.frame_store``); ``mode`` and
    ``options`` are as given to ``compile``.
    """

    name: str
    compiler: CompilerFn
    spec: str | CompilerFn
    mode: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @staticmethod
    def of(compiler: CompilerFn) -> Backend:
        """A backend function taken as it is (no lookup, no options, no repro hook)."""
        return Backend(backend_name(compiler), compiler, compiler)


def resolve_backend(
    backend: str | CompilerFn,
    mode: str | None = None,
    options: dict[str, Any] | None = None,
    *,
    option_names: Iterable[str] = (),
) -> Backend:
    """``backend`` (a name or a callable) looked up, configured with ``mode`` (``"default"``
    configures nothing) and the backend's ``options``, and inside the repro hook: the one
    resolution step of ``compile``/``optimize``. Unknown names raise
    ``InvalidBackendError``, options the backend refuses ``CompileOptionsError``
    (``option_names``: ember.dynamo's own, named in that message)."""
    opts = dict(options or {})
    compiler = lookup_backend(backend)
    compiler = _configured(compiler, None if mode == "default" else mode, opts, option_names)
    compiler = with_repro_hook(compiler)
    return Backend(backend_name(backend), compiler, backend, mode, opts)
