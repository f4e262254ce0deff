"""Late recompiles: does a program keep recompiling as its sizes keep growing?

A compiler that specializes sizes recompiles when an input grows; one with automatic
dynamic shapes recompiles once, with symbolic sizes, and then reuses that graph. For
each program this runs the calls ``check --resize`` makes (two at the generated sizes,
then sizes above 1 grown by 2 and by 3) and one more (grown by 4), and counts the graphs
compiled during the calls after the first grown one: "late" compiles, which a growing
sequence length would pay on every new length. Only programs that eager runs on every
call are counted, and a call whose compiled result differs in shape from eager's ends
the program (``run`` is the correctness check; this one is about recompiles).

ember's reasons (its ``recompiles`` log, which names the guard that failed and the
source line that made it) are kept beside each late compile, so the classes can be
fixed; TorchDynamo's figure is the count only.

    python tools/fuzz.py recompiles --backends ember-eager,torch-eager --seeds 0:200
"""

from __future__ import annotations

import logging
import re
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .generate import generate
from .inputs import InputSpec, build_inputs, resized
from .program import Program

#: sizes above 1 grow by these in the calls after the first two; compiles during the
#: calls after the first grown one are late
GROWTH = (2, 3, 4)


@dataclass
class Stability:
    """One program under one frontend: ``late`` graphs compiled after the first grown
    call, with ember's recompile reasons; ``skipped`` says why it was not counted."""

    seed: int
    compiles: list[int] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    skipped: str = ""

    @property
    def late(self) -> int:
        return sum(self.compiles[3:])


class _Reasons(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("recompiling"):
            self.messages.append(message)


def counting(inner: Callable[..., Any], counter: list[int]) -> Callable[..., Any]:
    """A ``torch.compile``-style backend that counts the graphs it compiles."""

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        counter[0] += 1
        return inner(gm, example_inputs)

    return backend


def _frontend(name: str, counter: list[int]) -> tuple[Callable[[Callable[..., Any]], Any], Callable[[], None]]:
    """``ember-<backend>`` or ``torch-<backend>``, with a counting backend."""
    frontend, _, inner = name.partition("-")
    if frontend == "ember":
        import ember.dynamo as ed

        wrapped = counting(ed.lookup_backend(inner), counter)
        return (lambda fn: ed.compile(fn, backend=wrapped)), ed.reset
    if frontend == "torch":
        import torch._dynamo

        wrapped = counting(torch._dynamo.lookup_backend(inner), counter)
        return (lambda fn: torch.compile(fn, backend=wrapped)), torch._dynamo.reset
    raise ValueError(f"unknown backend {name!r}: use ember-<name> or torch-<name>")


def call_specs(program: Program) -> list[list[InputSpec]]:
    specs = list(program.inputs)
    return [specs, specs] + [resized(specs, g) for g in GROWTH]


def stability(program: Program, backend: str) -> Stability:
    counter = [0]
    compile_fn, reset = _frontend(backend, counter)
    reset()
    result = Stability(program.seed)
    handler = _Reasons()
    log = logging.getLogger("ember.recompiles")
    log.addHandler(handler)
    level, propagate = log.level, log.propagate
    log.setLevel(logging.INFO)
    log.propagate = False  # the reasons are reported in the table, not printed
    try:
        fn, compiled = program.make_fn(), compile_fn(program.make_fn())
        for k, specs in enumerate(call_specs(program)):
            inputs_e, _ = build_inputs(specs, program.seed + k)
            inputs_c, _ = build_inputs(specs, program.seed + k)
            before, seen = counter[0], len(handler.messages)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    want = fn(*inputs_e)
                except Exception as e:
                    result.skipped = f"eager raised on call {k + 1}: {type(e).__name__}"
                    return result
                try:
                    got = compiled(*inputs_c)
                except Exception as e:
                    result.skipped = f"compiled raised on call {k + 1}: {type(e).__name__}"
                    return result
            if _shapes(got) != _shapes(want):
                result.skipped = f"compiled result differs on call {k + 1}"
                return result
            result.compiles.append(counter[0] - before)
            if k >= 3:
                result.reasons.extend(handler.messages[seen:])
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate
        reset()
    return result


def _shapes(out: Any) -> list[Any]:
    flat = torch.utils._pytree.tree_leaves(out)
    return [tuple(t.shape) if isinstance(t, torch.Tensor) else type(t) for t in flat]


_LOCATION = re.compile(r"`[^`]*` \([^)]*\)|/\S+:\d+|\b\d+\b")


def reason_class(message: str) -> str:
    """A reason without its program's names, numbers and source lines, to group by."""
    return _LOCATION.sub("#", message)


def run_stability(backends: list[str], seeds: list[int]) -> dict[str, list[Stability]]:
    return {b: [stability(generate(s), b) for s in seeds] for b in backends}


def stability_table(results: dict[str, list[Stability]]) -> str:
    lines = ["| frontend | programs counted | recompiling late | late graphs | skipped |",
             "|---|---|---|---|---|"]
    for name, rows in results.items():
        counted = [r for r in rows if not r.skipped]
        late = [r for r in counted if r.late]
        lines.append(f"| {name} | {len(counted)} | {len(late)} "
                     f"({', '.join(str(r.seed) for r in late[:12])}{', ...' if len(late) > 12 else ''}) "
                     f"| {sum(r.late for r in counted)} | {len(rows) - len(counted)} |")
    reasons = Counter(reason_class(m) for rows in results.values() for r in rows for m in r.reasons)
    if reasons:
        lines += ["", "ember's reasons for late recompiles (grouped):"]
        lines += [f"  {n} x {text}" for text, n in reasons.most_common(20)]
    return "\n".join(lines)


__all__ = ["GROWTH", "Stability", "counting", "reason_class", "run_stability", "stability",
           "stability_table"]
