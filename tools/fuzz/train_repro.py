"""Shrinking a failing training program, and its standalone reproducer.

Shrinking drops blocks (the input stage's embedding last), then the batch growth,
keeping a candidate when eager still trains it and the backend still fails with
the same signature. The reproducer is the program's module and inputs with a
loop training an eager and a compiled copy at the program's lengths; it prints
each difference and exits 1 while the bug is present.
"""

from __future__ import annotations

from dataclasses import replace

from .backends import Backend
from .oracle import Outcome
from .repro import compile_source
from .train_gen import TrainProgram, eager_trains
from .train_oracle import check_train


def shrink_train(program: TrainProgram, backend: Backend, outcome: Outcome,
                 max_checks: int = 60) -> TrainProgram:
    """A smaller program failing with ``outcome``'s signature."""
    checks = 0

    def still_fails(p: TrainProgram) -> bool:
        nonlocal checks
        checks += 1
        if not eager_trains(p):
            return False
        try:
            got, _ = check_train(p, backend)
        finally:
            backend.reset()
        return got.signature == outcome.signature

    improved = True
    while improved and checks < max_checks:
        improved = False
        candidates = [program.without(i) for i in reversed(range(len(program.blocks)))
                      if program.blocks[i].kind != "embed"]
        if program.grow_batch:
            candidates.append(replace(program, grow_batch=False))
        for cand in candidates:
            if checks >= max_checks:
                break
            if still_fails(cand):
                program, improved = cand, True
                break
    return program


_DRIVER = '''

def _close(a, b):
    return torch.allclose(a.detach().double(), b.detach().double(), rtol=1e-4, atol=1e-4,
                          equal_nan=True)


def _weighted(outs):
    total = 0
    for k, t in enumerate(outs):
        w = torch.cos(torch.arange(t.numel(), dtype=torch.float64) * 0.7 + k)
        total = total + (t * w.to(t.dtype).view(t.shape)).sum()
    return total


def main():
    import copy
    eager = Model()
    model = copy.deepcopy(eager)
{compile}    bad = 0
    for k, (batch, length) in enumerate(zip(BATCHES, LENGTHS)):
        results = []
        for m, fn in ((eager, eager), (model, compiled_fn)):
            (x, y), leaves = make_inputs(batch, length, SEED * 1000 + k)
            out = fn(x, y)
            _weighted([t for t in out if t.requires_grad]).backward()
            grads = [p.grad.clone() for p in m.parameters() if p.grad is not None]
            results.append(([t.detach() for t in out], grads + [t.grad for t in leaves]))
            with torch.no_grad():
                for p in m.parameters():
                    if p.grad is not None:
                        p.sub_(0.05 * p.grad)
                        p.grad = None
        (out_e, g_e), (out_c, g_c) = results
        for i, (e, c) in enumerate(zip(out_e, out_c)):
            if not _close(e, c):
                bad += 1
                print(f"length {{length}}: output {{i}} differs")
        for j, (e, c) in enumerate(zip(g_e, g_c)):
            if not _close(e, c):
                bad += 1
                print(f"length {{length}}: gradient {{j}} differs")
    print("bug present" if bad else "no difference")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
'''


def reproducer_train(program: TrainProgram, backend: str, outcome: Outcome) -> str:
    head = (f'"""Fuzz training program {program.seed} under {backend}: '
            f'{outcome.signature}\n\n{outcome.detail}\n"""\n')
    consts = (f"\nSEED = {program.seed}\nLENGTHS = {list(program.lengths)}\n"
              f"BATCHES = {program.batches()}\n")
    compile_lines = "".join("    " + ln + "\n"
                            for ln in compile_source(backend).replace("(fn,", "(model,")
                            .splitlines())
    return head + program.source() + consts + _DRIVER.format(compile=compile_lines)


__all__ = ["reproducer_train", "shrink_train"]
