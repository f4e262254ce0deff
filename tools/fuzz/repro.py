"""A standalone reproducer: one Python file needing only torch and the compiler under test.

It holds the program's ``make_inputs`` and ``fn``, compiles ``fn`` the way the
fuzzer did, runs both sides on identical inputs and prints every difference it
sees (values, dtype, shape, strides, aliasing with the inputs, input
mutations, gradients). Exit status 1 while the bug is present, 0 once fixed.
"""

from __future__ import annotations

from .inputs import make_inputs_source
from .oracle import SECOND_SEED, Outcome, call_specs
from .program import Program


def compile_source(backend: str) -> str:
    """The lines that define ``compiled_fn`` for a backend name (see backends.py)."""
    if backend == "torch-ember-inductor":
        return ("import ember.inductor\n"
                "compiled_fn = torch.compile(fn, backend=ember.inductor.backend)\n")
    frontend, _, inner = backend.partition("-")
    if frontend == "ember":
        return f"import ember.dynamo\ncompiled_fn = ember.dynamo.compile(fn, backend={inner!r})\n"
    return f"compiled_fn = torch.compile(fn, backend={inner!r})\n"


_CHECK = '''
def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _storage(t):
    flat = torch.empty(0, dtype=t.dtype)
    with torch.no_grad():
        flat.set_(t.untyped_storage())
    return flat.detach()


def _same_memory(a, b):
    return a.numel() > 0 and b.numel() > 0 and (
        a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())


def _close(a, b):
    a, b = a.detach(), b.detach()
    if a.is_floating_point():
        return torch.allclose(a.double(), b.double(), rtol=1e-4, atol=1e-4, equal_nan=True)
    return torch.equal(a, b)


def _strides(t):
    return [st if sz > 1 else None for sz, st in zip(t.shape, t.stride())] if t.numel() > 1 else []


def compare(make_inputs, seed):
    ins_e, leaves_e = make_inputs(seed)
    ins_c, leaves_c = make_inputs(seed)
    out_e = fn(*ins_e)
    out_c = compiled_fn(*ins_c)  # an exception here is the bug when eager did not raise
    problems = []
    for i, (e, c) in enumerate(zip(_flat(out_e), _flat(out_c))):
        if not isinstance(e, torch.Tensor):
            if e != c:
                problems.append(f"output {i}: {c!r}, eager {e!r}")
            continue
        if not isinstance(c, torch.Tensor):
            problems.append(f"output {i}: {type(c).__name__}, eager a tensor")
            continue
        if (c.dtype, c.shape) != (e.dtype, e.shape):
            problems.append(f"output {i}: {c.dtype}{tuple(c.shape)}, eager {e.dtype}{tuple(e.shape)}")
            continue
        if not _close(e, c):
            problems.append(f"output {i}: values differ")
        if _strides(c) != _strides(e):
            problems.append(f"output {i}: strides {c.stride()}, eager {e.stride()}")
        alias_e = [j for j, x in enumerate(ins_e) if _same_memory(e, x)]
        alias_c = [j for j, x in enumerate(ins_c) if _same_memory(c, x)]
        if alias_e != alias_c:
            problems.append(f"output {i} shares memory with inputs {alias_c}, eager {alias_e}")
        elif alias_e and c.storage_offset() != e.storage_offset():
            problems.append(f"output {i}: storage offset {c.storage_offset()}, eager {e.storage_offset()}")
    for j, (xe, xc) in enumerate(zip(ins_e, ins_c)):
        if not _close(_storage(xe), _storage(xc)):
            problems.append(f"input {j}: contents after the call differ from eager's")
    if BACKWARD:
        def loss(out):
            ts = [t for t in _flat(out) if isinstance(t, torch.Tensor) and t.requires_grad]
            return sum((t * torch.cos(torch.arange(t.numel(), dtype=t.dtype) * 0.7 + k)
                        .view(t.shape)).sum() for k, t in enumerate(ts)) if ts else None
        le, lc = loss(out_e), loss(out_c)
        if le is not None:
            le.backward()
            lc.backward()
            for k, (a, b) in enumerate(zip(leaves_e, leaves_c)):
                if (a.grad is None) != (b.grad is None) or (
                        a.grad is not None and not _close(a.grad, b.grad)):
                    problems.append(f"gradient of leaf {k} differs")
    return problems


def main():
    problems = []
    for k, (make_inputs, seed) in enumerate(CALLS):
        problems += [f"call {k + 1}: {p}" for p in compare(make_inputs, seed)]
    for p in problems:
        print("MISMATCH:", p)
    print("bug reproduced" if problems else "compiled matches eager")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def _calls_source(program: Program, resize: bool) -> str:
    """``make_inputs`` for the first call and, with ``resize``, one function per grown size;
    then ``CALLS``: the (inputs maker, seed) of each call the fuzzer made, in its order."""
    if not resize:
        return program.inputs_source() + "\n\nCALLS = [(make_inputs, SEED)]\n"
    sources: list[str] = []
    names: list[str] = []
    seen: dict[str, str] = {}
    for k, specs in enumerate(call_specs(program, resize=True)):
        text = make_inputs_source(specs)
        name = seen.get(text)
        if name is None:
            name = seen[text] = f"make_inputs_{len(seen)}"
            sources.append(text.replace("def make_inputs(", f"def {name}(", 1))
        names.append(f"({name}, SEED + {k * SECOND_SEED})")
    return "\n\n".join(sources) + f"\n\nCALLS = [{', '.join(names)}]\n"


def reproducer(program: Program, backend: str, outcome: Outcome, resize: bool = False) -> str:
    """The reproducer's source for ``program`` failing under ``backend`` (with ``resize``:
    the calls on grown inputs too, in the order the fuzzer made them)."""
    head = (
        f'"""ember fuzz reproducer: {outcome.signature} under {backend}.\n\n'
        f"{outcome.detail}\n\n"
        f"Program seed {program.seed}. Run: python this_file.py (exit 1 while the bug is "
        'present).\n"""\n'
    )
    return (head + "import sys\n\nimport torch\nimport torch.nn.functional as F\n\n"
            "_trace = []\n"
            f"SEED = {program.seed}\nBACKWARD = {program.backward}\n\n\n"
            + _calls_source(program, resize) + "\n\n" + program.fn_source() + "\n\n"
            + compile_source(backend) + _CHECK)
