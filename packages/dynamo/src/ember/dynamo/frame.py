"""The contract between frame entry and capture.

The runtime (``function_entry``, ``frame_hook``) hands capture a
:class:`FrameState` (one call about to run) and the :class:`FrameHooks` it
may call back into; capture (``convert_frame``) returns a
:class:`GuardedCode`: transformed code, its guards and the graphs it calls.
The runtime never imports capture: it is given the capture function (``ConvertFn``)
by the public API. Capture sees the runtime through ``FrameHooks``, apart from four
direct imports of it (``function_entry.CompiledFunction`` in ``builder`` and
``variables.nn_module``; ``frame_cache.has_hooks`` and ``frame_hook.run_uncaptured`` in
``split_frame``; ``compiled_graph.graph_entry`` in ``output_graph``, the one path a
frame's graphs are built through), which the layer table of docs/architecture.md
allows: capture sits above the runtime.
"""

from __future__ import annotations

import itertools
import traceback
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from .resume import ResumeCodes

#: Numbers the globals compiled graphs are installed under (``__compiled_fn_<n>``);
#: process-wide so two runtimes never reuse a name in one module's globals.
_graph_ids = itertools.count()


def next_graph_name() -> str:
    """A fresh global name for a compiled graph."""
    return f"__compiled_fn_{next(_graph_ids)}"


#: A backend: ``backend(gm, example_inputs) -> compiled callable`` (torch.compile's signature).
CompilerFn = Callable[[torch.fx.GraphModule, list[torch.Tensor]], Callable[..., Any]]


@dataclass(frozen=True)
class FrameState:
    """One call about to run: the bound arguments of ``code``."""

    code: types.CodeType
    f_locals: dict[str, Any]
    f_globals: dict[str, Any]
    closure: tuple[types.CellType, ...] | None
    fn_name: str
    #: Tensor sizes earlier compiles of this code saw, per source (``None`` where
    #: they differed): what automatic dynamic shapes decides from.
    seen_sizes: Mapping[str, tuple[int | None, ...]] = field(default_factory=dict)


@dataclass
class CapturedGraph:
    """One graph handed to the backend (for counting and ``explain``)."""

    name: str
    gm: torch.fx.GraphModule
    example_inputs: list[torch.Tensor]
    compiled: Callable[..., Any]
    #: Where each graph input is read from in the frame (``ember.ir`` sources), in order.
    input_sources: list[Any] = field(default_factory=list)
    #: Each top-level attribute of ``gm`` (a parameter, buffer or leaf module) and the
    #: frame source it was read from (``None``: made while tracing). The frame cache
    #: rebuilds ``gm`` from these in another process or for another module instance.
    attr_sources: dict[str, Any] = field(default_factory=dict)
    #: why the frame cache cannot store this graph ("": it can)
    unstorable: str = ""
    #: positions of the inputs the graph changes in place (the frame cache re-wraps a
    #: rebuilt graph in ``AliasChecked`` with them)
    mutated: tuple[int, ...] = ()


@dataclass(frozen=True)
class GraphBreak:
    """Where and why a frame was split."""

    reason: str
    user_stack: list[traceback.FrameSummary]


@dataclass
class GuardedCode:
    """One cache entry: run ``code`` when ``check_fn(f_locals, f_globals)``."""

    code: types.CodeType
    check_fn: Any
    guard_set: Any
    graphs: list[CapturedGraph] = field(default_factory=list)
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    #: Tensor sizes this capture saw per input source (the runtime merges them
    #: into the ``seen_sizes`` of the next capture of the same code).
    input_sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: The dynamic dimensions, one line each (``s0 = L['x'].size()[0] (why)``).
    dynamic: list[str] = field(default_factory=list)


class FrameHooks(Protocol):
    """What capture may ask of the runtime that called it."""

    def wrap_function(self, fn: types.FunctionType) -> Callable[..., Any]:
        """A callable that runs ``fn`` through the same cache and backend.

        Calling it binds the arguments, looks up / fills the shared cache for
        ``fn.__code__`` and runs the guarded code, so resume functions and
        callees run at a graph break are captured afresh. Install the result
        in ``f_globals`` (e.g. as ``__resume_at_<offset>_<n>``).
        """
        ...

    def run_hooked(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` run with the runtime's PEP 523 hook on (``fn``'s own frame is
        disabled, so only the functions it calls are captured): how a graph
        break calls a ``disable(recursive=False)`` function."""
        ...

    @property
    def resume_codes(self) -> ResumeCodes:
        """The runtime's resume functions, made once per break site and reused
        (dropped with its cache by ``ember.dynamo.reset()``)."""
        ...


#: ``convert(state, compiler, options, hooks) -> GuardedCode``; raises ``Unsupported``
#: when the frame cannot be captured (options: a ``DynamoOptions``).
ConvertFn = Callable[[FrameState, CompilerFn, Any, FrameHooks], GuardedCode]
