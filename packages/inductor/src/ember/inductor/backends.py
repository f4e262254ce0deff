"""The ``inductor`` backend for ember.dynamo (entry point ``ember.backends``) and torch.compile.

With ember.aotgrad installed (extra ``training``), the backend traces the
joint forward+backward with aotgrad using inductor's decomposition table and
compiles both graphs with ``compile_graph``, so training works. Without it,
the backend traces the graph to ATen itself (inference only: under
``torch.no_grad`` or with inputs that do not require grad) and raises a clear
error if gradients are needed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from ember.ir.debug import debug_dir_of, set_debug_dir

from .compile_fx import compile_graph
from .errors import InductorError
from .options import InductorOptions, default_cache_dir


def _graph_compiler(
    options: InductorOptions | None,
) -> Callable[[torch.fx.GraphModule, list[Any]], Any]:
    def compile_fn(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        return compile_graph(gm, list(example_inputs), options)

    return compile_fn


def _needs_grad(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> bool:
    if not torch.is_grad_enabled():
        return False
    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    return any(t.requires_grad for t in tensors) or any(p.requires_grad for p in gm.parameters())


def make_backend(
    options: InductorOptions | None = None,
) -> Callable[[torch.fx.GraphModule, list[Any]], Any]:
    """A ``(gm, example_inputs) -> callable`` backend compiling with these options.

    Graphs that need gradients go through ember.aotgrad (forward and backward
    compiled by inductor). Graphs that do not (grad mode off, or nothing
    requires grad) are traced to ATen directly: no autograd wrapper at run
    time. The frontend guards on grad mode, so the choice holds for every call.
    """
    try:
        import ember.aotgrad as aotgrad
    except ImportError:
        aotgrad = None  # type: ignore[assignment]
    compile_fn = _graph_compiler(options)
    training: Callable[[torch.fx.GraphModule, list[Any]], Any] | None = None
    if aotgrad is not None:
        from .decompositions import decomposition_table

        # Traced forward/backward graphs are cached on disk next to the compiled ones, so
        # a second process neither traces nor lowers (aotgrad's plan_cache.py).
        cache_dir = (options.cache_dir if options is not None else None) or default_cache_dir()
        training = aotgrad.aot_autograd(
            fw_compiler=compile_fn,  # type: ignore[arg-type]
            bw_compiler=compile_fn,  # type: ignore[arg-type]
            decompositions=decomposition_table(),
            options=aotgrad.AotOptions(fallback_to_eager=True, cache=True, cache_dir=cache_dir),
        )

    def backend_fn(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        from .aten_trace import trace_to_aten

        symbolic = any(not isinstance(x, torch.Tensor) for x in example_inputs)
        if _needs_grad(gm, list(example_inputs)) or (symbolic and training is not None):
            if training is None:
                raise InductorError(
                    "the inductor backend needs ember-aotgrad to compile graphs that need gradients; "
                    "install ember-inductor[training], or run under torch.no_grad()"
                )
            return training(gm, example_inputs)
        aten_gm = trace_to_aten(gm, list(example_inputs))
        set_debug_dir(aten_gm, debug_dir_of(gm))  # the frontend's debug folder for this graph
        # With static shapes the calling frontend guards the sizes, strides and dtypes of
        # these inputs, so the compiled graph need not check them again on every call.
        static = all(all(type(d) is int for d in x.shape) for x in example_inputs)
        return compile_graph(aten_gm, list(example_inputs), options, inputs_guarded=static)

    return backend_fn


def inductor(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """The default-options backend, registered as ``inductor`` under ``ember.backends``."""
    return make_backend()(gm, example_inputs)


backend = inductor
