"""Bytecode plumbing: assembling code with the original signature, liveness,
and resume functions built from (and mapped back to) the original code."""

from __future__ import annotations

import dis
import inspect
import types

from bytecode import Bytecode, Instr

from ember.dynamo.bytecode_transform import assemble
from ember.dynamo.resume import ResumeCodes, live_locals, real_instructions

RESUME = ResumeCodes()
resume_code = RESUME.resume_code
origin_of = RESUME.origin_of


def sample(a, b=2, *rest, k=3, **kw):
    c = a + b
    d = c * k
    if d > 10:
        c = 0
    return c + d + len(rest) + len(kw)


def straight(a):
    b = a + 1
    c = b * 2
    return c + a


def loop(xs):
    total = 0
    for x in xs:
        total = total + x
    return total


def offset_of(fn, opname, argval, nth=0):
    """The offset of the ``nth`` instruction ``opname argval``; on 3.13 a
    superinstruction (``LOAD_FAST_LOAD_FAST (c, a)``) whose first part it is counts."""

    def matches(i: dis.Instruction) -> bool:
        if i.opname == opname:
            return i.argval == argval
        return i.opname.startswith(opname + "_") and isinstance(i.argval, tuple) and i.argval[0] == argval

    hits = [i for i in real_instructions(fn.__code__) if matches(i)]
    return hits[nth].offset


def test_assemble_keeps_signature_and_runs_new_body():
    body = [Instr("LOAD_FAST", "a"), Instr("LOAD_FAST", "k"), Instr("BINARY_OP", 0), Instr("RETURN_VALUE")]
    code = assemble(sample.__code__, body)
    fn = types.FunctionType(code, globals(), "sample", sample.__defaults__)
    fn.__kwdefaults__ = sample.__kwdefaults__
    assert inspect.signature(fn) == inspect.signature(sample)
    assert code.co_varnames[: code.co_argcount + code.co_kwonlyargcount + 2] == sample.__code__.co_varnames[:5]
    assert fn(1) == 4 and fn(1, 5, 6, k=10, z=1) == 11


def test_live_locals_straight_line():
    code = straight.__code__
    at_c = offset_of(straight, "LOAD_FAST", "b", 0)
    assert live_locals(code, [at_c]) == {"a", "b"}
    at_ret = offset_of(straight, "LOAD_FAST", "c", 0)
    assert live_locals(code, [at_ret]) == {"a", "c"}


def test_live_locals_branch_and_loop():
    code = sample.__code__
    at_if = offset_of(sample, "LOAD_FAST", "d", 0)
    assert live_locals(code, [at_if]) == {"c", "d", "rest", "kw"}
    loop_code = loop.__code__
    at_for = next(i.offset for i in real_instructions(loop_code) if i.opname == "FOR_ITER")
    assert live_locals(loop_code, [at_for]) == {"total"}


def test_resume_function_runs_rest_of_code():
    at = offset_of(straight, "LOAD_FAST", "b", 0)
    rcode, name = resume_code(straight.__code__, at, 0, ("a", "b"))
    assert name.startswith(f"__resume_at_{at}_")
    fn = types.FunctionType(rcode, globals(), name)
    assert fn(1, 2) == 5  # c = b * 2 = 4; return c + a
    again, again_name = resume_code(straight.__code__, at, 0, ("a", "b"))
    assert again is rcode and again_name == name  # cached: one code object per resume point


def test_resume_with_stack_values_and_iterator():
    at = next(i.offset for i in real_instructions(loop.__code__) if i.opname == "FOR_ITER")
    rcode, name = resume_code(loop.__code__, at, 1, ("total",), iter_slots=(0,))
    fn = types.FunctionType(rcode, globals(), name)
    assert fn((3, 4), 10) == 17  # remaining items of the loop arrive as a tuple


def test_origin_maps_resume_offsets_back():
    at = offset_of(straight, "LOAD_FAST", "b", 0)
    rcode, _ = resume_code(straight.__code__, at, 0, ("a", "b"))
    ret_in_resume = next(i.offset for i in real_instructions(rcode) if i.opname == "RETURN_VALUE")
    orig, off = origin_of(rcode, ret_in_resume)
    assert orig is straight.__code__
    assert off == next(i.offset for i in real_instructions(straight.__code__) if i.opname == "RETURN_VALUE")


def test_resume_keeps_line_numbers():
    at = offset_of(straight, "LOAD_FAST", "b", 0)
    rcode, _ = resume_code(straight.__code__, at, 0, ("a", "b"))
    lines = {i.positions.lineno for i in dis.get_instructions(rcode) if i.positions and i.positions.lineno}
    first = straight.__code__.co_firstlineno
    assert {first + 2, first + 3} <= lines


def test_resume_shares_cells_and_closures():
    def outer(y):
        def inner(x):
            z = x + y
            return z * 2

        return inner

    inner = outer(5)
    at = offset_of(inner, "LOAD_FAST", "z", 0)
    rcode, name = resume_code(inner.__code__, at, 0, ("z",))
    assert rcode.co_freevars == ("y",)
    fn = types.FunctionType(rcode, globals(), name, None, inner.__closure__)
    assert fn(3) == 6
    # a frame whose locals are captured: its cells become the resume
    # function's free variables, shared with the inner functions
    at_ret = real_instructions(outer.__code__)[-1].offset
    rcode2, name2 = resume_code(outer.__code__, at_ret, 0, ("inner",))
    assert rcode2.co_freevars == ("y",) and rcode2.co_cellvars == ()


def wide(x, name):
    y = x + 1
    message = f"a line whose f-string runs past column 128, like transformers' deprecate_kwarg: {name} is deprecated, use {name}_new {x.shape} instead."
    return y * 2, message


def lines_per_code_unit(code: types.CodeType) -> dict[int, int | None]:
    return {o: line for s, e, line in code.co_lines() for o in range(s, e, 2)}


def test_columns_past_128_keep_a_valid_line_table():
    """``bytecode`` 0.19 writes columns >= 128 in the one-line location form, whose
    raw column bytes then read as new entries: the table outgrew the code and the
    verifier refused every frame split in such a function (it ran eagerly)."""
    from ember.dynamo.bytecode_verify import verify

    assert max(p[3] or 0 for p in wide.__code__.co_positions()) >= 128
    at = offset_of(wide, "LOAD_FAST", "y", 0)
    rcode, _ = resume_code(wide.__code__, at, 0, ("x", "name", "y", "message"))
    verify(rcode)  # raised BytecodeError: "the line table has an overlapping or out-of-range entry"
    body = [i for i in Bytecode.from_code(wide.__code__) if not (isinstance(i, Instr) and i.name == "RESUME")]
    code = assemble(wide.__code__, body)
    verify(code)
    assert lines_per_code_unit(code) == lines_per_code_unit(wide.__code__)
    assert list(code.co_positions()) == list(wide.__code__.co_positions())


def test_break_in_a_function_with_wide_lines_splits_it():
    import torch

    import ember.dynamo as ed
    from ember.dynamo.testing import CompileCounter

    def fn(x):
        y = x.sin()
        message = f"a line whose f-string runs past column 128, like transformers' deprecate_kwarg: {y.shape} is deprecated, use {x.shape} instead."
        ed.graph_break()
        return y.cos() + len(message)

    cnt = CompileCounter()
    x = torch.randn(4)
    torch.testing.assert_close(ed.compile(fn, backend=cnt)(x), fn(x))
    assert cnt.frame_count == 2  # was 0: the split frame failed to verify and ran eagerly
