"""``python tools/bench.py``: ember vs torch.compile vs eager, side by side.

    python tools/bench.py --quick                       # ~1 min: a few workloads, short timing
    python tools/bench.py                               # the whole suite
    python tools/bench.py --workloads mlp_train,tiny_add --compilers eager,ember-inductor,torch-inductor
    python tools/bench.py --json out.json --plot out.png --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.measure import TimingOptions
from bench.registry import COMPILERS, WORKLOADS, load_builtins, load_plugins
from bench.report import (
    add_speedups,
    long_table,
    machine_info,
    machine_line,
    peak_matrix,
    speedup_matrix,
    to_json,
)
from bench.runner import TOOLS_DIR, RunOptions, run_grid
from bench.worker import CellSpec

DEFAULT_COMPILERS = (
    "eager", "ember-eager", "ember-aot_eager", "ember-inductor",
    "torch-eager", "torch-aot_eager", "torch-inductor",
)
QUICK_TIMING = TimingOptions(warmup=2, repeats=5, min_block_s=0.01)
FULL_TIMING = TimingOptions(warmup=3, repeats=11, min_block_s=0.04)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python tools/bench.py",
        description="Benchmark ember's compilers against torch.compile and eager PyTorch. "
        "Each (workload, compiler) cell runs in a fresh process with fresh caches.",
    )
    p.add_argument("--workloads", help="comma-separated workload names (default: all; --quick: the quick set; zoo: the transformers zoo; vision: the vision zoo)")
    p.add_argument("--compilers", help="comma-separated compiler names (default: all; eager is always added)")
    p.add_argument("--json", type=Path, help="write every raw figure and machine info here")
    p.add_argument("--plot", type=Path, help="write a speedup bar chart (PNG) here")
    p.add_argument("--quick", action="store_true", help="fewer workloads and repeats, no warm-compile runs (~1 min)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where to run (default cpu)")
    p.add_argument("--timeout", type=float, default=None, help="seconds per cell (default 600; --quick 180)")
    p.add_argument("--no-warm", action="store_true", help="skip the warm-compile (second process) runs")
    p.add_argument("--threads", type=int, help="OMP_NUM_THREADS for every cell (default: torch's default)")
    p.add_argument("--repeats", type=int, help="timed blocks per cell (default 11; --quick 5)")
    p.add_argument("--plugin", action="append", default=[], metavar="FILE",
                   help="Python file registering extra workloads/compilers (repeatable)")
    p.add_argument("--list", action="store_true", help="list workloads and compilers, then exit")
    p.add_argument("--from-json", type=Path, metavar="FILE",
                   help="print the tables (and --plot) of a saved run instead of running")
    return p.parse_args(argv)


def _names(text: str | None, known: dict[str, Any], what: str) -> list[str] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    for group, prefix in (("zoo", "zoo_"), ("vision", "vision_")):
        if what == "workload" and group in names:  # a whole zoo: transformers, vision
            i = names.index(group)
            names[i : i + 1] = [n for n in known if n.startswith(prefix)]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown {what} {', '.join(unknown)}; known: {', '.join(known)}")
    return names


def probe(device: str, compilers: list[str], plugins: list[str]) -> dict[str, Any]:
    """Availability of every compiler and workload, asked of a child process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TOOLS_DIR), *filter(None, [env.get("PYTHONPATH")])])
    out = subprocess.run(
        [sys.executable, "-m", "bench.probe", device, ",".join(compilers), *plugins],
        env=env, capture_output=True, text=True, timeout=300,
    )
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        # Cannot tell what works: let every cell try (each fails or not on its own).
        print(f"[bench] availability probe failed ({last}); trying every cell", file=sys.stderr)
        return {"compilers": {}, "workloads": {}}
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    load_builtins()
    load_plugins(args.plugin)
    if args.list:
        for w in WORKLOADS.values():
            tag = "quick " if w.quick and w.suite else "      " if w.suite else "extra "
            print(f"workload  {w.name:<22} {tag}{w.description}")
        for c in COMPILERS.values():
            print(f"compiler  {c.name:<22} {c.description}")
        return 0
    if args.from_json:
        return show_saved(args.from_json, args.plot)
    workloads = _names(args.workloads, WORKLOADS, "workload") or [
        w.name for w in WORKLOADS.values() if w.suite and (w.quick or not args.quick)
    ]
    compilers = _names(args.compilers, COMPILERS, "compiler") or list(DEFAULT_COMPILERS)
    if "eager" not in compilers:
        compilers.insert(0, "eager")  # every speedup needs the baseline
    timing = QUICK_TIMING if args.quick else FULL_TIMING
    if args.repeats:
        timing = TimingOptions(timing.warmup, args.repeats, timing.min_block_s)
    command = "python tools/bench.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    info = machine_info(args.device)
    if args.threads:
        info["torch_threads"] = args.threads  # what the cells run with
    print(f"[bench] {machine_line(info)}", file=sys.stderr)

    avail = probe(args.device, compilers, args.plugin)
    skipped: dict[tuple[str, str], str] = {}
    for wname in workloads:
        for cname in compilers:
            reason = avail["workloads"].get(wname) or avail["compilers"].get(cname)
            if reason:
                skipped[(wname, cname)] = reason
    for cname in compilers:
        if avail["compilers"].get(cname):
            print(f"[bench] {cname}: unavailable ({avail['compilers'][cname]})", file=sys.stderr)
    for wname in workloads:
        if avail["workloads"].get(wname):
            print(f"[bench] {wname}: unavailable ({avail['workloads'][wname]})", file=sys.stderr)

    run_w = [w for w in workloads if not avail["workloads"].get(w)]
    run_c = [c for c in compilers if not avail["compilers"].get(c)]
    opts = RunOptions(
        workloads=tuple(run_w),
        compilers=tuple(run_c),
        device=args.device,
        timeout_s=args.timeout or (180.0 if args.quick else 600.0),
        warm_compile=not (args.quick or args.no_warm),
        plugins=tuple(args.plugin),
        threads=args.threads,
        cell=CellSpec(workload="", compiler="", timing=timing),
    )
    done: list[dict[str, Any]] = []

    def assemble() -> list[dict[str, Any]]:
        by = {(r["workload"], r["compiler"]): r for r in done}
        out = []
        for w in workloads:
            for c in compilers:
                if (w, c) in skipped:
                    out.append({"workload": w, "compiler": c, "status": "unavailable", "error": skipped[(w, c)]})
                elif (w, c) in by:
                    out.append(by[(w, c)])
        add_speedups(out)
        return out

    def save(result: dict[str, Any]) -> None:
        done.append(result)
        if args.json:  # rewritten after every cell: an interrupted run keeps what it measured
            args.json.write_text(to_json(assemble(), info, command))

    started = time.perf_counter()
    run_grid(opts, on_result=save)
    info["run_wall_s"] = round(time.perf_counter() - started, 1)
    results = assemble()
    info["loadavg_end"] = machine_info(args.device).get("loadavg_1_5_15")
    if args.json:
        args.json.write_text(to_json(results, info, command))
        print(f"[bench] wrote {args.json}", file=sys.stderr)
    show(results, info, command, args.plot)
    return 0


def show(results: list[dict[str, Any]], info: dict[str, Any], command: str, plot: Path | None) -> None:
    """The long table, the speedup matrix, where and how it ran; the chart if asked."""
    print()
    print(long_table(results))
    print()
    print(speedup_matrix(results))
    print()
    if any(r.get("peak_bytes") is not None for r in results):
        print(peak_matrix(results))
        print()
    wall = info.get("run_wall_s")
    print(f"{machine_line(info)}\ncommand: {command}" + (f"  ({wall:.0f} s)" if wall else ""))
    if plot:
        from bench.plot import plot_speedups

        plot_speedups(results, plot, title=f"{command}\n{machine_line(info)}")
        print(f"[bench] wrote {plot}", file=sys.stderr)


def show_saved(path: Path, plot: Path | None) -> int:
    """Re-print a saved run (also one interrupted half-way: the JSON is kept per cell)."""
    data = json.loads(path.read_text())
    if data.get("format") != "ember.bench" or data.get("version", [0])[0] != 1:
        raise SystemExit(f"{path} is not an ember.bench version 1 JSON file")
    results = data["results"]
    add_speedups(results)  # recomputed from the raw figures
    show(results, data["machine"], data["command"], plot)
    return 0
