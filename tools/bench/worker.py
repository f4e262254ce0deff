"""One cell (workload x compiler) measured in its own process.

Run as ``python -m bench.worker SPEC.json OUT.json`` by the runner, in a fresh
process with fresh cache directories, so nothing one compiler did can help or
hurt another and the first call is a truly cold compile. :func:`run_cell` is
the same thing in-process (the tests use it). Every failure becomes a status
and the first line of the error; only a hard crash (segfault, kill) leaves no
result file, and the runner records that.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from bench.measure import (
    TimingOptions,
    compare,
    peak_bytes,
    saved_bytes,
    synchronizer,
    time_calls,
)
from bench.registry import (
    COMPILERS,
    WORKLOADS,
    Case,
    Compiler,
    CompileStats,
    Workload,
    load_builtins,
    load_plugins,
)


@dataclass(frozen=True)
class CellSpec:
    """Everything a worker needs; plain data so it crosses the process boundary as JSON."""

    workload: str
    compiler: str
    device: str = "cpu"
    phase: str = "cold"  # "cold": full measurement; "warm": first call only, caches kept
    plugins: tuple[str, ...] = ()
    timing: TimingOptions = field(default_factory=TimingOptions)
    amortize: bool = True

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> CellSpec:
        data = json.loads(text)
        data["plugins"] = tuple(data.get("plugins", ()))
        data["timing"] = TimingOptions(**data.get("timing", {}))
        return CellSpec(**data)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def run_cell(spec: CellSpec) -> dict[str, Any]:
    """Measure one cell; never raises (failures are a status in the result)."""
    result: dict[str, Any] = {
        "workload": spec.workload,
        "compiler": spec.compiler,
        "device": spec.device,
        "phase": spec.phase,
        "status": "ok",
        "torch_threads": torch.get_num_threads(),
    }
    try:
        load_builtins()
        load_plugins(spec.plugins)
    except Exception as exc:
        return {**result, "status": "error", "error": first_line(exc), "error_phase": "load"}
    workload = WORKLOADS.get(spec.workload)
    compiler = COMPILERS.get(spec.compiler)
    if workload is None or compiler is None:
        what = "workload" if workload is None else "compiler"
        return {**result, "status": "error", "error": f"unknown {what}", "error_phase": "load"}
    reason = unavailable_reason(workload, compiler, spec.device)
    if reason:
        return {**result, "status": "unavailable", "error": reason}
    stage = ["build"]
    try:
        _measure(spec, workload, compiler, result, stage)
    except Exception as exc:
        result.update(status="error", error=first_line(exc), error_phase=stage[0])
        result["traceback"] = traceback.format_exc(limit=-8)
    return result


def unavailable_reason(workload: Workload, compiler: Compiler, device: str) -> str | None:
    """Why this cell cannot run here (missing module, compiler or device), or None."""
    for module in workload.requires:
        if importlib.util.find_spec(module) is None:
            return f"needs {module} (pip install {module})"
    if device.startswith("cuda") and not torch.cuda.is_available():
        return "no CUDA device"
    try:
        return compiler.available()
    except Exception as exc:
        return f"availability check failed: {first_line(exc)}"


@contextlib.contextmanager
def _silenced(case: Case) -> Iterator[None]:
    """Swallow the workload's own prints (the graph-break model prints every call)."""
    if not case.silence_stdout:
        yield
        return
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        yield


