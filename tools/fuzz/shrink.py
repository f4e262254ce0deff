"""Shrink a failing program to a minimal one that fails the same way.

Named strategies, each mapping a program to smaller candidates, applied until
none helps (in the spirit of torch's fx minifier): drop a statement with
everything that depends on it, drop one statement, drop an output, simplify an
input (plain layout, no gradient), turn the backward off, return one value,
drop unused inputs. A candidate is kept when eager still runs it and the
backend still fails with the same signature (``Outcome.signature``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import replace

from .backends import Backend
from .generate import eager_ok
from .inputs import InputSpec
from .oracle import Outcome, check
from .program import Program

LOG = logging.getLogger("fuzz.shrink")
_NAME = re.compile(r"\b([xv]\d+)\b")

Strategy = Callable[[Program], Iterator[Program]]


def _with_outputs_valid(p: Program) -> Program | None:
    """``p`` with outputs naming dropped variables removed (None if nothing is left)."""
    known = {s.name for s in p.inputs} | {d for st in p.body for d in st.defines}
    outs = tuple(o for o in p.outputs if set(_NAME.findall(o)) <= known)
    if not outs:
        return None
    return replace(p, outputs=outs, single=p.single and len(outs) == 1)


def drop_with_dependents(p: Program) -> Iterator[Program]:
    for i in reversed(range(len(p.body))):
        q = _with_outputs_valid(p.without(p.dependents(i)))
        if q is not None:
            yield q


def drop_statement(p: Program) -> Iterator[Program]:
    for i in reversed(range(len(p.body))):
        q = _with_outputs_valid(p.without({i}))
        if q is not None:
            yield q


def drop_output(p: Program) -> Iterator[Program]:
    if len(p.outputs) > 1:
        for i in range(len(p.outputs)):
            yield replace(p, outputs=p.outputs[:i] + p.outputs[i + 1:])
    if not p.single and len(p.outputs) == 1:
        yield replace(p, single=True)


def simplify_input(p: Program) -> Iterator[Program]:
    for i, spec in enumerate(p.inputs):
        simpler: list[InputSpec] = []
        if spec.layout:
            simpler.append(replace(spec, layout=()))
            if len(spec.layout) > 1:
                simpler += [replace(spec, layout=(step,)) for step in spec.layout]
        if spec.grad == "nonleaf":
            simpler.append(replace(spec, grad="leaf"))
        if spec.grad != "none":
            simpler.append(replace(spec, grad="none"))
        for s in simpler:
            yield replace(p, inputs=p.inputs[:i] + (s,) + p.inputs[i + 1:])


def drop_backward(p: Program) -> Iterator[Program]:
    if p.backward:
        yield replace(p, backward=False)


def drop_unused_input(p: Program) -> Iterator[Program]:
    used = {n for st in p.body for ln in st.lines for n in _NAME.findall(ln)}
    used |= {n for o in p.outputs for n in _NAME.findall(o)}
    for i, spec in enumerate(p.inputs):
        if spec.name not in used and len(p.inputs) > 1:
            yield replace(p, inputs=p.inputs[:i] + p.inputs[i + 1:])


STRATEGIES: tuple[tuple[str, Strategy], ...] = (
    ("drop statement and dependents", drop_with_dependents),
    ("drop statement", drop_statement),
    ("drop output", drop_output),
    ("drop unused input", drop_unused_input),
    ("simplify input", simplify_input),
    ("no backward", drop_backward),
)


def shrink(program: Program, backend: Backend, outcome: Outcome, *,
           max_checks: int = 300, resize: bool = False) -> Program:
    """The smallest program found that still fails with ``outcome.signature`` (checked as
    it was found: with ``resize``, on grown inputs too)."""
    want = outcome.signature
    checks = 0

    def still_fails(p: Program) -> bool:
        nonlocal checks
        checks += 1
        if not eager_ok(p)[0]:
            return False
        try:
            got = check(p, backend, resize=resize)
        finally:
            backend.reset()
        return got.signature == want

    current = program
    progress = True
    while progress and checks < max_checks:
        progress = False
        for name, strategy in STRATEGIES:
            for candidate in strategy(current):
                if checks >= max_checks:
                    break
                if still_fails(candidate):
                    LOG.info("shrink: %s -> %d statements", name, len(candidate.body))
                    current = candidate
                    progress = True
                    break
            if progress:
                break
    return current
