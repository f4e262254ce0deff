"""Eager, ember and torch.compile on one model, in one process, timed interleaved.

    .venv-vision/bin/python tools/bench_interleaved.py tv_efficientnet tv_squeezenet ...
        [--no-torch] [--calls 10] [--rounds 7] [--json out.json]

Each name is a case of the vision zoo (``integration_tests/models/vision_zoo.py``; needs the
vision environment, ``tools/setup_vision.sh``) or of the transformers zoo
(``integration_tests/models/zoo.py``). Inference under ``no_grad``, one torch thread. The
three callables are built in the same process, warmed up, then timed in rounds: each round
runs ``--calls`` calls of each in turn, and a cell is the best round's mean per call, in
the calling thread's CPU time, so a load that comes and goes on a shared machine moves all
three alike (``tools/bench.py``'s "beside" column measures the same way per cell process);
``--wall`` times with the wall clock instead (for an idle machine: it also counts work a
callable hands to other threads). ``--python-wrapper`` adds a column ``ember-py``: the same
compiled graphs run through their generated Python wrappers instead of the native graph
runner (ADR 0068), to measure what the runner saves per call.
Prints one line per model (ms per call and speedup over eager) and the geometric means.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]


def build(name: str) -> Any:
    """The zoo case ``name`` (a ``ZooCase``: model, args, kwargs)."""
    sys.path.insert(0, str(ROOT))
    # imported by name: the zoos are test code, outside what tools are type-checked against
    zoo: Any = importlib.import_module("integration_tests.models.zoo")
    vision: Any = None
    with contextlib.suppress(ImportError):  # without timm/torchvision/diffusers: zoo.py only
        vision = importlib.import_module("integration_tests.models.vision_zoo")
    if vision is not None and hasattr(vision, name):
        return getattr(vision, name)()
    return zoo.build(name)


def bind(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[], Any]:
    return lambda: fn(*args, **kwargs)


#: the clock of a round: the calling thread's CPU time (``--wall``: wall time)
CLOCK: Callable[[], float] = time.thread_time


def time_rounds(fns: dict[str, Callable[[], Any]], calls: int, rounds: int) -> dict[str, float]:
    best = dict.fromkeys(fns, math.inf)
    for _ in range(rounds):
        for key, fn in fns.items():
            start = CLOCK()
            for _ in range(calls):
                fn()
            best[key] = min(best[key], (CLOCK() - start) / calls)
    return {key: value * 1e3 for key, value in best.items()}


#: set while the ``ember-py`` column runs: compiled graphs call their Python wrappers
_PYTHON_WRAPPER = [False]


def _python_wrapper_switch() -> None:
    """Make ``ember.inductor``'s compiled graphs run their Python wrapper while
    ``_PYTHON_WRAPPER[0]`` is set (only this benchmark's process pays the test)."""
    from ember.inductor import native_runner
    from ember.inductor.compile_fx import CompiledGraph

    run = CompiledGraph._run

    def switched(self: Any, inputs: list[Any]) -> Any:
        if _PYTHON_WRAPPER[0] and native_runner.is_program(self._call):
            program = self._call
            self._call = native_runner.python_of(program)
            try:
                return run(self, inputs)
            finally:
                self._call = program
        return run(self, inputs)

    CompiledGraph._run = switched  # type: ignore[method-assign]


def _with_python_wrapper(fn: Callable[[], Any]) -> Callable[[], Any]:
    def call() -> Any:
        _PYTHON_WRAPPER[0] = True
        try:
            return fn()
        finally:
            _PYTHON_WRAPPER[0] = False

    return call


def measure(name: str, with_torch: bool, calls: int, rounds: int, python_wrapper: bool = False) -> dict[str, float]:
    import ember.dynamo

    case = build(name)
    model = case.model
    ember_fn = ember.dynamo.optimize("inductor")(model)
    compiled: dict[str, Callable[..., Any]] = {"eager": model, "ember": ember_fn}
    if python_wrapper:
        _python_wrapper_switch()
        compiled["ember-py"] = ember_fn
    if with_torch:
        compiled["torch"] = torch.compile(model)
    with torch.no_grad():
        fns = {key: bind(f, tuple(case.args), dict(case.kwargs)) for key, f in compiled.items()}
        if "ember-py" in fns:
            fns["ember-py"] = _with_python_wrapper(fns["ember-py"])
        for fn in fns.values():
            for _ in range(3):
                fn()
        return time_rounds(fns, calls, rounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--no-torch", action="store_true", help="eager and ember only")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", help="write {model: {eager, ember, torch}} (ms) here")
    parser.add_argument("--python-wrapper", action="store_true",
                        help="add ember with its graphs' Python wrappers instead of the native runner")
    parser.add_argument("--wall", action="store_true",
                        help="time with the wall clock (on an idle machine) instead of CPU time")
    opts = parser.parse_args(argv)
    global CLOCK
    CLOCK = time.perf_counter if opts.wall else time.thread_time
    torch.set_num_threads(1)
    # steady state: the native graph runner built before the first graph (a first process
    # on a machine builds it in the background and runs Python wrappers meanwhile)
    os.environ.setdefault("EMBER_NATIVE_RUNNER", "wait")
    # and each frame's guards compiled to C on its first call (by default after 16 calls,
    # in a thread: the timed rounds would otherwise run the Python checks)
    os.environ.setdefault("EMBER_NATIVE_GUARDS", "eager")
    os.environ.setdefault("EMBER_NATIVE_GUARDS_AFTER", "0")
    results: dict[str, dict[str, float]] = {}
    for name in opts.models:
        ms = measure(name, not opts.no_torch, opts.calls, opts.rounds, opts.python_wrapper)
        results[name] = ms
        cells = "  ".join(f"{k} {v:8.2f} ms {ms['eager'] / v:5.2f}x" for k, v in ms.items())
        print(f"{name:20s} {cells}", flush=True)
    for key in ("ember", "ember-py", "torch"):
        ratios = [r["eager"] / r[key] for r in results.values() if key in r]
        if ratios:
            geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
            print(f"geomean over {len(ratios)}: {key} {geo:.3f}x eager")
    if opts.json:
        Path(opts.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
