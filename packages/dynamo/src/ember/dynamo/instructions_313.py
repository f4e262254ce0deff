"""CPython 3.13: its opcode handlers, emission spellings and deliberate breaks.

Starts from 3.12 (``instructions_312``). 3.13 replaced ``KW_NAMES`` with
``CALL_KW``, ``FORMAT_VALUE`` with ``CONVERT_VALUE`` / ``FORMAT_SIMPLE`` /
``FORMAT_WITH_SPEC``, moved function attributes out of ``MAKE_FUNCTION``
into ``SET_FUNCTION_ATTRIBUTE``, added ``TO_BOOL`` before conditional jumps
and the superinstructions ``LOAD_FAST_LOAD_FAST`` / ``STORE_FAST_LOAD_FAST``
/ ``STORE_FAST_STORE_FAST``, and made ``LOAD_CLOSURE`` a pseudo opcode. The
NULL of a call now goes *after* the callable (``LOAD_GLOBAL``, ``LOAD_ATTR``,
``CALL``, ``CALL_FUNCTION_EX``), and ``POP_JUMP_IF_*`` / ``UNARY_NOT`` want an
exact bool. The parts of this module are described in ``instructions_311``.
"""

from __future__ import annotations

import dis
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bytecode import Compare

from . import instructions_312 as previous
from .bytecode_transform import arg
from .errors import Unsupported
from .variables.base import VariableTracker
from .variables.constant import ConstantVariable
from .variables.functions import NestedFunctionVariable
from .variables.misc import NullVariable

if TYPE_CHECKING:
    from .codegen import PyCodegen

Inst = dis.Instruction

load_attr_arg = previous.load_attr_arg
COND_JUMPS = previous.COND_JUMPS

CONVERSIONS: dict[int, Callable[[object], str]] = {1: str, 2: repr, 3: ascii}

#: ``CALL`` takes ``[callable, self or NULL, args...]``: the NULL goes *after*
#: the callable (``LOAD_GLOBAL``/``LOAD_ATTR`` with the low bit push it there).
NULL_AFTER_CALLABLE = True
UNCHECKED_LOAD_FAST = previous.UNCHECKED_LOAD_FAST
#: ``POP_JUMP_IF_TRUE/FALSE`` and ``UNARY_NOT`` want an exact bool (a release
#: build does not check: any other object reads as false), so the compiler
#: puts ``TO_BOOL`` (or a ``COMPARE_OP`` with this bit) before them.
EXACT_BOOL_JUMPS = True
COMPARE_TO_BOOL = 16
SET_FUNCTION_ATTRIBUTE = True


