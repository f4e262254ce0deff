"""C++ source of one kernel: the loop skeleton from the scheduler's plan.

An OpenMP ``parallel for`` over the (merged) outer loops when there is enough work,
and ``omp simd`` (with reduction clauses) on innermost loops; column reductions take
the interchanged skeleton of ``cpp_column.py``. Split from ``cpp.py`` (the backend
that builds and loads kernels) so that loading cached kernels imports none of this.
"""

from __future__ import annotations

import torch

from ..kernel_plan import KernelPlan
from ..options import InductorOptions
from .common import size_args
from .cpp_column import column_plan, emit_column_kernel
from .cpp_loops import emit_inner_loop, emit_loop_body, loop_nest
from .cpp_ops import CppKernel, mem_ctype

__all__ = ["generate_kernel"]


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
    # (the same for a buffer computed in place of one this kernel reads for the last time)
    into = {**plan.inplace, **plan.in_place_of}
    shared = {n for pair in into.items() if pair[1] in plan.loads for n in pair}
    same_as = {inp: out for out, inp in into.items() if inp in plan.loads}
    aliases: list[str] = []
    for name in plan.loads:
        k.pointers[name] = (f"in_{name}", buffer_dtypes[name])
        if name in same_as:
            aliases.append(f"const {mem_ctype(buffer_dtypes[name])}* in_{name} = out_{same_as[name]};")
            continue
        restrict = "" if name in shared else " __restrict__"
        if name not in shared:
            k.readonly.add(f"in_{name}")
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
            loop_nest(
                outer,
                body,
                parallel=parallel_outer,
                simd_inner=True,
                reductions=[],
                before_inner=k.before_inner,
                specialize=k.specialize,
            )
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
    sizes = size_args(plan, text)
    params += [f"const int64_t {name}" for name in sizes]
    src = f'extern "C" void ember_kernel({", ".join(params)})\n{{\n' + text + "\n}\n"
    return src, args, sizes
