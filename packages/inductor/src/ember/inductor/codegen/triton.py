"""The Triton backend: one Triton kernel per ``KernelPlan``, for CUDA tensors.

It is also a CPU backend (``InductorOptions(cpu_backend="triton")``): CPU
tensors run the same kernels under Triton's interpreter, which is how the
generator is tested on machines without a GPU. Kernel generation is
``triton_kernel.py`` (+ ``triton_ops.py``, ``triton_reduce.py``); loading,
compiling, launching and autotuning are ``triton_runtime.py``; the
max-autotune matmul template is ``triton_template.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..ir import Layout
from ..kernel_plan import KernelPlan
from ..lowering import SUPPORTED_DTYPES
from ..options import InductorOptions
from .backend import BuildStats, KernelSource
from .triton_kernel import generate_kernel
from .triton_runtime import build, interpreted

#: ATen ops the max-autotune wrapper calls through a tuned choice (ATen or a Triton template).
TEMPLATE_OPS = {"aten::mm": "_ember_mm", "aten::addmm": "_ember_addmm"}


class TritonBackend:
    """The ``Backend`` of CUDA tensors (and, on request, of CPU tensors, interpreted)."""

    name = "triton"
    suffix = "py"
    label = "Triton"
    dtypes = SUPPORTED_DTYPES | {torch.float16, torch.bfloat16}
    #: iteration-local values live in registers only in persistent reductions, so the
    #: scheduler keeps none: every such buffer is a graph buffer
    private_bytes = 0
    welford = True
    vector_calls_need_unit_stride = False
    #: kernels take element counts and size symbols as arguments (ADR 0050)
    symbolic_sizes = True

    def __init__(self, options: InductorOptions, device: torch.device) -> None:
        self.options = options
        self.device = device
        self.max_autotune = options.mode in ("max-autotune", "max-autotune-no-cudagraphs")

    def generate(self, plan: KernelPlan, dtypes: Mapping[str, torch.dtype]) -> KernelSource:
        k = generate_kernel(plan, dtypes, device_asserts=not interpreted(self.device))
        k.meta["arg_dtypes"] = [str(dtypes[a]).removeprefix("torch.") for a in k.args]
        return k

    def build(
        self, kernels: Mapping[str, KernelSource], stats: BuildStats
    ) -> dict[str, Callable[..., Any]]:
        assert self.options.cache_dir is not None
        return dict(
            build(
                kernels,
                self.options.cache_dir,
                self.device,
                max_autotune=self.max_autotune,
                autotune=self.options.triton.autotune,
                threads=self.options.compile_threads,
                stats=stats,
            )
        )

    def call(self, name: str, kernel: KernelSource) -> str:
        """``kernel3(buf0, buf1, s0*s1, 64, s1)``: the buffers, the element counts (expressions
        of the size symbols the wrapper bound for this call), the size arguments, and where
        int32 indexing holds only for some sizes, the largest index for these sizes."""
        args = [*kernel.args, *(str(n) for n in kernel.meta["numels"]), *kernel.sizes]
        if "index_bound" in kernel.meta:
            args.append(kernel.meta["index_bound"])
        return f"{name}({', '.join(args)})"

    def allocate(self, layout: Layout) -> str:
        from .pysize import pysizes

        device = "" if self.device.type == "cpu" else ", device=_device"
        return f"empty_strided({pysizes(layout.size)}, {pysizes(layout.stride)}, dtype={layout.dtype}{device})"

    def extern_name(self, op_name: str) -> str | None:
        return TEMPLATE_OPS.get(op_name) if self.max_autotune else None

    def namespace(self) -> dict[str, Any]:
        ns: dict[str, Any] = {"empty_strided": torch.empty_strided, "_device": self.device}
        if self.max_autotune:
            from .triton_template import MatmulChoice

            assert self.options.cache_dir is not None
            ns["_ember_mm"] = MatmulChoice("mm", self.options.cache_dir)
            ns["_ember_addmm"] = MatmulChoice("addmm", self.options.cache_dir)
        return ns
