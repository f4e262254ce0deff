"""Options for frame capture.

Two objects live here:

- :class:`DynamoOptions`, the frozen dataclass that is *passed in* to
  ``convert_frame`` and everything below it. Nothing below the public entry
  point reads a global; it reads the options it was handed.
- :data:`config`, the mutable, user-facing settings object
  (``ember.dynamo.config.cache_size_limit = 4``), mirroring
  TorchDynamo's config module. It is read once, when ``compile``/``optimize``
  builds a compiled callable, and turned into a ``DynamoOptions`` snapshot;
  changing ``config`` later affects callables compiled later.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass, fields
from typing import Any

from .legacy_config import LEGACY_SETTINGS


@dataclass(frozen=True, slots=True)
class DynamoOptions:
    """Everything capture needs to know, fixed for one compiled callable.

    Hashable, so it can be part of a cache key.
    """

    #: Raise ``Unsupported`` on the first graph break instead of splitting the
    #: function into several graphs (``nopython=True`` in ``optimize``).
    fullgraph: bool = False
    #: ``None`` (automatic dynamic): dimensions start static; a recompile caused
    #: by a size change compiles the dimensions that changed as symbolic.
    #: ``True``: every dimension of size >= 2 is symbolic from the first compile.
    #: ``False``: never symbolic unless ``mark_dynamic`` says so; every new size
    #: recompiles.
    dynamic: bool | None = None
    #: Cached entries per code object. Past it, ember warns once (naming the
    #: guard that failed) and runs that code eagerly from then on.
    cache_size_limit: int = 8
    #: Python ``int`` arguments are baked into the graph as constants
    #: (guarded by value). ``False`` (symbolic ints) is not implemented:
    #: ``compile`` raises ``CompileOptionsError`` saying so.
    specialize_int: bool = True
    #: ``False`` (the default, torch.compile's too): a Python ``float`` read from the
    #: frame (argument, global, attribute, a resume function's stack) starts as a
    #: constant of the graph, guarded by value; once another value fails that guard,
    #: the recompile takes it as a graph input (a symbolic float), so further values
    #: reuse the graph (ADR 0044). ``True``: every value is a constant and recompiles.
    specialize_float: bool = False
    #: ``True`` (the default; what torch.compile 2.13 does whatever its flag of this name
    #: says): ``tensor.item()`` (and ``int(t)``/``float(t)`` of a one-value integer or
    #: floating tensor) is a graph node whose result is an unbacked symbolic value, an int
    #: ``v<N>`` or a float ``vf<N>``, never guarded on (ADR 0060); a decision on it is a
    #: graph break. ``False``: every such read is a graph break. The environment's
    #: ``TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS``/``EMBER_CAPTURE_SCALAR_OUTPUTS`` (1 or 0)
    #: set it at import and ``reset()``.
    capture_scalar_outputs: bool = True
    #: Trace *through* the ``forward`` of torch.nn built-in modules instead of
    #: emitting one ``call_module`` node per leaf module.
    inline_inbuilt_nn_modules: bool = False
    #: Raise ember's internal errors instead of running eagerly. By default a
    #: failure inside capture (not a graph break) runs the frame eagerly, and a
    #: backend that fails compiling a graph, or compiled code that raises where
    #: eager does not, runs that graph eagerly, each with the reason logged
    #: (logger ``ember.dynamo``). ``EMBER_STRICT=1`` turns this on everywhere
    #: (ember.aotgrad and ember.inductor read it too); ember's tests run so.
    strict: bool = False
    #: Unroll ``for`` loops over at most this many iterations before breaking.
    max_loop_unroll: int = 1024
    #: Inline user functions at most this deep before breaking.
    max_inline_depth: int = 64
    #: Compile only from cached entries: a cache miss runs eagerly instead of
    #: compiling (``ember.dynamo.run``).
    run_only: bool = False
    #: A recompile raises ``RecompileError`` naming the failing guard
    #: (``set_stance("fail_on_recompile")``).
    fail_on_recompile: bool = False
    #: Write a per-frame debug directory (``EMBER_COMPILE_DEBUG=1``): bytecode,
    #: graph IR, guard IR, backend output. ``None`` disables it.
    debug_dir: str | None = None
    #: Capture only functions of this name (``EMBER_DEBUG_FUNCTION``, TorchDynamo's
    #: ``TORCHDYNAMO_DEBUG_FUNCTION``): every other function runs eagerly. ``None``: all.
    debug_function: str | None = None
    #: When a capture fails inside ember (and runs eagerly: ``strict`` is off), log
    #: the full traceback, ember's frames and the user's
    #: (``EMBER_VERBOSE=1``, TorchDynamo's ``verbose``).
    verbose: bool = False
    #: Trace NumPy calls on arrays and ``Tensor.numpy()`` results into the graph
    #: through torch's NumPy compatibility. ``False``: NumPy code is a graph break
    #: and runs with NumPy.
    trace_numpy: bool = True

    def replace(self, **changes: Any) -> DynamoOptions:
        """A copy with ``changes`` applied; unknown names raise ``TypeError``."""
        return dataclasses.replace(self, **changes)


OPTION_NAMES: frozenset[str] = frozenset(f.name for f in fields(DynamoOptions))

#: Options accepted for torch.compile compatibility whose non-default meaning is
#: not implemented: (name, value that is not implemented, what to do instead).
#: ``compile``/``optimize`` raise ``CompileOptionsError`` for them, never ignore them.
NOT_IMPLEMENTED: tuple[tuple[str, Any, str], ...] = (
    ("specialize_int", False,
     "ember specializes Python int arguments (each value is a constant of the graph, guarded, "
     "and another value recompiles). Leave specialize_int at True; for a size that varies, pass "
     "it as a tensor dimension (mark_dynamic, or dynamic=True)"),
)


def not_implemented(options: DynamoOptions) -> str | None:
    """Why ``options`` cannot be honoured (an option set to a value ember does not
    implement), or ``None``."""
    for name, value, instead in NOT_IMPLEMENTED:
        if getattr(options, name) == value and type(getattr(options, name)) is type(value):
            return f"ember.dynamo: {name}={value!r} is not implemented. {instead}."
    return None


class Config:
    """The mutable, user-facing settings (``ember.dynamo.config``).

    Attribute names match :class:`DynamoOptions`, plus TorchDynamo's older names
    the seed documents use (``legacy_config.LEGACY_SETTINGS``: ``debug``,
    ``log_level``, ``dynamic_shapes``, ...), each mapped onto ember's settings or
    accepted with a one-time warning. Setting an unknown name raises
    ``AttributeError`` listing the known ones, so a typo never goes unnoticed.
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_values", _defaults())
        object.__setattr__(self, "_legacy", {k: s.default for k, s in LEGACY_SETTINGS.items()})
        object.__setattr__(self, "_warned", set())

    def __getattr__(self, name: str) -> Any:
        values: dict[str, Any] = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        setting = LEGACY_SETTINGS.get(name)
        if setting is not None:
            if setting.read is not None:
                return setting.read(values)
            return object.__getattribute__(self, "_legacy")[name]
        raise AttributeError(_unknown(name))

    def __setattr__(self, name: str, value: Any) -> None:
        values: dict[str, Any] = object.__getattribute__(self, "_values")
        if name in values:
            values[name] = value
            return
        setting = LEGACY_SETTINGS.get(name)
        if setting is None:
            raise AttributeError(_unknown(name))
        if setting.apply is not None:
            setting.apply(value, values)
        object.__getattribute__(self, "_legacy")[name] = value
        warned: set[str] = object.__getattribute__(self, "_warned")
        if setting.warning and value != setting.default and name not in warned:
            warned.add(name)
            warnings.warn(setting.warning, UserWarning, stacklevel=2)

    def to_options(self, **overrides: Any) -> DynamoOptions:
        """Snapshot the current settings, with ``overrides`` applied on top."""
        values: dict[str, Any] = dict(object.__getattribute__(self, "_values"))
        for name in overrides:
            if name not in values:
                raise AttributeError(_unknown(name))
        values.update(overrides)
        if "strict" not in overrides and os.environ.get("EMBER_STRICT") == "1":
            values["strict"] = True
        return DynamoOptions(**values)

    def reset(self) -> None:
        """Restore every setting to its default, and say the one-time warnings again
        (loggers set through ``debug`` / ``log_level`` keep their levels: ``set_logs``
        changes those)."""
        object.__setattr__(self, "_values", _defaults())
        object.__setattr__(self, "_legacy", {k: s.default for k, s in LEGACY_SETTINGS.items()})
        object.__setattr__(self, "_warned", set())

    def __repr__(self) -> str:
        values: dict[str, Any] = object.__getattribute__(self, "_values")
        body = ", ".join(f"{k}={v!r}" for k, v in values.items())
        return f"ember.dynamo.config({body})"


