"""Opcode handlers whose meaning is specific to CPython 3.12.

3.12 dropped PRECALL, folded LOAD_METHOD into LOAD_ATTR (low bit of the
argument), renamed the conditional jumps, inlined comprehensions
(LOAD_FAST_AND_CLEAR) and added RETURN_CONST, BINARY_SLICE, STORE_SLICE,
END_FOR and CALL_INTRINSIC_1.
"""

from __future__ import annotations

import dis

from .errors import Unsupported
from .instructions_common import CommonInstructions
from .translator_core import arg
from .variables.constant import ConstantVariable
from .variables.lists import ListIteratorVariable, TupleVariable
from .variables.misc import BoundCallVariable, NullVariable

Inst = dis.Instruction

INTRINSIC_UNARY_POSITIVE = 5
INTRINSIC_LIST_TO_TUPLE = 6


class VersionMixin(CommonInstructions):
    def global_pushes_null(self, inst: Inst) -> bool:
        return bool(arg(inst) & 1)

    def LOAD_ATTR(self, inst: Inst) -> None:
        obj = self.pop()
        if arg(inst) & 1:
            self.push(NullVariable())
            self.push(BoundCallVariable(obj, inst.argval))
        else:
            self.push(self.getattr_deferred(obj, inst.argval))

    def LOAD_SUPER_ATTR(self, inst: Inst) -> None:
        raise Unsupported("`super()` inside a compiled region")

    def CALL(self, inst: Inst) -> None:
        self.call_n(arg(inst))

    def POP_JUMP_IF_FALSE(self, inst: Inst) -> None:
        self.branch(inst, False)

    def POP_JUMP_IF_TRUE(self, inst: Inst) -> None:
        self.branch(inst, True)

    def POP_JUMP_IF_NONE(self, inst: Inst) -> None:
        self.branch_none(inst, True)

    def POP_JUMP_IF_NOT_NONE(self, inst: Inst) -> None:
        self.branch_none(inst, False)

    def LOAD_FAST_CHECK(self, inst: Inst) -> None:
        self.LOAD_FAST(inst)

    def LOAD_FAST_AND_CLEAR(self, inst: Inst) -> None:
        value = self.symbolic_locals.pop(inst.argval, None)
        self.push(value if value is not None else NullVariable())

    def STORE_FAST(self, inst: Inst) -> None:
        value = self.pop()
        if isinstance(value, NullVariable):
            self.symbolic_locals.pop(inst.argval, None)
        else:
            self.symbolic_locals[inst.argval] = value

    def RETURN_CONST(self, inst: Inst) -> None:
        self.push(ConstantVariable(inst.argval))
        self.RETURN_VALUE(inst)

    def BINARY_SLICE(self, inst: Inst) -> None:
        stop = self.pop()
        start = self.pop()
        obj = self.pop()
        key = ConstantVariable(slice(start.as_python_constant(), stop.as_python_constant()))
        self.push(self.getitem(obj, key))

    def STORE_SLICE(self, inst: Inst) -> None:
        stop = self.pop()
        start = self.pop()
        obj = self.pop()
        value = self.pop()
        key = ConstantVariable(slice(start.as_python_constant(), stop.as_python_constant()))
        self.setitem(obj, key, value)

    def END_FOR(self, inst: Inst) -> None:
        self.popn(2)

    def CALL_INTRINSIC_1(self, inst: Inst) -> None:
        if arg(inst) == INTRINSIC_LIST_TO_TUPLE:
            self.push(TupleVariable(self.pop().unpack(self)))
        elif arg(inst) == INTRINSIC_UNARY_POSITIVE:
            self.UNARY_POSITIVE(inst)
        else:
            raise Unsupported(f"CALL_INTRINSIC_1 {inst.argrepr}")

    def FOR_ITER(self, inst: Inst) -> None:
        it = self.stack[-1]
        assert isinstance(it, ListIteratorVariable)
        item = it.next_item()
        if item is not None:
            self.push(item)
            return
        self.pop()
        self.jump_to(inst.argval)
        if self.instructions[self.ip].opname == "END_FOR":
            self.ip += 1
