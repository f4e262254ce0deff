"""Compile ember's Triton kernels for an NVIDIA sm_90 GPU without one (Triton's bundled ptxas).

Run as a script in a process without ``TRITON_INTERPRET`` (``test_triton.py`` does): it
generates the kernels of a few graphs as the Triton backend does for CUDA tensors, compiles
each to a cubin for sm_90 with the options its launcher passes, and prints one line per
kernel: ``<graph> <kernel> asserts=<bool> err_ptr=<bool> ptx_assert=<bool>``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import ember.inductor.codegen.triton as triton_backend
from ember.inductor import InductorOptions
from ember.inductor.codegen.triton_configs import candidate_configs
from ember.inductor.codegen.triton_runtime import Launcher
from ember.inductor.compile_fx import _generate

POINTER = {
    "float32": "*fp32", "float16": "*fp16", "bfloat16": "*bf16", "float64": "*fp64",
    "int64": "*i64", "int32": "*i32", "int16": "*i16", "int8": "*i8", "uint8": "*u8", "bool": "*i1",
}


def graphs() -> dict[str, tuple[Callable[..., Any], list[torch.Tensor]]]:
    table = torch.randn(100, 16)
    return {
        "embedding": (lambda i, w: [torch.nn.functional.embedding(i, w) * 2], [torch.randint(0, 100, (4, 9)), table]),
        "gather_sum": (lambda x, i: [x[i].sum(1)], [torch.randn(10, 8), torch.tensor([0, 3, 9])]),
        "softmax": (lambda x: [torch.softmax(x, -1)], [torch.randn(8, 33)]),
    }


def main() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    triton_backend.interpreted = lambda device: False  # generate as for a GPU
    opts = InductorOptions(cache_dir=tempfile.mkdtemp(), fallback_on_error=False, cpu_backend="triton")
    backend = triton_backend.TritonBackend(opts, torch.device("cpu"))
    folder = tempfile.mkdtemp()
    for gname, (fn, inputs) in graphs().items():
        art = _generate(make_fx(fn)(*inputs), inputs, opts, backend)
        for name, src in art.kernel_sources.items():
            meta = art.kernel_meta[name]
            path = os.path.join(folder, f"{gname}_{name}.py")
            with open(path, "w") as f:
                f.write(src)
            spec = importlib.util.spec_from_file_location(f"{gname}_{name}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            kernel = module.kernel
            config = candidate_configs(meta, torch.device("cuda"), max_autotune=False)[0]
            launch = Launcher(name, kernel, meta, [config], torch.device("cpu"), None)
            kwargs = launch.kwargs(config)
            dtypes = iter(meta["arg_dtypes"])
            signature: dict[str, str] = {}
            constexprs: dict[tuple[int, ...], Any] = {}
            for i, p in enumerate(kernel.arg_names):
                if p in kwargs:
                    signature[p] = "constexpr"
                    constexprs[(i,)] = kwargs[p]
                elif p.endswith("numel"):
                    signature[p] = "i32"
                elif p == "err_ptr":
                    signature[p] = "*i32"
                else:
                    signature[p] = POINTER[next(dtypes)]
            options = {k: v for k, v in kwargs.items() if k not in signature}
            compiled = triton.compile(
                ASTSource(kernel, signature, constexprs=constexprs),
                target=GPUTarget("cuda", 90, 32),
                options=options,
            )
            print(
                f"{gname} {name} asserts={bool(meta.get('asserts'))} err_ptr={'err_ptr' in src} "
                f"ptx_assert={'assertfail' in compiled.asm['ptx']}",
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())
