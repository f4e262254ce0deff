"""``python -m ember.inductor compile GRAPH [-o OUT_DIR]``: compile a saved ember.ir ATen graph.

Loads the graph (directory or file written by ``ember.ir.save``), makes random
example inputs from its placeholder metadata, compiles it, runs it once
against eager as a check, and prints kernels, extern calls, fallbacks and
timings. With ``-o`` it writes the wrapper and kernel sources there.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

from .compile_fx import CompiledGraph, compile_graph
from .options import InductorOptions


def _example(meta: Any, name: str) -> torch.Tensor:
    shape = getattr(meta, "shape", None)
    if shape is None or not all(isinstance(s, int) for s in shape):
        raise SystemExit(
            f"error: input {name!r} has no static shape in the graph's metadata; cannot make an example"
        )
    dtype = meta.dtype
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=dtype)
    return torch.randint(0, 8, shape, dtype=dtype)


def compile_saved(path: str, out_dir: str | None, options: InductorOptions) -> int:
    import ember.ir as eir

    ir = eir.load(path)
    gm = eir.to_fx(ir)
    inputs = [
        _example(n.meta.get("ember_meta"), n.name) for n in gm.graph.nodes if n.op == "placeholder"
    ]
    start = time.perf_counter()
    compiled = compile_graph(gm, inputs, options)
    seconds = time.perf_counter() - start
    report = compiled.report
    if not isinstance(compiled, CompiledGraph):
        print(f"not compiled, runs eagerly: {report.eager_reason}")
        return 1
    got, want = compiled(*inputs), gm(*inputs)
    ok = all(
        torch.allclose(g, w, atol=1e-4, rtol=1e-4, equal_nan=True)
        for g, w in zip(_flat(got), _flat(want))
        if isinstance(g, torch.Tensor)
    )
    print(
        f"compiled {path} in {seconds:.2f}s: {report.kernels} kernels, {report.extern_calls} extern calls, "
        f"{report.compiled} translation units built, {report.cached} from cache"
    )
    for op, n in sorted(report.fallbacks.items()):
        print(f"  fallback to ATen: {op} x{n}")
    print(f"  matches eager on random inputs: {'yes' if ok else 'NO'}")
    for label, fn in (("compiled", compiled), ("eager", gm)):
        fn(*inputs)
        t = time.perf_counter()
        for _ in range(10):
            fn(*inputs)
        print(f"  {label}: {(time.perf_counter() - t) / 10 * 1e3:.3f} ms per call")
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "output_code.py").write_text(report.wrapper_source)
        for name, src in report.kernel_sources.items():
            (out / f"{name}.{report.kernel_suffix}").write_text(src)
        print(f"  wrote wrapper and {len(report.kernel_sources)} kernels to {out}")
    return 0 if ok else 2


def _flat(x: Any) -> list[Any]:
    from torch.utils._pytree import tree_flatten

    return list(tree_flatten(x)[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ember.inductor")
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser(
        "compile", help="compile a saved ember.ir ATen graph and report kernels and timing"
    )
    c.add_argument("graph", help="directory or file written by ember.ir.save")
    c.add_argument("-o", "--out", help="write the generated wrapper and kernels here")
    c.add_argument(
        "--cache-dir", help="kernel cache directory (default: $EMBER_CACHE_DIR or ~/.cache/ember)"
    )
    args = parser.parse_args(argv)
    return compile_saved(args.graph, args.out, InductorOptions(cache_dir=args.cache_dir))


if __name__ == "__main__":
    sys.exit(main())
