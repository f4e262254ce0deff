"""The ``inductor`` backend for ember.dynamo (entry point ``ember.backends``) and torch.compile.

With ember.aotgrad installed (extra ``training``), the backend traces the
joint forward+backward with aotgrad using inductor's decomposition table and
compiles both graphs with ``compile_graph``, so training works. Without it,
the backend traces the graph to ATen itself (inference only: under
``torch.no_grad`` or with inputs that do not require grad) and raises a clear
error if gradients are needed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.fx

from ember.ir.cache_entry import source_fingerprint
from ember.ir.debug import debug_dir_of, set_debug_dir
from ember.ir.shapes import SymNode

from .compile_fx import compile_graph
from .errors import InductorError
from .graph_cache import outside_lowerings
from .logs import perf_hints
from .options import InductorOptions, default_cache_dir, options_from_env
from .torch_options import configure_options


def compile_aten_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """aotgrad's forward/backward compiler with the default options.

    A module-level function, so a repro written after aotgrad
    (``EMBER_REPRO_AFTER=aot``) can name it and a fresh process import it.
    """
    return compile_graph(gm, list(example_inputs), None)


def _graph_compiler(
    options: InductorOptions | None,
) -> Callable[[torch.fx.GraphModule, list[Any]], Any]:
    if options is None or options == InductorOptions():
        return compile_aten_graph

    def compile_fn(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        return compile_graph(gm, list(example_inputs), options)

    return compile_fn


def _symbolic(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> bool:
    """Whether the frontend traced ``gm`` with symbolic sizes (ember's size symbols in its
    placeholders' example values, or ``SymInt`` inputs): the compiled graph must then
    serve every size its guards admit, not only the example inputs' sizes."""
    if any(not isinstance(x, torch.Tensor) for x in example_inputs):
        return True
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        value = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(value, torch.Tensor) and any(
            isinstance(getattr(s, "node", None), SymNode) for s in (*value.shape, *value.stride())
        ):
            return True
    return False


def _needs_grad(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> bool:
    if not torch.is_grad_enabled():
        return False
    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    return any(t.requires_grad for t in tensors) or any(p.requires_grad for p in gm.parameters())


def options_for(
    base: InductorOptions | None, mode: str | None, options: dict[str, Any] | None
) -> InductorOptions:
    """``base`` with torch.compile's ``mode`` and ``options`` applied.

    ``options`` keys are ``InductorOptions`` field names (``{"cpu_backend": "triton"}``,
    ``"cpp.<field>"`` / ``"triton.<field>"`` for the code generators' own), or
    torch.compile's names (``torch_options.py``: mapped, or accepted with a warning
    saying what ember does instead); an unknown key is an ``InductorOptionsError``
    (a ``ValueError``) naming every accepted one.
    """
    opts = configure_options(base or InductorOptions(), options or {})
    if mode is not None:
        opts = dataclasses.replace(opts, mode=mode)
    return opts


def lazy_decomposition_table(aotgrad: Any) -> Any:
    """``decomposition_table()``, built on aotgrad's first lookup (tracing a graph).

    Building it imports every lowering module (it leaves out the ops they lower), which
    a warm start whose traced plans all come from the plan cache never needs. The plan
    cache fingerprint stands for the table without building it: ember.inductor's
    source (its lowerings and decompositions) and the lowerings registered from outside
    it; torch's version is in the plan key already.
    """

    def build() -> Any:
        from .decompositions import decomposition_table

        return decomposition_table()

    def fingerprint() -> str:
        package = source_fingerprint(Path(__file__).resolve().parent)
        return f"ember.inductor decompositions {package} outside lowerings {outside_lowerings()!r}"

    return aotgrad.LazyDecompTable(build, fingerprint)


def make_backend(
    options: InductorOptions | None = None,
) -> Callable[[torch.fx.GraphModule, list[Any]], Any]:
    """A ``(gm, example_inputs) -> callable`` backend compiling with these options.

    Graphs that need gradients go through ember.aotgrad (forward and backward
    compiled by inductor, in one autograd node). Graphs that do not (grad mode off,
    or nothing requires grad) go through aotgrad's inference path: traced once and
    functionalized, so in-place ops, mutated inputs and outputs that are views of
    inputs or of each other behave as in eager; such a graph without mutations or
    aliased outputs runs with no wrapper at all. The frontend guards on grad mode,
    so the choice holds for every call. Without ember.aotgrad, inference graphs are
    traced to ATen here (``aten_trace.py``) and training raises ``InductorError``.
    """
    base = options
    try:
        import ember.aotgrad as aotgrad
    except ImportError:
        aotgrad = None  # type: ignore[assignment]
    compile_fn = _graph_compiler(options)
    training: Callable[[torch.fx.GraphModule, list[Any]], Any] | None = None
    aot_options: Any = None
    decompositions: Any = None
    if aotgrad is not None:
        decompositions = lazy_decomposition_table(aotgrad)
        # Traced forward/backward graphs are cached on disk next to the compiled ones, so
        # a second process neither traces nor lowers (aotgrad's plan_cache.py).
        cache_dir = (options.cache_dir if options is not None else None) or default_cache_dir()
        aot_options = aotgrad.AotOptions(fallback_to_eager=True, cache=True, cache_dir=cache_dir)
        training = aotgrad.aot_autograd(
            fw_compiler=compile_fn,  # type: ignore[arg-type]
            bw_compiler=compile_fn,  # type: ignore[arg-type]
            decompositions=decompositions,
            options=aot_options,
        )

    def backend_fn(
        gm: torch.fx.GraphModule,
        example_inputs: list[Any],
        *,
        mode: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> Any:
        if mode is not None or options:  # torch.compile with backend=..., mode=..., options=...
            return configure(mode, options)(gm, example_inputs)
        opts = base
        symbolic = _symbolic(gm, list(example_inputs))
        # Symbolic graphs without gradients take the inference path too (weights as
        # constants, no per-call wrapper), unless a size is itself an input (a SymInt).
        size_inputs = any(not isinstance(x, torch.Tensor) for x in example_inputs)
        if _needs_grad(gm, list(example_inputs)) or (symbolic and (aotgrad is None or size_inputs)):
            if training is None:
                if symbolic:  # the ATen tracer below traces static sizes only
                    perf_hints.info("running a graph with symbolic sizes eagerly: "
                                    "ember.inductor traces them through ember-aotgrad")
                    return gm.forward
                raise InductorError(
                    "the inductor backend needs ember-aotgrad to compile graphs that need gradients; "
                    "install ember-inductor[training], or run under torch.no_grad()"
                )
            return training(gm, example_inputs)
        # With static shapes the calling frontend guards the sizes, strides and dtypes of
        # these inputs, so the compiled graph need not check them again on every call.
        static = all(all(type(d) is int for d in x.shape) for x in example_inputs)

        def compile_guarded(aten_gm: torch.fx.GraphModule, inputs: list[Any]) -> Any:
            return compile_graph(aten_gm, list(inputs), opts, inputs_guarded=static)

        if aotgrad is not None:
            return aotgrad.aot_inference(
                gm,
                example_inputs,
                compile_guarded,  # type: ignore[arg-type]
                decompositions,
                aot_options,
            )
        from .aten_cache import cached_trace_to_aten

        resolved = options_from_env(opts)
        cache = resolved.cache_dir if resolved.graph_cache else None
        aten_gm = cached_trace_to_aten(gm, list(example_inputs), cache)
        set_debug_dir(aten_gm, debug_dir_of(gm))  # the frontend's debug folder for this graph
        return compile_guarded(aten_gm, list(example_inputs))

    def configure(mode: str | None, extra: dict[str, Any] | None) -> Any:
        """This backend with torch.compile's ``mode``/``options`` applied (ember.dynamo's hook)."""
        return make_backend(options_for(base, mode, extra))

    backend_fn.configure = configure  # type: ignore[attr-defined]
    return backend_fn


def inductor(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    *,
    mode: str | None = None,
    options: dict[str, Any] | None = None,
) -> Any:
    """The default-options backend, registered as ``inductor`` under ``ember.backends``.

    ``mode``/``options`` are what torch.compile passes a callable backend
    (torch.compile of ``m`` with ``backend=ember.inductor.backend, mode="max-autotune"``);
    ember.dynamo passes them through :func:`configure`.
    """
    return make_backend(options_for(None, mode, options))(gm, example_inputs)


def configure(mode: str | None, options: dict[str, Any] | None) -> Any:
    """ember.dynamo's backend hook: ``compile(m, backend="inductor", mode=..., options=...)``."""
    return make_backend(options_for(None, mode, options))


inductor.configure = configure  # type: ignore[attr-defined]


backend = inductor
