"""The C++/OpenMP backend: one C++ function per ``KernelPlan``, built with g++ and loaded with ctypes.

``generate_kernel`` writes the loop skeleton from the scheduler's plan: an
OpenMP ``parallel for`` over the (merged) outer loops when there is enough
work, and ``omp simd`` (with reduction clauses) on innermost loops; column
reductions take the interchanged skeleton of ``cpp_column.py``. ``CppBackend``
is the ``Backend`` of CPU tensors: it builds the kernels of a graph as a few
translation units in parallel (``cpp_build.py``) and calls them with raw
pointers from the wrapper.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..cpp_build import build_kernels, full_source
from ..errors import KernelIndexError
from ..ir import Layout
from ..kernel_plan import KernelPlan
from ..lowering import SUPPORTED_DTYPES
from ..options import InductorOptions
from ..scheduler import PRIVATE_BYTES
from .backend import BuildStats, KernelSource
from .cpp_column import column_plan, emit_column_kernel
from .cpp_loops import emit_inner_loop, emit_loop_body, loop_nest
from .cpp_ops import CppKernel, CppOps, CppVar, mem_ctype
from .pysize import pysizes

__all__ = ["CppBackend", "CppKernel", "CppOps", "CppVar", "generate_kernel"]


def generate_kernel(
    plan: KernelPlan, buffer_dtypes: dict[str, torch.dtype], options: InductorOptions
) -> tuple[str, list[str], list[str]]:
    """C++ source of one kernel (without prelude), its argument buffer names and the size
    symbols it takes (``int64_t`` arguments after the buffers), in order."""
    k = CppKernel(plan, options)
    args: list[str] = []
    params: list[str] = []
    # a buffer computed in place into an input this kernel also loads: same memory, so
    # neither pointer may be __restrict__, and the call passes it once (the input's
    # pointer is the output's, declared in the body): one ctypes argument and one
    # ``data_ptr()`` less per in-place update (an optimizer step has hundreds)
    shared = {n for pair in plan.inplace.items() if pair[1] in plan.loads for n in pair}
    same_as = {inp: out for out, inp in plan.inplace.items() if inp in plan.loads}
    aliases: list[str] = []
    for name in plan.loads:
        k.pointers[name] = (f"in_{name}", buffer_dtypes[name])
        if name in same_as:
            aliases.append(f"const {mem_ctype(buffer_dtypes[name])}* in_{name} = out_{same_as[name]};")
            continue
        restrict = "" if name in shared else " __restrict__"
        params.append(f"const {mem_ctype(buffer_dtypes[name])}*{restrict} in_{name}")
        args.append(name)
    for name in plan.private:
        k.pointers[name] = (f"local_{name}", buffer_dtypes[name])
    for name in plan.stores:
        k.pointers[name] = (f"out_{name}", buffer_dtypes[name])
        restrict = "" if name in shared else " __restrict__"
        params.append(f"{mem_ctype(buffer_dtypes[name])}*{restrict} out_{name}")
        args.append(name)
    outer = plan.merged_outer()
    cpp = options.cpp
    lines: list[str] = []
    numel = plan.hints.numel  # heuristics read symbolic sizes at their current values
    total_work = numel(plan.outer) * max((numel(lp.inner) for lp in plan.loops), default=1)
    parallel_outer = numel(outer.sizes) >= 8 and total_work >= cpp.parallel_threshold
    if plan.is_pointwise:
        body = emit_loop_body(k, outer)
        lines.extend(
            loop_nest(outer, body, parallel=parallel_outer, simd_inner=True, reductions=[])
        )
    elif cpp.column_reductions and column_plan(plan, outer) is not None:
        parallel = total_work >= cpp.parallel_threshold
        lines.extend(emit_column_kernel(k, plan, outer, parallel))
    else:
        # iteration-local buffers: declared inside the outer loops, so one per thread
        body = [
            f"{mem_ctype(buffer_dtypes[name])} local_{name}[{count}];"
            for name, count in plan.private.items()
        ]
        for loop in plan.loops:
            body.extend(
                emit_inner_loop(
                    k,
                    loop,
                    outer,
                    parallel_inner=not parallel_outer and total_work >= cpp.parallel_threshold,
                )
            )
        lines.extend(
            loop_nest(outer, body, parallel=parallel_outer, simd_inner=False, reductions=[])
        )
    text = "\n".join("  " + ln for ln in [*aliases, *lines])
    symbols = sorted(plan.size_symbols(), key=lambda sym: int(sym.name[1:]))
    sizes = [sym.name for sym in symbols if re.search(rf"\b{sym.name}\b", text)]
    params += [f"const int64_t {name}" for name in sizes]
    src = f'extern "C" void ember_kernel({", ".join(params)})\n{{\n' + text + "\n}\n"
    return src, args, sizes



class CppBackend:
    """The ``Backend`` of CPU tensors: C++/OpenMP kernels."""

    name = "cpp"
    suffix = "cpp"
    label = "C++"
    dtypes = SUPPORTED_DTYPES
    private_bytes = PRIVATE_BYTES
    welford = False
    symbolic_sizes = True

    def __init__(self, options: InductorOptions) -> None:
        self.options = options

    def generate(self, plan: KernelPlan, dtypes: Mapping[str, torch.dtype]) -> KernelSource:
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
        return f"empty_strided({pysizes(layout.size)}, {pysizes(layout.stride)}, dtype={layout.dtype})"

    def extern_name(self, op_name: str) -> str | None:
        return None

    def namespace(self) -> dict[str, Any]:
        return {"empty_strided": torch.empty_strided}


def _index_checked(name: str, fn: Any, take_error: Any) -> Callable[..., None]:
    """``fn`` followed by a check of the kernel's out-of-range-index flag."""

    def call(*args: Any) -> None:
        fn(*args)
        if take_error():
            raise KernelIndexError(
                f"index out of range in generated kernel {name} (an indirect index from "
                "gather/index/index_select/embedding was outside its dimension)"
            )

    return call
