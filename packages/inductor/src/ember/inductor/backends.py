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

from .compile_fx import compile_graph
from .errors import InductorError
from .options import InductorOptions


def _graph_compiler(
    options: InductorOptions | None,
) -> Callable[[torch.fx.GraphModule, list[Any]], Any]:
    def compile_fn(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        return compile_graph(gm, list(example_inputs), options)

    return compile_fn


def make_backend(
    options: InductorOptions | None = None,
) -> Callable[[torch.fx.GraphModule, list[Any]], Any]:
    """A ``(gm, example_inputs) -> callable`` backend compiling with these options."""
    try:
        import ember.aotgrad as aotgrad
    except ImportError:
        aotgrad = None  # type: ignore[assignment]
    compile_fn = _graph_compiler(options)
    if aotgrad is not None:
        from .decompositions import decomposition_table

        return aotgrad.aot_autograd(
            fw_compiler=compile_fn,  # type: ignore[arg-type]
            bw_compiler=compile_fn,  # type: ignore[arg-type]
            decompositions=decomposition_table((options or InductorOptions()).prefer_aten),
        )

    def inference_only(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        from .aten_trace import trace_to_aten

        if torch.is_grad_enabled() and any(
            isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs
        ):
            raise InductorError(
                "the inductor backend needs ember-aotgrad to compile graphs that need gradients; "
                "install ember-inductor[training], or run under torch.no_grad()"
            )
        aten_gm = trace_to_aten(gm, list(example_inputs))
        return compile_fn(aten_gm, list(example_inputs))

    return inference_only


def inductor(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    """The default-options backend, registered as ``inductor`` under ``ember.backends``."""
    return make_backend()(gm, example_inputs)


backend = inductor
