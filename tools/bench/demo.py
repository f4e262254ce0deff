"""The README's first command: ember on a small model, next to eager and torch.compile.

:func:`run_demo` picks the model (2-layer GPT-2 when ``transformers`` is
installed, else the built-in GPT-style block), the best installed ember backend
(inductor, else aot_eager, else eager), and measures eager, that backend and
torch.compile's inductor with the benchmark's own machinery: one fresh process
per compiler, cold caches, eager timed beside each, outputs checked.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from bench.cli import QUICK_TIMING, probe
from bench.registry import WORKLOADS, load_builtins
from bench.report import add_speedups, align, machine_info, machine_line
from bench.runner import RunOptions, run_grid
from bench.worker import CellSpec

EMBER_PREFERENCE = ("ember-inductor", "ember-aot_eager", "ember-eager")


def choose(avail: dict[str, Any]) -> tuple[str, str | None]:
    """(workload, best available ember compiler or None) from a probe result."""
    workload = "gpt2_2layer" if not avail["workloads"].get("gpt2_2layer") else "gpt_block"
    for name in EMBER_PREFERENCE:
        if name in avail["compilers"] and not avail["compilers"][name]:
            return workload, name
    return workload, None


def demo_table(results: list[dict[str, Any]]) -> str:
    """Graphs, breaks, cold compile, time per call and speedup, one line per compiler."""
    rows = []
    for r in results:
        ok = r.get("status") == "ok"
        rows.append([
            r["compiler"],
            "-" if r.get("graphs") is None else str(r["graphs"]),
            "-" if r.get("breaks") is None else str(r["breaks"]),
            f"{r.get('compile_s', r['first_call_s']):.2f} s" if ok and r["compiler"] != "eager" else "-",
            f"{r['median_s'] * 1e3:.3f}" if ok else "-",
            f"{r['speedup']:.2f}x" if ok and r.get("speedup") else ("WRONG" if r.get("status") == "wrong" else "-"),
        ])
    header = ["compiler", "graphs", "breaks", "cold compile", "ms/call", "speedup vs eager"]
    return align(header, rows, ["<", ">", ">", ">", ">", ">"])


def run_demo(device: str = "cpu", out: TextIO = sys.stdout) -> bool:
    """Print the demo; True when an ember backend compiled the model and matched eager."""
    load_builtins()
    wanted = ["eager", *EMBER_PREFERENCE, "torch-inductor"]
    avail = probe(device, wanted, [])
    workload, ember = choose(avail)
    print(f"ember demo: {WORKLOADS[workload].description} on {device}", file=out)
    if ember is None:
        reasons = "; ".join(f"{c}: {avail['compilers'].get(c)}" for c in EMBER_PREFERENCE)
        print(f"no ember backend is usable here ({reasons})", file=out)
    else:
        print(f"compiling with {ember} (the best installed ember backend); "
              "each column runs in a fresh process with cold caches", file=out)
    compilers = ["eager", *([ember] if ember else []), "torch-inductor"]
    compilers = [c for c in compilers if not avail["compilers"].get(c)]
    opts = RunOptions(
        workloads=(workload,),
        compilers=tuple(compilers),
        device=device,
        timeout_s=600.0,
        warm_compile=False,
        cell=CellSpec(workload="", compiler="", timing=QUICK_TIMING),
    )
    results = run_grid(opts)
    add_speedups(results)
    print(file=out)
    print(demo_table(results), file=out)
    for r in results:
        if r.get("status") != "ok":
            print(f"{r['compiler']}: {r.get('status')}: {r.get('error', '')}", file=out)
        for reason in r.get("break_reasons", []):
            print(f"{r['compiler']} graph break: {reason}", file=out)
    print(f"\n{machine_line(machine_info(device))}", file=out)
    print("full suite: python tools/bench.py (--quick for a 1-minute subset)", file=out)
    return any(r["compiler"] == ember and r.get("status") == "ok" for r in results)


if __name__ == "__main__":
    sys.exit(0 if run_demo() else 1)
