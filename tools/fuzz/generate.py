"""``generate(seed) -> Program``: random inputs, then statements kept only if eager runs them.

The prefix is executed for real as it grows (generate-and-test, see ``gen.py``).
A rejected statement that may have written to live values (in-place writes,
blocks) makes the generator replay the kept prefix on fresh inputs, so the
concrete state always equals what the program computes.
"""

from __future__ import annotations

import random
import re
import warnings
from typing import Any

import torch
import torch.nn.functional as F

from .gen import Gen, NoCandidate
from .inputs import InputSpec, build_inputs, random_spec
from .program import Program, Stmt
from .stmts import STATEMENTS

_NAME = re.compile(r"\b([xv]\d+)\b")
MAX_NUMEL = 4096
MAX_NDIM = 6


def _namespace(inputs: list[InputSpec], seed: int) -> dict[str, Any]:
    tensors, _ = build_inputs(inputs, seed)
    ns: dict[str, Any] = {"torch": torch, "F": F, "_trace": []}
    ns.update({s.name: t for s, t in zip(inputs, tensors)})
    return ns


def _run(ns: dict[str, Any], stmt: Stmt) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile("\n".join(stmt.lines), "<fuzz stmt>", "exec"), ns)


def _live(ns: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in ns.items() if _NAME.fullmatch(k) and isinstance(v, torch.Tensor)}


def _sane(ns: dict[str, Any], defines: tuple[str, ...]) -> bool:
    for name in defines:
        t = ns.get(name)
        if not isinstance(t, torch.Tensor):
            return False
        if t.numel() > MAX_NUMEL or t.dim() > MAX_NDIM or t.is_complex():
            return False
    return True


def _choose_outputs(rng: random.Random, env: dict[str, torch.Tensor],
                    inputs: tuple[InputSpec, ...]) -> tuple[tuple[str, ...], bool]:
    names = [n for n in env if n.startswith("v")]
    ins = [s.name for s in inputs]
    k = rng.choices((1, 2, 3, 4), weights=(30, 35, 25, 10))[0]
    outs: list[str] = []
    for _ in range(k):
        pool = names if names and rng.random() < 0.88 else ins
        weights = [1.0 + 3.0 * i / len(pool) for i in range(len(pool))]
        pick = rng.choices(pool, weights=weights)[0]
        if pick not in outs:
            outs.append(pick)
    single = len(outs) == 1 and rng.random() < 0.5
    if not single and rng.random() < 0.08:
        outs.append(rng.choice(("None", f"{outs[0]}.shape[0] if {outs[0]}.dim() else 1")))
    return tuple(outs), single


def uses_of(stmt: Stmt, known: set[str]) -> tuple[str, ...]:
    found = {m for ln in stmt.lines for m in _NAME.findall(ln)}
    return tuple(sorted((found & known) - set(stmt.defines)))


def generate(seed: int, *, min_stmts: int = 2, max_stmts: int = 10) -> Program:
    """A random program whose eager run (and backward) succeeds on its inputs."""
    rng = random.Random(seed)
    n_inputs = rng.choices((1, 2, 3, 4), weights=(25, 40, 25, 10))[0]
    specs = tuple(random_spec(rng, f"x{i}") for i in range(n_inputs))
    ns = _namespace(list(specs), seed)
    body: list[Stmt] = []
    target = rng.randint(min_stmts, max_stmts)
    next_var = 0
    prods = [p for _, p in STATEMENTS]
    weights = [w for w, _ in STATEMENTS]
    for _ in range(target * 10):
        if len(body) >= target:
            break
        g = Gen(rng, _live(ns), next_var)
        try:
            stmt = rng.choices(prods, weights=weights)[0](g)
        except NoCandidate:
            continue
        stmt = Stmt(stmt.lines, stmt.defines, uses_of(stmt, set(_live(ns))), stmt.kind)
        try:
            _run(ns, stmt)
            ok = _sane(ns, stmt.defines)
        except Exception:
            ok = False
        if ok:
            body.append(stmt)
            next_var = g.next_var
            continue
        for name in stmt.defines:
            ns.pop(name, None)
        if stmt.kind != "assign":
            ns = _namespace(list(specs), seed)
            for kept in body:
                _run(ns, kept)
    outputs, single = _choose_outputs(rng, _live(ns), specs)
    program = Program(seed, specs, tuple(body), outputs, single)
    return _valid_prefix(program)


def eager_ok(program: Program) -> tuple[bool, bool]:
    """(forward runs, forward + backward runs) eagerly on the program's inputs."""
    from .oracle import differentiable_outputs, weighted_loss

    fn = program.make_fn()
    inputs, _ = build_inputs(list(program.inputs), program.seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fn(*inputs)
    except Exception:
        return False, False
    diff = differentiable_outputs(out)
    if not diff:
        return True, True
    try:
        weighted_loss(diff).backward()  # type: ignore[no-untyped-call]
    except Exception:
        return True, False
    return True, True


def _valid_prefix(program: Program) -> Program:
    """Drop trailing statements until the program runs eagerly; backward off if it must be."""
    while True:
        fwd, bwd = eager_ok(program)
        if fwd:
            if not bwd:
                return Program(program.seed, program.inputs, program.body, program.outputs,
                               program.single, backward=False)
            return program
        if not program.body:
            return Program(program.seed, program.inputs, (), (program.inputs[0].name,), True)
        body = program.body[:-1]
        known = {s.name for s in program.inputs} | {d for s in body for d in s.defines}
        outs = tuple(o for o in program.outputs if _NAME.findall(o) and
                     set(_NAME.findall(o)) <= known) or (program.inputs[0].name,)
        program = Program(program.seed, program.inputs, body, outs, program.single and
                          len(outs) == 1)
