"""Compile ember's Triton kernels for an NVIDIA sm_90 GPU without one (Triton's bundled ptxas).

Run as a script in a process without ``TRITON_INTERPRET`` (``test_triton.py`` does): it
generates the kernels of a few graphs as the Triton backend does for CUDA tensors, compiles
each to a cubin for sm_90 with the options its launcher passes, and prints one line per
kernel: ``<graph> <kernel> asserts=<bool> err_ptr=<bool> ptx_assert=<bool>``.
``--opinfo float32,float16`` does the same for the OpInfo sweep's ops at those dtypes
(the interpreter is more lenient than Triton's compiler: it found ``1.0.to(tl.float16)``).
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


def compile_for_sm90(art: Any, folder: str, prefix: str) -> list[tuple[str, dict[str, Any], str, Any]]:
    """Compile every kernel of a ``GraphArtifact`` for sm_90 as its launcher would launch it:
    ``(name, meta, source, compiled)`` per kernel; a kernel that does not compile raises."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    out = []
    for name, src in art.kernel_sources.items():
        meta = art.kernel_meta[name]
        path = os.path.join(folder, f"{prefix}_{name}.py")
        with open(path, "w") as f:
            f.write(src)
        spec = importlib.util.spec_from_file_location(f"{prefix}_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        kernel = module.kernel
        config = candidate_configs(meta, torch.device("cuda"), max_autotune=False)[0]
        kwargs = Launcher(name, kernel, meta, [config], torch.device("cpu"), None).kwargs(config)
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
        out.append((name, meta, src, compiled))
    return out


def gpu_backend(cache_dir: str) -> tuple[InductorOptions, Any]:
    """Options and a Triton backend that generate kernels as for CUDA tensors."""
    triton_backend.interpreted = lambda device: False  # type: ignore[assignment]
    opts = InductorOptions(cache_dir=cache_dir, fallback_on_error=False, cpu_backend="triton")
    return opts, triton_backend.TritonBackend(opts, torch.device("cpu"))


def opinfo(dtype_names: str) -> int:
    """Compile the kernels of every OpInfo elementwise/reduction op (the Triton sweep's ops)
    at these dtypes; print each failure and a summary; the number of failures."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from opinfo_graphs import graph_fn
    from test_opinfo import TRITON_OPS, _variant_name

    dtypes = [getattr(torch, d) for d in dtype_names.split(",")]
    opts, backend = gpu_backend(tempfile.mkdtemp())
    folder = tempfile.mkdtemp()
    counts = {"compiled": 0, "failed": 0, "not generated": 0}
    for op in TRITON_OPS:
        for dtype in dtypes:
            if dtype not in op.supported_dtypes("cpu"):
                continue
            name = f"{_variant_name(op)} {str(dtype).removeprefix('torch.')}"
            try:
                samples = [s for _, s in zip(range(2), op.sample_inputs("cpu", dtype, requires_grad=False))]
                fn, tensors = graph_fn(op, samples)
                art = _generate(make_fx(fn)(*tensors), tensors, opts, backend)
            except Exception:  # no samples, does not trace, not lowered: the sweep's business
                counts["not generated"] += 1
                continue
            try:
                compile_for_sm90(art, folder, name.replace(".", "_").replace(" ", "_"))
                counts["compiled"] += 1
            except Exception as e:
                counts["failed"] += 1
                first = str(e).strip().splitlines()
                print(f"FAIL {name}: {type(e).__name__}: {' | '.join(first[-3:])[:400]}", flush=True)
    print(", ".join(f"{k} {v}" for k, v in counts.items()), flush=True)
    return counts["failed"]


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--opinfo":
        return 1 if opinfo(sys.argv[2]) else 0
    opts, backend = gpu_backend(tempfile.mkdtemp())
    folder = tempfile.mkdtemp()
    for gname, (fn, inputs) in graphs().items():
        art = _generate(make_fx(fn)(*inputs), inputs, opts, backend)
        for name, meta, src, compiled in compile_for_sm90(art, folder, gname):
            print(
                f"{gname} {name} asserts={bool(meta.get('asserts'))} err_ptr={'err_ptr' in src} "
                f"ptx_assert={'assertfail' in compiled.asm['ptx']}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
