"""The bytecode verifier: no false alarm on CPython's own code, and each
layout mistake that would crash (or silently misbranch on) the running
interpreter is a ``BytecodeError`` naming the instruction."""

from __future__ import annotations

import dis
import inspect
import json.decoder
import types
import typing

import pytest
import torch.nn.functional
import torch.nn.modules.module
from bytecode import Bytecode, Instr, Label

from ember.dynamo.bytecode_verify import BytecodeError, verify
from ember.dynamo.instructions import EXACT_BOOL_JUMPS, NULL_AFTER_CALLABLE, UNCHECKED_LOAD_FAST


def functions_of(module: types.ModuleType) -> list[types.CodeType]:
    out = []
    for value in vars(module).values():
        for member in [value, *vars(value).values()] if isinstance(value, type) else [value]:
            code = getattr(member, "__code__", None)
            if isinstance(code, types.CodeType):
                out.append(code)
    return out


@pytest.mark.parametrize(
    "module", [inspect, typing, dis, json.decoder, torch.nn.modules.module, torch.nn.functional],
    ids=lambda m: m.__name__,
)
def test_cpython_compiled_code_passes(module: types.ModuleType) -> None:
    codes = functions_of(module)
    assert len(codes) > 5
    for code in codes:
        verify(code, nested=True)


def test_code_with_every_construct_passes() -> None:
    def everything(a: typing.Any, *args: typing.Any, k: int = 1, **kw: typing.Any) -> typing.Any:
        out = [x * a for x in args if x]
        d = {key: v for key, v in kw.items()}
        try:
            with open(a) as fh:
                out.append(fh)
        except (OSError, TypeError) as e:
            out.append(e)
        finally:
            k += 1
        for i in range(3):
            if i > 1 and not a:
                break
        else:
            k -= 1
        inner = lambda: k + len(out)  # noqa: E731
        return f"{a!r:>4}{k}", d, inner(), (lambda *z: z)(*args, **kw), -a if a else +a

    verify(everything.__code__, nested=True)


def assembled(instrs: list[typing.Any], *, argnames: tuple[str, ...] = (), **kw: typing.Any) -> types.CodeType:
    bc = Bytecode([Instr("RESUME", 0), *instrs])
    bc.argnames = list(argnames)
    bc.argcount = len(argnames)
    bc.name = "generated"
    return bc.to_code(**kw)


def precall(nargs: int) -> list[Instr]:
    """3.11's PRECALL before a CALL (gone in 3.12)."""
    return [Instr("PRECALL", nargs)] if "PRECALL" in dis.opmap else []


def calling(order: str) -> types.CodeType:
    """``len(())`` with the NULL put ``order`` ("before"/"after") the callable."""
    fn, null = Instr("LOAD_CONST", len), Instr("PUSH_NULL")
    head = [null, fn] if order == "before" else [fn, null]
    return assembled(
        [*head, Instr("LOAD_CONST", ()), *precall(1), Instr("CALL", 1), Instr("RETURN_VALUE")]
    )


def test_a_call_laid_out_for_this_version_passes_and_runs() -> None:
    code = calling("after" if NULL_AFTER_CALLABLE else "before")
    verify(code)
    assert types.FunctionType(code, {})() == 0


def test_a_call_laid_out_for_the_other_convention_is_an_error() -> None:
    code = calling("before" if NULL_AFTER_CALLABLE else "after")
    with pytest.raises(BytecodeError, match=r"CALL 1: the callable slot holds NULL"):
        verify(code)


def test_consuming_a_null_is_an_error() -> None:
    code = assembled([Instr("PUSH_NULL"), Instr("POP_TOP"), Instr("LOAD_CONST", None), Instr("RETURN_VALUE")])
    with pytest.raises(BytecodeError, match=r"POP_TOP.*consumes a NULL slot"):
        verify(code)


