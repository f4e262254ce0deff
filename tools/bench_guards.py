"""Guard cost per cached call: the native check (ADR 0051) vs the Python reference, and
the whole cached call, ember vs torch.compile vs eager, in one process.

    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_guards.py [--models gpt2,vit_gpt2_train]
        [--adam 150] [--no-torch] [--calls 200]

Rows: each zoo model named (``integration_tests/models/zoo.py``; inference under
``no_grad``, a ``*_train`` model as forward + backward of its loss), ``adam<N>``
(``torch.optim.Adam`` over N parameters of 8 elements, ``opt.step()`` compiled, gradients
fixed) and ``tiny_add`` (``x + y`` on 4 elements). For each row: the guard parts of every
check the row's calls run (summed), the time of those checks per call with the Python
check, with the native one, and with the native one built without module records
(``EMBER_NATIVE_MODULE_READS=0``, ADR 0062) (called directly on the frame a real call
passed them, min of repeats), and the whole call's time per call for eager, ember (backend
``inductor``, native guards on) and torch.compile (``inductor``), interleaved, min of
repeats. One torch thread; times are the calling thread's CPU time (``--wall``: wall
time). Guard parts by kind go to ``--kinds``. An optimizer row's checks are its groups'
guards; the native loop over its parameters, gradients and state (ADR 0058) is timed on a
line of its own, next to the per-tensor check it replaces (Python and native).
"""

from __future__ import annotations

import argparse
import collections
import gc
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import ember.dynamo
from ember.guards import CheckFn

ROOT = Path(__file__).resolve().parents[1]

#: the calling thread's CPU time (``--wall``: wall time): on a shared machine a descheduled
#: thread's wait is not the code's cost
_clock = time.thread_time


