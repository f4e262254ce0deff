"""What runs in place of a captured graph: the backend's result and the wrappers around it,
composed here, in one order, for every producer.

Every graph ember hands to a backend goes through :class:`GraphCompiler` (one per
``Runtime``, ``Runtime.compiler``): graphs of a fresh capture (``output_graph``), graphs
of a stored frame bound to a new call or another instance of a block (``frame_cache``:
warm start, regional compilation) and optimizer steps (``optimizer``). Graphs that a
frame calls are then installed by :func:`graph_entry`, the one path both producers of
frame-cache entries (capture and ``frame_cache.instantiate``) build their graphs
through. From the inside out, what a frame's global finally calls:

1. the backend as resolved once (``backends.resolve_backend``): the looked-up backend,
   configured with ``mode``/``options``, inside the minifier's repro hook
   (``EMBER_REPRO_AFTER``);
2. under DDP's forward, split at gradient-bucket boundaries, each piece compiled on its
   own (``distributed.split_at_ddp_buckets``; only while a DDP forward is active);
3. the eager fallback: a backend that raises compiling leaves the FX graph's own
   ``forward``; compiled code that raises where eager does not runs eagerly from then on
   (``eager_fallback.EagerOnError``; neither with ``strict``). A graph compiled under
   ``no_grad`` that switches grad on is not handed to the backend at all: its FX graph
   runs (the backend would build no backward for the ops after the switch);
4. ``LeavingGradMode``: the grad mode the graph leaves behind, set after it ran;
5. ``frame_hook.run_uncaptured``: while a ``with optimize()`` block is active, the
   compiled code runs with frame capture suspended;
6. for a further instance of a block, what the backend compiled for the first one,
   rebound to this instance's weights (:func:`rebound`, through layers 3 and 5) instead
   of layers 1 to 5 made again (``frame_cache``'s shared compiles);
7. ``AliasChecked``, for a graph that writes some of its inputs whose frame's guards do
   not check their aliasing (``NO_ALIASING``, ADR 0062): an aliased call runs the FX graph;
8. the global the frame's transformed code calls (``frame.next_graph_name``).

Layers 1 to 5 are timed (``compile_times()``'s ``backend_compile``) and recorded as
the ``backend`` stage (``ember.ir.stages``); with ``EMBER_COMPILE_DEBUG`` each graph
names its folder in the frame's debug folder (:meth:`GraphCompiler.in_folder`).
Optimizer steps get layers 1 to 5 (their graphs are called by the step, not by a frame).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ember.ir.debug import debug_dir_of
from ember.ir.logs import reason
from ember.ir.stages import stage

from . import frame_hook
from .backends import Backend
from .config import DynamoOptions
from .debug_dir import name_backend_folder
from .distributed import active_ddp_module, split_at_ddp_buckets
from .eager_fallback import (
    EagerOnError,
    LeavingGradMode,
    alias_checked,
    exit_grad_mode,
    set_mutated_inputs,
    turns_grad_on,
)
from .frame import CapturedGraph, CompilerFn, next_graph_name
from .logs import get_logger

if TYPE_CHECKING:
    from .function_entry import RuntimeState

log_dynamo = get_logger("dynamo")
log_perf = get_logger("perf_hints")


class GraphCompiler:
    """A runtime's backend as every producer of compiled graphs calls it: layers 1 to 5."""

    def __init__(self, backend: Backend, options: DynamoOptions, state: RuntimeState) -> None:
        self.backend = backend
        self.options = options
        self.state = state

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        start = time.perf_counter()
        with stage("backend", folder=debug_dir_of(gm)):
            if not torch.is_grad_enabled() and turns_grad_on(gm):
                # compiled under no_grad, a backend builds no backward, yet the ops after
                # the graph's `_set_grad_enabled(True)` must record history (a graph
                # resumed inside `with torch.no_grad()` that runs past its end, fuzz seed
                # 4020): run the FX graph, which switches the mode itself
                log_perf.info(
                    "a graph called under no_grad that switches grad on runs as its FX "
                    "graph, not compiled by the backend (a backend compiling under no_grad "
                    "builds no backward for the ops after the switch)"
                )
                return frame_hook.run_uncaptured(gm.forward) if self.state.hook_runtimes else gm.forward
            try:
                compiler = self.backend.compiler
                if active_ddp_module() is not None:
                    compiler = split_at_ddp_buckets(compiler, fullgraph=self.options.fullgraph)
                compiled = compile_or_eager(
                    compiler, gm, example_inputs, strict=self.options.strict,
                    verbose=self.options.verbose,
                )
                mode = exit_grad_mode(gm)
                if mode is not None:
                    compiled = LeavingGradMode(compiled, mode)
                if self.state.hook_runtimes:
                    compiled = frame_hook.run_uncaptured(compiled)
                return compiled
            finally:
                self.state.record_time("backend_compile", time.perf_counter() - start)

    def in_folder(self, folder: Path | None) -> CompilerFn:
        """This compiler for one capture: with ``EMBER_COMPILE_DEBUG`` (``folder``, the
        frame's debug folder) each graph names its folder there (``gm.meta``)."""
        if folder is None:
            return self
        graphs = itertools.count()

        def compile_in_folder(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
            name_backend_folder(folder, next(graphs), gm)
            return self(gm, example_inputs)

        return compile_in_folder


def compile_or_eager(
    backend: Callable[[torch.fx.GraphModule, list[Any]], Any],
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    *,
    strict: bool,
    verbose: bool = False,
) -> Callable[..., Any]:
    """Layer 3: ``backend(gm, example_inputs)``, guarded; ``gm`` itself if the backend fails
    (the traceback logged with ``verbose``, TorchDynamo's ``config.verbose``)."""
    name = type(gm).__name__
    try:
        compiled = backend(gm, example_inputs)
    except Exception as exc:
        if strict:
            raise
        log_dynamo.warning(
            "the backend failed compiling %s (%s); running that graph eagerly "
            "(strict=True or EMBER_STRICT=1 raises instead)",
            name,
            reason(exc),
            exc_info=exc if verbose or log_dynamo.isEnabledFor(10) else None,
        )
        return gm.forward
    if strict:
        return compiled  # type: ignore[no-any-return]
    return EagerOnError(compiled, gm, name)


def rebound(
    compiled: Callable[..., Any], new_for: dict[int, torch.Tensor], gm: torch.fx.GraphModule
) -> Callable[..., Any] | None:
    """Layer 6: what the backend compiled for one module instance (layers 1 to 5), reading
    another instance's weights instead (``new_for``: ``id`` of each old weight -> the new
    one), with ``gm`` (the new instance's graph) as the eager fallback; None where the
    compiled object cannot say how (a backend result with ``rebind_weights``, e.g.
    ember.inductor's compiled graphs, or the graph's own bound ``forward``; closures and
    other wrappers cannot)."""
    if type(compiled) is EagerOnError:
        if compiled.failed is not None:
            return None
        inner = rebound(compiled.compiled, new_for, gm)
        return None if inner is None else EagerOnError(inner, gm, compiled.name)
    rewrap = getattr(compiled, "_ember_rewrap", None)
    if rewrap is not None:  # a wrapper that says how to wrap again (``frame_hook.run_uncaptured``)
        inner = rebound(compiled.__wrapped__, new_for, gm)  # type: ignore[attr-defined]
        return None if inner is None else rewrap(inner)
    owner = getattr(compiled, "__self__", None)
    if isinstance(owner, torch.fx.GraphModule) and getattr(compiled, "__name__", "") in (
        "forward",
        "_lazy_forward",  # an FX graph module whose code is generated on its first call
    ):
        # the backend returned the graph's own ``forward`` (eager-style backends, counting
        # test backends): the new instance's graph, same code over its own weights, is that
        return gm.forward
    rebind = getattr(type(compiled), "rebind_weights", None)
    if rebind is None:
        return None
    found: Callable[..., Any] | None = rebind(compiled, new_for)
    return found


def graph_entry(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    mutated: tuple[int, ...],
    compile: Callable[[], Any],
    f_globals: dict[str, Any],
    *,
    alias_guarded: bool,
    sources: list[Any],
    attr_sources: dict[str, Any],
    unstorable: str = "",
) -> CapturedGraph:
    """One graph of a frame-cache entry, built the same way by both producers (a capture,
    ``output_graph.compile``; a stored frame bound to a call, ``frame_cache.instantiate``):
    ``gm`` told which inputs it writes (read by layer 3), compiled by ``compile`` (layers 1
    to 5, or 6), checked for aliased inputs (layer 7, unless ``alias_guarded``: the frame's
    guards check it) and installed in ``f_globals`` under a fresh name (layer 8)."""
    set_mutated_inputs(gm, mutated)
    compiled = alias_checked(compile(), gm, mutated, guarded=alias_guarded)
    name = next_graph_name()
    f_globals[name] = compiled
    return CapturedGraph(
        name, gm, example_inputs, compiled, sources, attr_sources, unstorable, mutated
    )
