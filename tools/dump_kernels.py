"""Write every wrapper and kernel ember.inductor generates for the benchmark workloads.

    .venv/bin/python tools/dump_kernels.py OUT_DIR [WORKLOAD ...] [--options 'k=v,...'] [--check]

Compiles each workload of ``tools/bench`` (all of them by default, the HF ones
when ``transformers`` is installed) with ``ember.dynamo`` + the ``inductor``
backend on CPU, runs one step (a training step compiles the backward too), and
writes each compiled graph's wrapper and kernel sources under
``OUT_DIR/<workload>/<sha of the wrapper>/``. A fresh cache directory is used and
the graph cache is off, so everything is generated again. Comparing two dumps
(``diff -r before after``) shows whether a change to the compiler changed the
code it generates; this is how refactors show their kernels are byte-identical.
``--check`` also compares the compiled step with eager (within the workload's
tolerances; workloads with random ops are not compared), e.g. with
``--options 'cpu_backend="triton"'`` under ``TRITON_INTERPRET=1``.

One choice is made by timing: a graph of mostly full convolutions runs channels-last
when ATen runs them faster so on this machine (``conv_layout.py``), so its kernels can
differ between two runs of the same commit. ``--untimed`` makes it NCHW for every graph,
for comparing dumps. ``--no-aotgrad`` dumps the inference path ember.inductor takes
without ember.aotgrad (``aten_trace.py``; training workloads are skipped).
``tools/diff_kernels.sh`` dumps two commits this way and diffs them.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from bench import workloads as _builtin  # noqa: F401  (registers the workloads)
from bench.registry import WORKLOADS

import ember.dynamo
import ember.inductor


def _parse_options(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in filter(None, text.split(",")):
        key, value = part.split("=", 1)
        out[key.strip()] = eval(value, {})  # a developer's own command line
    return out


def _step(case: Any, fn: Any) -> list[torch.Tensor]:
    if getattr(case, "silence_stdout", False):
        with contextlib.redirect_stdout(io.StringIO()):
            return list(case.step(fn, case.inputs[0]))
    return list(case.step(fn, case.inputs[0]))


def dump(name: str, out: Path, cache: Path, extra: dict[str, Any], check: bool = False) -> int:
    """Compile and run workload ``name``; returns how many graphs were written."""
    work = Path(tempfile.mkdtemp(dir=out))
    opts = replace(
        ember.inductor.InductorOptions(
            cache_dir=str(cache), debug_dir=str(work), graph_cache=False, fallback_on_error=False
        ),
        **extra,
    )
    workload = WORKLOADS[name]
    case = workload.build("cpu")
    ember.dynamo.reset()
    compiled = ember.dynamo.compile(case.model, backend=ember.inductor.make_backend(opts))
    got = _step(case, compiled)
    if check and not workload.random:
        want = _step(case, case.model)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=workload.atol, rtol=workload.rtol)
    dest = out / name
    dest.mkdir(parents=True, exist_ok=True)
    count = 0
    for graph in sorted(work.iterdir()):
        wrapper = graph / "output_code.py"
        if not wrapper.exists():
            continue
        digest = hashlib.sha256(wrapper.read_bytes()).hexdigest()[:16]
        target = dest / digest
        if target.exists():
            shutil.rmtree(target)
        shutil.move(str(graph), str(target))
        count += 1
    shutil.rmtree(work, ignore_errors=True)
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="directory to write the dump into (created)")
    parser.add_argument("workloads", nargs="*", help="workload names (default: all)")
    parser.add_argument("--options", default="", help="InductorOptions overrides, 'field=python_value,...'")
    parser.add_argument("--check", action="store_true", help="compare each compiled step with eager")
    parser.add_argument("--untimed", action="store_true", help="no timed layout choice (NCHW convolutions)")
    parser.add_argument("--no-aotgrad", action="store_true", help="as if ember.aotgrad were not installed")
    args = parser.parse_args()
    if args.untimed:
        from ember.inductor import conv_layout

        conv_layout._measured_faster = lambda *_: False  # a developer's own dump
    if args.no_aotgrad:
        sys.modules["ember.aotgrad"] = None  # type: ignore[assignment]
    with contextlib.suppress(ImportError):
        from bench import workloads_hf as _hf  # noqa: F401
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="ember-dump-cache-"))
    torch.set_num_threads(2)
    names = args.workloads or sorted(WORKLOADS)
    try:
        for name in names:
            if args.no_aotgrad and WORKLOADS[name].training:
                print(f"{name:<20} skipped: training needs ember.aotgrad")
                continue
            try:
                n = dump(name, out, cache, _parse_options(args.options), args.check)
            except ImportError as e:  # an HF workload without transformers
                print(f"{name:<20} skipped: {e}")
                continue
            print(f"{name:<20} {n} graphs" + (" (matches eager)" if args.check and not WORKLOADS[name].random else ""))
    finally:
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
