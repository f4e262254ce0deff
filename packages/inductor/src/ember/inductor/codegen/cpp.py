"""The C++/OpenMP backend: one C++ function per ``KernelPlan``, built with g++ and loaded with ctypes.

``generate_kernel`` (``cpp_kernel.py``) writes each kernel's source. ``CppBackend``
is the ``Backend`` of CPU tensors: it builds the kernels of a graph as a few
translation units in parallel (``cpp_build.py``) and calls them with raw
pointers from the wrapper. Generation is imported on first use: a graph loaded
from the graph cache only builds (or loads) and calls its kernels.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from ..cpp_build import build_kernels, full_source
from ..errors import KernelIndexError
from ..limits import PRIVATE_BYTES, SUPPORTED_DTYPES
from ..options import InductorOptions
from .backend import BuildStats, KernelSource

if TYPE_CHECKING:
    from ..ir import Layout
    from ..kernel_plan import KernelPlan

__all__ = ["CppBackend"]


def __getattr__(name: str) -> Any:
    """``CppKernel``, ``CppOps``, ``CppVar`` and ``generate_kernel``, imported on first use."""
    if name in ("CppKernel", "CppOps", "CppVar"):
        from . import cpp_ops

        return getattr(cpp_ops, name)
    if name == "generate_kernel":
        from .cpp_kernel import generate_kernel

        return generate_kernel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class CppBackend:
    """The ``Backend`` of CPU tensors: C++/OpenMP kernels."""

    name = "cpp"
    suffix = "cpp"
    label = "C++"
    dtypes = SUPPORTED_DTYPES
    private_bytes = PRIVATE_BYTES
    welford = False
    vector_calls_need_unit_stride = True
    symbolic_sizes = True

    def __init__(self, options: InductorOptions) -> None:
        self.options = options

    def generate(self, plan: KernelPlan, dtypes: Mapping[str, torch.dtype]) -> KernelSource:
        from .cpp_kernel import generate_kernel

        src, args, sizes = generate_kernel(plan, dict(dtypes), self.options)
        return KernelSource(src, args, sizes=sizes)

    def build(
        self, kernels: Mapping[str, KernelSource], stats: BuildStats
    ) -> dict[str, Callable[..., Any]]:
        """Compile the kernels as ``compile_threads`` translation units, in parallel; load each."""
        names = list(kernels)
        if not names:
            return {}
        n_units = max(1, min(self.options.compile_threads, len(names)))
        per_unit = -(-len(names) // n_units)
        units = [names[i : i + per_unit] for i in range(0, len(names), per_unit)]
        unit_sources = []
        for u, unit in enumerate(units):
            body = "\n".join(
                kernels[name].source.replace("void ember_kernel(", f"void ember_kernel_{j}(", 1)
                for j, name in enumerate(unit)
            )
            unit_sources.append((f"unit{u}", full_source(body)))
        libs = build_kernels(unit_sources, self.options, stats)
        loaded: dict[str, Callable[..., Any]] = {}
        for u, unit in enumerate(units):
            for j, name in enumerate(unit):
                fn = getattr(libs[f"unit{u}"], f"ember_kernel_{j}")
                fn.argtypes = [ctypes.c_void_p] * len(kernels[name].args) + [ctypes.c_int64] * len(
                    kernels[name].sizes
                )
                fn.restype = None
                if "ember_check_index(" in kernels[name].source:
                    take = libs[f"unit{u}"].ember_take_index_error
                    take.argtypes, take.restype = [], ctypes.c_int
                    loaded[name] = _index_checked(name, fn, take)
                else:
                    loaded[name] = fn
        return loaded

    def call(self, name: str, kernel: KernelSource) -> str:
        args = [f"{a}.data_ptr()" for a in kernel.args] + list(kernel.sizes)
        return f"{name}({', '.join(args)})"

    def allocate(self, layout: Layout) -> str:
        from .pysize import pysizes

        return f"empty_strided({pysizes(layout.size)}, {pysizes(layout.stride)}, dtype={layout.dtype})"

    def extern_name(self, op_name: str) -> str | None:
        return None

    def namespace(self) -> dict[str, Any]:
        return {"empty_strided": torch.empty_strided}


def _index_checked(name: str, fn: Any, take_error: Any) -> Callable[..., None]:
    """``fn`` followed by a check of the kernel's out-of-range-index flag."""

    message = (f"index out of range in generated kernel {name} (an indirect index from "
               "gather/index/index_select/embedding was outside its dimension)")

    def call(*args: Any) -> None:
        fn(*args)
        if take_error():
            raise KernelIndexError(message)

    # what the native graph runner calls instead (native_runner.py)
    call.native_fn = fn  # type: ignore[attr-defined]
    call.native_take_error = take_error  # type: ignore[attr-defined]
    call.native_message = message  # type: ignore[attr-defined]
    return call