def _zoo() -> Any:
    spec = importlib.util.spec_from_file_location("_bench_guards_zoo", ROOT / "integration_tests" / "models" / "zoo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _checks_made(before: set[int]) -> list[CheckFn]:
    return [o for o in gc.get_objects() if type(o) is CheckFn and id(o) not in before]


def _spy_frames(checks: list[CheckFn], call: Callable[[], Any]) -> dict[int, tuple[Any, Any]]:
    """The (f_locals, f_globals) each check is called with in one call, and the grad mode
    it is called under (``_grad_modes``: an inference row's checks pass under no_grad only)."""
    seen: dict[int, tuple[Any, Any]] = {}
    for c in checks:
        real = c.fn

        def spy(L: Any, G: Any, real: Any = real, c: CheckFn = c) -> bool:
            seen.setdefault(id(c), (L, G))
            _grad_modes.setdefault(id(c), torch.is_grad_enabled())
            return bool(real(L, G))

        c.fn = spy
    try:
        call()
    finally:
        for c in checks:
            c.fn = c.native_fn or c.py_fn
    return seen


_grad_modes: dict[int, bool] = {}


def _per_call(fn: Callable[[], Any], calls: int, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = _clock()
        for _ in range(calls):
            fn()
        best = min(best, (_clock() - t0) / calls)
    return best * 1e6


def _without_records(c: CheckFn) -> Any:
    """``c``'s native check built with every module read made on each call
    (``EMBER_NATIVE_MODULE_READS=0``: as before ADR 0062), for the comparison."""
    from ember.guards import native

    helper = native.tensor_helper(wait=True)
    old = os.environ.get("EMBER_NATIVE_MODULE_READS")
    os.environ["EMBER_NATIVE_MODULE_READS"] = "0"
    try:
        source = c.native_source(helper)
    finally:
        if old is None:
            del os.environ["EMBER_NATIVE_MODULE_READS"]
        else:
            os.environ["EMBER_NATIVE_MODULE_READS"] = old
    return native.build(source, c._builder.consts if c._builder.weakrefs else None,
                        helper[1] if helper is not None else None)


def _guard_times(checks: list[CheckFn], frames: dict[int, tuple[Any, Any]], n: int) -> tuple[float, float, float]:
    """Per call, summed over the checks: the Python check, the native one, and the native
    one without module records (ADR 0062), on the frames a real call gave them (repeats
    interleaved, so a change of load hits all three; min of 7)."""
    kinds = ("python", "native", "native-reads")
    best = {k: [float("inf")] * len(checks) for k in kinds}
    plain = [_without_records(c) for c in checks]
    for _ in range(7):
        for i, c in enumerate(checks):
            L, G = frames[id(c)]
            # under the grad mode of the call (a check that fails at its GLOBAL_STATE part
            # would time a fraction of the check)
            with torch.set_grad_enabled(_grad_modes.get(id(c), torch.is_grad_enabled())):
                for which, fn in zip(kinds, (c.py_fn, c.native_fn, plain[i]), strict=True):
                    assert fn is not None
                    if fn(L, G) is not True:
                        raise AssertionError(f"the {which} check fails on the frame it is timed on")
                    t0 = _clock()
                    for _ in range(n):
                        fn(L, G)
                    best[which][i] = min(best[which][i], (_clock() - t0) / n * 1e6)
    return sum(best["python"]), sum(best["native"]), sum(best["native-reads"])


def _row(name: str, build: Callable[[], tuple[Callable[[Callable[..., Any]], Callable[[], Any]], Any]],
         calls: int, with_torch: bool, kinds: bool) -> None:
    make, target = build()
    before = {id(o) for o in gc.get_objects() if type(o) is CheckFn}
    ember_call = make(ember.dynamo.compile(target, backend="inductor"))
    for _ in range(3):
        ember_call()
    checks = _checks_made(before)
    frames = _spy_frames(checks, ember_call)
    checks = [c for c in checks if id(c) in frames]
    parts: collections.Counter[str] = collections.Counter()
    for c in checks:
        for p in c.parts:
            parts[p.guard.kind.value + ("/weight" if p.guard.payload.get("weight") else "")] += 1
        with torch.set_grad_enabled(_grad_modes.get(id(c), torch.is_grad_enabled())):
            c.compile_native(*frames[id(c)], c.py_fn(*frames[id(c)]))
    native_ok = all(c.native_fn is not None for c in checks)
    nan = float("nan")
    py, nat, reads = _guard_times(checks, frames, max(200, calls)) if native_ok else (nan, nan, nan)
    layouts = _layout_times(target, max(200, calls))
    timed: dict[str, Callable[[], Any]] = {"eager": make(target), "ember": ember_call}
    if with_torch:
        torch._dynamo.reset()
        timed["torch.compile"] = make(torch.compile(target))
        for _ in range(3):
            timed["torch.compile"]()
    best = dict.fromkeys(timed, float("inf"))
    for _ in range(3):
        for key, fn in timed.items():
            best[key] = min(best[key], _per_call(fn, calls, repeat=2))
    total = sum(parts.values())
    tc = best.get("torch.compile", float("nan"))
    print(
        f"{name:<18} {len(checks):>2} chk {total:>5} parts  guards python {py:7.1f} us  native {nat:7.1f} us"
        f" (without module records {reads:7.1f} us)"
        f"   call: eager {best['eager']:8.1f} us  ember {best['ember']:8.1f} us  torch.compile {tc:8.1f} us"
        f"  ember/tc {best['ember'] / tc:5.2f}  tc/ember {tc / best['ember']:5.2f}",
        flush=True,
    )
    if layouts:
        print(f"   + optimizer layout loops (ADR 0058, not in the columns above): {layouts}")
    if kinds:
        print("   parts by kind:", dict(parts.most_common()))


def _layout_times(target: Any, n: int) -> str:
    """For a compiled optimizer step: the native loop over its groups (``StepGuards.layout``,
    ADR 0058) per call, and the per-tensor check it replaces (Python, native), min of 7."""
    from ember.dynamo.optimizer import CompiledOptimizerStep

    opt = getattr(target, "__self__", None)
    steps = [o for o in gc.get_objects() if type(o) is CompiledOptimizerStep and o.optimizer is opt]
    return "; ".join(_layout_time(check, opt, n) for step in steps for check, _, _ in step._guarded)


def _layout_time(check: Any, opt: Any, n: int) -> str:
    from ember.dynamo.optimizer_guards import step_locals

    if check.layout is None:
        return f"none ({check.native_error})"
    layout, full = check.layout, check.full
    groups, state, values = opt.param_groups, opt.state, step_locals(opt)
    full.compile_native(values, {}, full.py_fn(values, {}))
    fns: dict[str, Callable[[], Any]] = {
        "loop": lambda: layout(groups, state), "per-tensor python": lambda: full.py_fn(values, {})}
    native_fn = full.native_fn
    if native_fn is not None:
        fns["per-tensor native"] = lambda: native_fn(values, {})
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(7):
        for key, fn in fns.items():
            t0 = _clock()
            for _ in range(n):
                fn()
            best[key] = min(best[key], (_clock() - t0) / n * 1e6)
    return (f"{len(groups)} group(s): " + ", ".join(f"{k} {v:.1f} us" for k, v in best.items())
            + f" ({len(full.parts)} per-tensor parts)")


def _zoo_row(zoo: Any, model: str) -> Callable[[], tuple[Any, Any]]:
    def build() -> tuple[Any, Any]:
        case = zoo.build(model)
        m = case.model
        if case.mode == "inference":
            def make(fn: Callable[..., Any]) -> Callable[[], Any]:
                def call() -> Any:
                    with torch.no_grad():
                        return fn(*case.args, **case.kwargs)
                return call
        else:
            params = [p for p in m.parameters() if p.requires_grad]

            def make(fn: Callable[..., Any]) -> Callable[[], Any]:
                def call() -> Any:
                    for p in params:
                        p.grad = None
                    out = case.outputs(fn(*case.args, **case.kwargs))
                    out[0].backward()
                    return out
                return call
        return make, m
    return build


def _adam_row(n: int) -> Callable[[], tuple[Any, Any]]:
    def build() -> tuple[Any, Any]:
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(8)) for _ in range(n)]
        for p in params:
            p.grad = torch.randn(8)
        opt = torch.optim.Adam(params, lr=1e-3)
        opt.step()  # the state exists before any compiled step

        def make(fn: Callable[..., Any]) -> Callable[[], Any]:
            return fn

        return make, opt.step
    return build