class VersionInstructions(previous.VersionInstructions):
    """Handlers whose meaning is specific to 3.13 (mixed in before ``CommonInstructions``)."""

    # -- the NULL of a call goes after the callable ------------------------------------
    def LOAD_GLOBAL(self, inst: Inst) -> None:
        self.push(self.load_global(inst.argval))
        if arg(inst) & 1:
            self.push(NullVariable())

    def push_for_call(self, callee: VariableTracker) -> None:
        """What a method load pushes for ``CALL``: ``[callee, NULL]``."""
        self.push(callee)
        self.push(NullVariable())

    def CALL_KW(self, inst: Inst) -> None:
        self.kw_names = tuple(self.pop().as_python_constant())
        self.call_n(arg(inst))

    def LOAD_FAST(self, inst: Inst) -> None:
        """``LOAD_FAST`` of a cell or free variable is 3.13's ``LOAD_CLOSURE``."""
        if inst.argval in self.code.co_cellvars or inst.argval in self.code.co_freevars:
            self.LOAD_CLOSURE(inst)
        else:
            super().LOAD_FAST(inst)

    # -- superinstructions ------------------------------------------------------------------
    def LOAD_FAST_LOAD_FAST(self, inst: Inst) -> None:
        first, second = inst.argval
        for name in (first, second):
            self.LOAD_FAST(inst._replace(opname="LOAD_FAST", argval=name))

    def STORE_FAST_STORE_FAST(self, inst: Inst) -> None:
        first, second = inst.argval  # the top of the stack goes to the first
        for name in (first, second):
            self.STORE_FAST(inst._replace(opname="STORE_FAST", argval=name))

    def STORE_FAST_LOAD_FAST(self, inst: Inst) -> None:
        stored, loaded = inst.argval
        self.STORE_FAST(inst._replace(opname="STORE_FAST", argval=stored))
        self.LOAD_FAST(inst._replace(opname="LOAD_FAST", argval=loaded))

    # -- truth ------------------------------------------------------------------------------------
    def TO_BOOL(self, inst: Inst) -> None:
        """Left as it is: the jump or ``not`` that follows asks for its truth
        (and a split re-emits ``TO_BOOL`` before a jump it replays)."""
        value = self.stack[-1]
        if value.is_python_constant():
            self.stack[-1] = ConstantVariable(bool(value.as_python_constant()))

    # -- functions ----------------------------------------------------------------------------------
    def MAKE_FUNCTION(self, inst: Inst) -> None:
        self.push(self.make_nested_function(self.pop(), {}))

    def SET_FUNCTION_ATTRIBUTE(self, inst: Inst) -> None:
        fn = self.pop()
        value = self.pop()
        if not isinstance(fn, NestedFunctionVariable):
            raise Unsupported(f"SET_FUNCTION_ATTRIBUTE on {fn.describe()}")
        rebuilt = self.make_nested_function(ConstantVariable(fn.code), {arg(inst): value})
        if arg(inst) != 0x01:
            rebuilt._defaults = fn._defaults
        if arg(inst) != 0x02:
            rebuilt._kwdefaults = fn._kwdefaults
        if arg(inst) != 0x08:
            rebuilt.closure = fn.closure
        self.push(rebuilt)

    # -- f-strings -------------------------------------------------------------------------------
    def CONVERT_VALUE(self, inst: Inst) -> None:
        value = self.value_to_format(self.pop())
        self.push(ConstantVariable(CONVERSIONS[arg(inst)](value)))

    def FORMAT_SIMPLE(self, inst: Inst) -> None:
        self.push(ConstantVariable(format(self.value_to_format(self.pop()), "")))

    def FORMAT_WITH_SPEC(self, inst: Inst) -> None:
        spec = self.pop().as_python_constant()
        self.push(ConstantVariable(format(self.value_to_format(self.pop()), spec)))

    # -- loops ----------------------------------------------------------------------------------------
    AFTER_FOR = ("END_FOR", "POP_TOP")

    def END_FOR(self, inst: Inst) -> None:
        self.pop()


# -- emitting bytecode ---------------------------------------------------------------


def emit_call(cg: PyCodegen, nargs: int, kw_names: tuple[str, ...] = ()) -> None:
    """Call with ``[callable, NULL, *args]`` (or ``[callable, self, *args]``) on the stack."""
    if kw_names:
        cg.emit("LOAD_CONST", kw_names)
        cg.emit("CALL_KW", nargs)
    else:
        cg.emit("CALL", nargs)


def replay_arg(inst: Inst) -> Any:
    """The argument that re-emits ``inst`` unchanged with the ``bytecode`` library."""
    if inst.opname == "COMPARE_OP":
        return Compare((arg(inst) >> 5) | (arg(inst) & COMPARE_TO_BOOL))
    return previous.replay_arg(inst)


native_stack_effect = previous.native_stack_effect


GRAPH_BREAK_OPCODES: dict[str, str] = {
    **previous.GRAPH_BREAK_OPCODES,
    "ENTER_EXECUTOR": "an interpreter-internal opcode that never appears in user code",
    "EXIT_INIT_CHECK": "an interpreter-internal opcode that never appears in user code",
}

NOT_TRACED: frozenset[str] = previous.NOT_TRACED

KNOWN_MISSING: frozenset[str] = frozenset()