def _measure(
    spec: CellSpec, workload: Workload, compiler: Compiler, result: dict[str, Any], stage: list[str]
) -> None:
    sync = synchronizer(spec.device)
    compiler.reset()
    case = workload.build(spec.device)
    inputs = case.inputs
    module = case.model if isinstance(case.model, torch.nn.Module) else None
    # Random workloads (dropout) are checked in train mode only where the compiler
    # draws eager's random numbers; elsewhere in eval mode (no randomness).
    eval_check = workload.random and not compiler.rng_matches_eager and module is not None
    result["check"] = "eval mode (compiler's RNG differs from eager)" if eval_check else "as run"

    def seeded_step(fn: Any, args: tuple[Any, ...]) -> list[torch.Tensor]:
        torch.manual_seed(1234)
        out = case.step(fn, args)
        return [t.detach().clone() for t in out]

    def in_eval(fn: Any) -> list[torch.Tensor]:
        assert module is not None
        module.eval()
        try:
            return seeded_step(fn, inputs[0])
        finally:
            module.train()

    with _silenced(case):
        stage[0] = "eager reference"
        ref = in_eval(case.model) if eval_check else seeded_step(case.model, inputs[0])
        stage[0] = "compile"
        stats = CompileStats()
        # The compiler call itself is timed too: torch.compile imports all of
        # TorchDynamo there; ember.dynamo is imported there too (the worker checks it is
        # installed without importing it), then its compile only wraps the model.
        t0, c0 = time.perf_counter(), time.process_time()
        fn = compiler.prepare(case.model, workload.options, stats)
        result["prepare_s"] = time.perf_counter() - t0
        sync()
        t0 = time.perf_counter()
        got = seeded_step(fn, inputs[0])
        sync()
        result["first_call_s"] = time.perf_counter() - t0
        result["compile_s"] = result["prepare_s"] + result["first_call_s"]
        # this process's CPU seconds for the same span (compiler subprocesses not
        # included): on a shared machine, what the wall figure would be without the load
        result["compile_cpu_s"] = time.process_time() - c0
        result["graphs"] = stats.graphs if stats.counted else None
        graphs_first = stats.graphs
        if compiler.name.startswith("ember-"):
            result["ember_compile_times"] = _ember_compile_times()
        if spec.phase == "warm":
            return
        stage[0] = "accuracy check"
        if eval_check:
            before = stats.graphs
            got_train, got = got, in_eval(fn)
            check_graphs = stats.graphs - before
        else:
            check_graphs = 0
        acc = compare(ref, got, workload.rtol, workload.atol)
        result["max_abs_err"] = acc.max_abs_err
        if not acc.ok:
            result.update(status="wrong", error=f"WRONG: {acc.reason}")
            return
        if eval_check and compare(ref, got_train, workload.rtol, workload.atol).ok:
            # Train mode gave the eval-mode (no dropout) result: randomness was dropped.
            result.update(status="wrong", error="WRONG: dropout had no effect in train mode")
            return
        stage[0] = "later inputs"
        if workload.amortize_steps and spec.amortize:
            # Mean step time from cold over N steps: what a short training run costs.
            n = workload.amortize_steps
            total = result["first_call_s"]
            t0 = time.perf_counter()
            for i in range(1, n):
                case.step(fn, inputs[i % len(inputs)])
            sync()
            total += time.perf_counter() - t0
            result["amortized_steps"] = n
            result["amortized_step_s"] = total / n
        else:
            for args in inputs[1:]:
                t0 = time.perf_counter()
                case.step(fn, args)
                sync()
                result.setdefault("later_first_calls_s", []).append(time.perf_counter() - t0)
        stage[0] = "timing"
        if compiler.name.startswith("ember-"):
            _native_runner_built()
        calls = {"compiled": lambda i: case.step(fn, inputs[i % len(inputs)])}
        if not compiler.is_baseline:  # eager timed in the same process, blocks interleaved
            calls["eager"] = lambda i: case.step(case.model, inputs[i % len(inputs)])
        timings = time_calls(calls, sync, spec.timing)
        result.update(timings["compiled"].as_dict())
        if "eager" in timings:
            result["eager_here"] = timings["eager"].as_dict()
        result["recompiles"] = stats.graphs - graphs_first - check_graphs if stats.counted else None
        stage[0] = "final accuracy check"
        if not eval_check:
            acc = compare(ref, seeded_step(fn, inputs[0]), workload.rtol, workload.atol)
            result["max_abs_err"] = max(result["max_abs_err"], acc.max_abs_err)
            if not acc.ok:
                result.update(status="wrong", error=f"WRONG after warm-up: {acc.reason}")
                return
        stage[0] = "peak memory"
        # one more step, its allocations counted (measure.peak_bytes): what a call adds at
        # its peak over the weights and inputs; the column "peak MB"
        result["peak_bytes"] = peak_bytes(lambda: case.step(fn, inputs[0]), spec.device, sync)
        if workload.training:
            stage[0] = "saved bytes"
            result["saved_bytes"] = saved_bytes(lambda: case.step(fn, inputs[0]), case.params)
        stage[0] = "break count"
        _break_stats(compiler, case, stats, result)


def _native_runner_built() -> None:
    """Wait for ember.inductor's native graph runner (ADR 0068), which a process with a cold
    cache builds in a thread while its graphs run their Python wrappers: the timing
    measures the steady state (graphs switch to the runner on their next call)."""
    try:
        from ember.inductor import native_runner
    except ImportError:
        return
    native_runner.runner_module(wait=True)


def _ember_compile_times() -> dict[str, float] | None:
    """Seconds per ember.dynamo compile phase so far (where a cold compile's time went)."""
    try:
        import ember.dynamo

        times = ember.dynamo.compile_times(repr="dict")
        return {str(k): float(sum(v)) for k, v in times.items()}
    except Exception:  # an older or unfinished ember.dynamo: the figure is optional
        return None


def _break_stats(compiler: Compiler, case: Case, stats: CompileStats, result: dict[str, Any]) -> None:
    from bench import compilers

    try:
        if compiler.name.startswith("torch-"):
            compilers.torch_break_stats(stats)
        elif compiler.name.startswith("ember-"):
            compilers.ember_break_stats(case.model, case.inputs[0], stats, case.kwargs)
    except Exception as exc:
        result["breaks_error"] = first_line(exc)
    result["breaks"] = stats.breaks
    if stats.break_reasons:
        result["break_reasons"] = stats.break_reasons[:5]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m bench.worker SPEC.json OUT.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        spec = CellSpec.from_json(f.read())
    from bench import compilers

    compilers.LOOKUP_ONLY = True  # no compiler imported before its measured span
    result = run_cell(spec)
    with open(argv[1], "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