def _tiny_add() -> tuple[Any, Any]:
    x, y = torch.randn(4), torch.randn(4)

    def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b

    def make(fn: Callable[..., Any]) -> Callable[[], Any]:
        return lambda: fn(x, y)

    return make, add


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="gpt2,vit_gpt2_train")
    parser.add_argument("--adam", default="150", help="comma-separated parameter counts ('' for none)")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--no-torch", action="store_true", help="leave torch.compile out")
    parser.add_argument("--kinds", action="store_true", help="print guard parts by kind")
    parser.add_argument("--wall", action="store_true", help="time wall clock instead of thread CPU time")
    args = parser.parse_args()
    global _clock
    if args.wall:
        _clock = time.perf_counter
    torch.set_num_threads(1)
    # steady state: the native graph runner (ADR 0068) built before the first graph
    os.environ.setdefault("EMBER_NATIVE_RUNNER", "wait")
    os.environ.setdefault("EMBER_NATIVE_GUARDS", "1")
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {os.getloadavg()[0]:.2f}, "
          f"torch {torch.__version__}, python {sys.version.split()[0]}, 1 thread, "
          f"{'wall' if args.wall else 'thread CPU'} time", flush=True)
    zoo = _zoo()
    rows: list[tuple[str, Callable[[], tuple[Any, Any]]]] = [("tiny_add", _tiny_add)]
    rows += [(f"adam{n}", _adam_row(int(n))) for n in args.adam.split(",") if n]
    rows += [(m, _zoo_row(zoo, m)) for m in args.models.split(",") if m]
    for name, build in rows:
        _row(name, build, args.calls, not args.no_torch, args.kinds)
    print(f"# load {os.getloadavg()[0]:.2f} at the end", flush=True)


if __name__ == "__main__":
    main()
