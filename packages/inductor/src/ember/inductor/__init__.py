"""ember.inductor: ATen graphs -> loop IR -> fused C++/OpenMP kernels.

Public API::

    compile_graph(gm_or_graph_ir, example_inputs, options=InductorOptions()) -> callable
    backend                      # torch.compile / ember.dynamo backend (gm, example_inputs) -> callable
    InductorOptions, register_lowering, decomposition_table
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .backends import backend, inductor, make_backend
from .compile_fx import CompiledGraph, CompileReport, EagerGraph, compile_graph
from .errors import (
    CppCompileError,
    InductorError,
    InputMismatchError,
    KernelIndexError,
    LoweringError,
)
from .options import CppOptions, InductorOptions
from .unbacked import SplitGraph

if TYPE_CHECKING:
    from .decompositions import decomposition_table
    from .lowering import register_lowering


def __getattr__(name: str) -> Any:
    """``register_lowering`` and ``decomposition_table``, imported on first use: the
    lowering stack (and sympy) is not needed to run graphs loaded from the caches."""
    if name == "register_lowering":
        from .lowering import register_lowering

        return register_lowering
    if name == "decomposition_table":
        from .decompositions import decomposition_table

        return decomposition_table
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "CompileReport",
    "CompiledGraph",
    "CppCompileError",
    "CppOptions",
    "EagerGraph",
    "SplitGraph",
    "InductorError",
    "InductorOptions",
    "InputMismatchError",
    "KernelIndexError",
    "LoweringError",
    "backend",
    "compile_graph",
    "decomposition_table",
    "inductor",
    "make_backend",
    "register_lowering",
]
