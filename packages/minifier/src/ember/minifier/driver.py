"""The minification driver: run strategies until none makes progress or time runs out."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch.fx as fx

from ember.minifier.errors import NoFailureReproduced
from ember.minifier.failure import BackendError, Failure, Predicate, Verdict, as_failure
from ember.minifier.graphio import GraphLike, graph_to_fx, result_graph
from ember.minifier.state import State
from ember.minifier.strategies import STRATEGIES, Strategy

log = logging.getLogger("ember.minifier")

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class MinifyOptions:
    """How `minify` searches.

    time_budget: seconds before the driver stops and returns the smallest failing
        graph found so far (``result.budget_exhausted`` is then true).
    isolate: run every check in a worker subprocess, so a backend that crashes
        the process (segfault, abort) is a failure rather than the end of the
        minifier. Needs a picklable failure (backend by name or importable callable).
    strategies: the strategies, in order; the driver loops over them to a fixpoint.
    """

    time_budget: float = 60.0
    isolate: bool = False
    strategies: tuple[Strategy, ...] = STRATEGIES


@dataclass(frozen=True, slots=True)
class Step:
    """One accepted reduction: which strategy, node counts before and after."""

    strategy: str
    before: int
    after: int
    seconds: float


@dataclass(frozen=True, slots=True)
class MinifyResult:
    """The minimal failing graph, its inputs, and how the search went."""

    graph: GraphLike
    gm: fx.GraphModule
    inputs: tuple[Any, ...]
    failure: Failure
    detail: str
    start_nodes: int
    final_nodes: int
    seconds: float
    checks: int
    steps: tuple[Step, ...] = field(default=())
    budget_exhausted: bool = False
    isolated: bool = False

    def summary(self) -> str:
        tail = " (time budget exhausted: not minimal)" if self.budget_exhausted else ""
        return (
            f"minified {self.start_nodes} -> {self.final_nodes} compute nodes in "
            f"{self.seconds:.1f}s ({self.checks} checks){tail}; failure: {self.detail}"
        )


class _OutOfTime(Exception):
    pass


class _Oracle:
    def __init__(self, failure: Failure, checker: Callable[[Failure, State], Verdict],
                 deadline: float) -> None:
        self.failure = failure
        self.checker = checker
        self.deadline = deadline
        self.checks = 0

    def __call__(self, state: State) -> bool:
        if time.monotonic() > self.deadline:
            raise _OutOfTime
        self.checks += 1
        return self.checker(self.failure, state).failed


def _printer(progress: bool | Progress) -> Progress:
    if callable(progress):
        return progress
    if progress:
        return lambda line: print(f"[ember.minifier] {line}", file=sys.stderr, flush=True)
    return lambda line: None


def _in_process(failure: Failure, state: State) -> Verdict:
    return failure.check(state)


def establish(failure: Failure, state: State,
              checker: Callable[[Failure, State], Verdict] = _in_process) -> tuple[Failure, str]:
    """Check that ``state`` fails; fix a `BackendError`'s signature. Raises `NoFailureReproduced`."""
    verdict = checker(failure, state)
    if not verdict.failed:
        raise NoFailureReproduced(failure.describe(), verdict.detail)
    if isinstance(failure, BackendError) and failure.signature is None:
        failure = replace(failure, signature=verdict.signature)
    return failure, verdict.detail


def minify(
    graph: GraphLike,
    inputs: Sequence[Any],
    is_failing: Failure | Callable[[fx.GraphModule, list[Any]], bool],
    *,
    time_budget: float = 60.0,
    progress: bool | Progress = True,
    isolate: bool = False,
    options: MinifyOptions | None = None,
) -> MinifyResult:
    """Shrink ``graph`` to a 1-minimal graph on which ``is_failing`` still holds.

    ``graph`` is an ``ember.ir.GraphIR`` or a ``torch.fx.GraphModule``; the result's
    ``graph`` has the same kind, and ``result.inputs`` are the minimal graph's
    example inputs (values cut out of the graph become inputs computed by eager).
    ``is_failing`` is a `BackendError`, `Inaccuracy`, `Predicate`, or a plain
    ``(gm, inputs) -> bool``. Raises `NoFailureReproduced` if the graph does not fail.
    """
    opts = options or MinifyOptions(time_budget=time_budget, isolate=isolate)
    say = _printer(progress)
    start = time.monotonic()
    state = State(graph_to_fx(graph, inputs), tuple(inputs))
    failure = as_failure(is_failing)
    checker: Callable[[Failure, State], Verdict] = _in_process
    pool = None
    if opts.isolate and not isinstance(failure, Predicate):
        from ember.minifier.worker import Worker

        pool = Worker()
        checker = pool.check
    try:
        failure, detail = establish(failure, state, checker)
        start_nodes = state.size
        say(f"reproduced: {failure.describe()}")
        say(f"start: {start_nodes} compute nodes, {len(state.inputs)} inputs")
        oracle = _Oracle(failure, checker, start + opts.time_budget)
        steps: list[Step] = []
        exhausted = False
        try:
            progressed = True
            while progressed:
                progressed = False
                for strategy in opts.strategies:
                    t0 = time.monotonic()
                    new = strategy(state, oracle)
                    if new is None:
                        continue
                    steps.append(Step(strategy.name, state.size, new.size, time.monotonic() - t0))
                    say(f"{strategy.name}: {state.size} -> {new.size} compute nodes "
                        f"({oracle.checks} checks, {time.monotonic() - start:.1f}s)")
                    log.info("%s: %d -> %d compute nodes", strategy.name, state.size, new.size)
                    progressed = True  # strategies only shrink: any change is progress
                    state = new
        except _OutOfTime:
            exhausted = True
            say(f"time budget of {opts.time_budget:g}s exhausted; keeping the smallest failing graph")
        final = checker(failure, state)
        if not final.failed:
            say(f"warning: re-checking the minimal graph did not fail ({final.detail}); "
                "the failure looks flaky, so the repro may not reproduce every time")
    finally:
        if pool is not None:
            pool.close()
    result = MinifyResult(
        graph=result_graph(graph, state.gm, state.inputs),
        gm=state.gm,
        inputs=state.inputs,
        failure=failure,
        detail=final.detail,
        start_nodes=start_nodes,
        final_nodes=state.size,
        seconds=time.monotonic() - start,
        checks=oracle.checks,
        steps=tuple(steps),
        budget_exhausted=exhausted,
        isolated=pool is not None,
    )
    say(result.summary())
    return result
