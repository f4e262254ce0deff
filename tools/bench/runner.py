"""Runs the grid: every (workload, compiler) cell in its own fresh process.

Each cell gets new, empty cache directories (ember's, Inductor's, Triton's), so
its first call is a cold compile. Compilers with an on-disk cache then get a
second process over the same directories: the warm compile time a user sees
on the next run of their program. A cell that crashes, hangs past the timeout
or writes no result is recorded as such and the run goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from bench.worker import CellSpec

TOOLS_DIR = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class RunOptions:
    """The whole run: which cells, on what device, how long each may take."""

    workloads: tuple[str, ...]
    compilers: tuple[str, ...]
    device: str = "cpu"
    timeout_s: float = 600.0
    warm_compile: bool = True
    plugins: tuple[str, ...] = ()
    cell: CellSpec | None = None  # template for the timing options
    threads: int | None = None  # OMP_NUM_THREADS for the workers (None: torch's default)


def cache_env(cache_root: Path) -> dict[str, str]:
    """Environment pointing every compiler cache at ``cache_root``."""
    return {
        "EMBER_CACHE_DIR": str(cache_root / "ember"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache_root / "inductor"),
        "TRITON_CACHE_DIR": str(cache_root / "triton"),
    }


def run_worker(
    spec: CellSpec, cache_root: Path, timeout_s: float, threads: int | None = None
) -> dict[str, Any]:
    """Run one cell in a fresh ``python -m bench.worker`` process; always returns a result."""
    base = {"workload": spec.workload, "compiler": spec.compiler, "phase": spec.phase}
    with tempfile.TemporaryDirectory(prefix="ember-bench-cell-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_path.write_text(spec.to_json())
        env = dict(os.environ)
        env.update(cache_env(cache_root))
        # Python's own bytecode cache is one of the caches a warm start finds populated: an
        # installed package has its .pyc files (pip writes them), and torch's are in
        # site-packages already. With PYTHONDONTWRITEBYTECODE every process compiles
        # ember's editable sources again (~0.3 s of a warm start), which no user pays.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        if threads is not None:  # torch's intra-op pool and generated OpenMP kernels alike
            env["OMP_NUM_THREADS"] = str(threads)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(TOOLS_DIR), *filter(None, [env.get("PYTHONPATH")])]
        )
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.worker", str(spec_path), str(out_path)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: a timeout kills compile workers too
        )
        try:
            _, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            return {**base, "status": "timeout", "error": f"timed out after {timeout_s:.0f} s"}
        wall = time.perf_counter() - t0
        if out_path.is_file():
            try:
                result: dict[str, Any] = json.loads(out_path.read_text())
            except json.JSONDecodeError as exc:
                return {**base, "status": "crash", "error": f"unreadable result: {exc}"}
            result["cell_wall_s"] = wall
            return result
        tail = [line for line in (stderr or "").strip().splitlines() if line.strip()]
        last = tail[-1].strip() if tail else ""
        return {
            **base,
            "status": "crash",
            "error": f"worker exited with code {proc.returncode}" + (f": {last}" if last else ""),
            "cell_wall_s": wall,
        }


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


class Progress:
    """One line per cell; on a terminal the current line ticks with elapsed seconds."""

    def __init__(self, total: int, stream: TextIO = sys.stderr) -> None:
        self.total = total
        self.done = 0
        self.stream = stream
        self.tty = stream.isatty()
        self._stop = threading.Event()
        self._label = ""
        self._start = 0.0
        self._thread: threading.Thread | None = None

    def start(self, label: str) -> None:
        self._label = f"[{self.done + 1:>3}/{self.total}] {label}"
        self._start = time.perf_counter()
        if self.tty:
            self._stop.clear()
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            elapsed = time.perf_counter() - self._start
            self.stream.write(f"\r{self._label} ... {elapsed:5.0f}s")
            self.stream.flush()

    def finish(self, outcome: str) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self.done += 1
        elapsed = time.perf_counter() - self._start
        prefix = "\r" if self.tty else ""
        self.stream.write(f"{prefix}{self._label} ... {elapsed:5.1f}s  {outcome}\n")
        self.stream.flush()


def describe(result: dict[str, Any]) -> str:
    """A short outcome for the progress line."""
    status = result.get("status", "?")
    if status == "ok":
        median = result.get("median_s")
        if not isinstance(median, float):
            return "ok"
        text = f"ok  {median * 1e3:.3f} ms/call"
        eager = (result.get("eager_here") or {}).get("median_s")
        if isinstance(eager, float) and median > 0:
            text += f"  ({eager / median:.2f}x eager beside it)"
        cold = result.get("compile_s", result.get("first_call_s"))
        return text + (f"  cold {cold:.1f} s" if isinstance(cold, float) else "")
    return f"{status}: {result.get('error', '')}"[:120]


def run_grid(
    opts: RunOptions,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    progress_stream: TextIO = sys.stderr,
) -> list[dict[str, Any]]:
    """Run every cell in turn; results in grid order, warm-compile figures merged in."""
    template = opts.cell or CellSpec(workload="", compiler="")
    cells = [(w, c) for w in opts.workloads for c in opts.compilers]
    progress = Progress(len(cells), progress_stream)
    results: list[dict[str, Any]] = []
    for workload, compiler in cells:
        spec = replace(
            template,
            workload=workload,
            compiler=compiler,
            device=opts.device,
            plugins=opts.plugins,
            phase="cold",
        )
        cache_root = Path(tempfile.mkdtemp(prefix="ember-bench-cache-"))
        try:
            progress.start(f"{workload} x {compiler}")
            result = run_worker(spec, cache_root, opts.timeout_s, opts.threads)
            if opts.warm_compile and result.get("status") == "ok" and _has_disk_cache(compiler, opts.plugins):
                warm = run_worker(replace(spec, phase="warm"), cache_root, opts.timeout_s, opts.threads)
                if warm.get("status") == "ok":
                    result["warm_first_call_s"] = warm.get("first_call_s")
                    result["warm_compile_s"] = warm.get("compile_s", warm.get("first_call_s"))
                    result["warm_compile_cpu_s"] = warm.get("compile_cpu_s")
                else:
                    result["warm_error"] = warm.get("error")
            progress.finish(describe(result))
        finally:
            shutil.rmtree(cache_root, ignore_errors=True)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def _has_disk_cache(compiler: str, plugins: Sequence[str]) -> bool:
    from bench.registry import COMPILERS, load_builtins, load_plugins

    load_builtins()
    load_plugins(plugins)
    c = COMPILERS.get(compiler)
    return bool(c and c.disk_cache)