#: The environment variables that switch dynamic shapes (TorchDynamo's name, ember's).
DYNAMIC_SHAPES_ENV: tuple[str, ...] = ("EMBER_DYNAMIC_SHAPES", "TORCHDYNAMO_DYNAMIC_SHAPES")


#: The environment variables that switch ``capture_scalar_outputs`` (ember's, TorchDynamo's).
CAPTURE_SCALAR_OUTPUTS_ENV: tuple[str, ...] = ("EMBER_CAPTURE_SCALAR_OUTPUTS",
                                               "TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS")


def _defaults() -> dict[str, Any]:
    """``DynamoOptions``' defaults, with the environment's dynamic-shapes switch applied
    (``1``: ``dynamic=True``, the seeds' "won't recompile on shape changes"; ``0``:
    ``dynamic=False``; unset: automatic dynamic), and its ``capture_scalar_outputs``
    switch (1 or 0)."""
    values: dict[str, Any] = {f.name: f.default for f in fields(DynamoOptions)}
    for name in CAPTURE_SCALAR_OUTPUTS_ENV:
        raw = os.environ.get(name)
        if raw is None or raw == "":
            continue
        if raw not in ("0", "1"):
            raise ValueError(f"{name} must be 1 (capture .item() in the graph) or 0 (break), "
                             f"got {raw!r}")
        values["capture_scalar_outputs"] = raw == "1"
        break
    for name in DYNAMIC_SHAPES_ENV:
        raw = os.environ.get(name)
        if raw is None or raw == "":
            continue
        if raw not in ("0", "1"):
            raise ValueError(f"{name} must be 1 (dynamic shapes on) or 0 (off), got {raw!r}")
        values["dynamic"] = raw == "1"
        break
    return values


def _unknown(name: str) -> str:
    return (
        f"ember.dynamo.config has no setting {name!r}; "
        f"known settings: {', '.join(sorted(OPTION_NAMES | set(LEGACY_SETTINGS)))}"
    )


#: The process-wide user settings; read when a callable is compiled.
config = Config()
