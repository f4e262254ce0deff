"""ember.dynamo: capture Python functions into guarded FX graphs.

    import ember.dynamo
    fn = ember.dynamo.compile(fn, backend="eager")

See README.md for the API; docs/design.md and docs/architecture.md for how capture works.
"""

from __future__ import annotations

from . import logs as _logs
from .api import (
    OptimizeContext,
    OptimizedModule,
    allow_in_graph,
    compile,
    compile_times,
    disable,
    disallow_in_graph,
    graph_break,
    is_compiling,
    optimize,
    reset,
    run,
    set_stance,
)
from .artifacts import load_cache_artifacts, save_cache_artifacts
from .backends import (
    BACKENDS,
    CompileOptionsError,
    InvalidBackendError,
    eager,
    list_backends,
    lookup_backend,
    register_backend,
)
from .cache import RecompileError
from .config import DynamoOptions, config
from .errors import Unsupported
from .explain import ExplainOutput, LegacyExplanation, explain
from .frame import FrameHooks
from .function_entry import CompiledFunction
from .logs import LogSettingsError, get_logger, set_logs
from .numpy_api import wrap_numpy
from .profiler import CompileProfiler
from .shapes import mark_dynamic, mark_static, mark_static_address, maybe_mark_dynamic

__all__ = [
    "wrap_numpy",
    "BACKENDS",
    "CompileOptionsError",
    "CompileProfiler",
    "CompiledFunction",
    "DynamoOptions",
    "ExplainOutput",
    "FrameHooks",
    "InvalidBackendError",
    "LegacyExplanation",
    "LogSettingsError",
    "OptimizeContext",
    "OptimizedModule",
    "RecompileError",
    "Unsupported",
    "allow_in_graph",
    "compile",
    "compile_times",
    "config",
    "disable",
    "disallow_in_graph",
    "eager",
    "explain",
    "get_logger",
    "graph_break",
    "is_compiling",
    "list_backends",
    "load_cache_artifacts",
    "lookup_backend",
    "mark_dynamic",
    "mark_static",
    "mark_static_address",
    "maybe_mark_dynamic",
    "optimize",
    "register_backend",
    "reset",
    "run",
    "save_cache_artifacts",
    "set_logs",
    "set_stance",
]

_logs.configure_from_env()
