"""ember.inductor: ATen graphs -> loop IR -> fused C++/OpenMP kernels.

Public API::

    compile_graph(gm_or_graph_ir, example_inputs, options=InductorOptions()) -> callable
    backend                      # torch.compile / ember.dynamo backend (gm, example_inputs) -> callable
    InductorOptions, register_lowering, decomposition_table
"""

from __future__ import annotations

from .backends import backend, inductor, make_backend
from .compile_fx import CompiledGraph, CompileReport, EagerGraph, compile_graph
from .decompositions import decomposition_table
from .errors import (
    CppCompileError,
    InductorError,
    InputMismatchError,
    KernelIndexError,
    LoweringError,
)
from .lowering import register_lowering
from .options import CppOptions, InductorOptions

__all__ = [
    "CompileReport",
    "CompiledGraph",
    "CppCompileError",
    "CppOptions",
    "EagerGraph",
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