def branching_on(value_instrs: list[Instr]) -> types.CodeType:
    other = Label()
    return assembled(
        [
            *value_instrs,
            Instr("POP_JUMP_IF_FALSE" if "POP_JUMP_IF_FALSE" in dis.opmap else "POP_JUMP_FORWARD_IF_FALSE", other),
            Instr("LOAD_CONST", "true branch"),
            Instr("RETURN_VALUE"),
            other,
            Instr("LOAD_CONST", "false branch"),
            Instr("RETURN_VALUE"),
        ],
        argnames=("x",),
    )


def test_a_conditional_jump_on_a_non_bool_is_an_error_where_an_exact_bool_is_needed() -> None:
    code = branching_on([Instr("LOAD_FAST", "x")])
    if EXACT_BOOL_JUMPS:
        with pytest.raises(BytecodeError, match=r"needs an exact bool .*TO_BOOL first"):
            verify(code)
    else:
        verify(code)
        assert types.FunctionType(code, {})([1]) == "true branch"


@pytest.mark.skipif(not EXACT_BOOL_JUMPS, reason="conditional jumps take any object before 3.13")
def test_to_bool_before_the_jump_passes_and_takes_the_right_branch() -> None:
    code = branching_on([Instr("LOAD_FAST", "x"), Instr("TO_BOOL")])
    verify(code)
    fn = types.FunctionType(code, {})
    assert fn(torch.ones(1)) == "true branch"
    assert fn(torch.zeros(1)) == "false branch"


def test_reading_a_possibly_unbound_local() -> None:
    skip = Label()
    code = assembled(
        [
            Instr("LOAD_FAST", "x"),
            Instr("POP_JUMP_IF_TRUE" if "POP_JUMP_IF_TRUE" in dis.opmap else "POP_JUMP_FORWARD_IF_TRUE", skip),
            Instr("LOAD_CONST", 1),
            Instr("STORE_FAST", "y"),
            skip,
            Instr("LOAD_FAST", "y"),
            Instr("RETURN_VALUE"),
        ]
        if not EXACT_BOOL_JUMPS
        else [
            Instr("LOAD_FAST", "x"),
            Instr("TO_BOOL"),
            Instr("POP_JUMP_IF_TRUE", skip),
            Instr("LOAD_CONST", 1),
            Instr("STORE_FAST", "y"),
            skip,
            Instr("LOAD_FAST", "y"),
            Instr("RETURN_VALUE"),
        ],
        argnames=("x",),
    )
    if UNCHECKED_LOAD_FAST:
        with pytest.raises(BytecodeError, match=r"reads local `y`, which may be unbound"):
            verify(code)
    else:  # 3.11's LOAD_FAST raises UnboundLocalError itself
        verify(code)
        with pytest.raises(UnboundLocalError):
            types.FunctionType(code, {})(True)


def test_a_stack_deeper_than_co_stacksize_is_an_error() -> None:
    code = assembled(
        [Instr("LOAD_CONST", 1), Instr("LOAD_CONST", 2), Instr("BUILD_TUPLE", 2), Instr("RETURN_VALUE")]
    )
    with pytest.raises(BytecodeError, match=r"stack depth 2 exceeds co_stacksize 1"):
        verify(code.replace(co_stacksize=1))


def test_falling_off_the_end_is_an_error() -> None:
    code = assembled([Instr("LOAD_CONST", 1), Instr("POP_TOP"), Instr("NOP")])
    with pytest.raises(BytecodeError, match=r"falls off the end"):
        verify(code)


def test_an_undecodable_line_table_is_an_error() -> None:
    def f() -> int:
        return 1

    with pytest.raises(BytecodeError, match=r"line table"):
        verify(f.__code__.replace(co_linetable=b""))


def test_the_message_names_python_instruction_and_listing() -> None:
    code = calling("before" if NULL_AFTER_CALLABLE else "after")
    with pytest.raises(BytecodeError) as info:
        verify(code)
    text = str(info.value)
    assert "generated bytecode for `generated` is invalid on CPython 3." in text
    assert "please report this" in text and "RETURN_VALUE" in text

