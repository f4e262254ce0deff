"""Opcode handlers whose meaning is specific to CPython 3.11."""

from __future__ import annotations

import dis

from .instructions_common import CommonInstructions
from .translator_core import arg
from .variables.lists import ListIteratorVariable
from .variables.misc import BoundCallVariable, NullVariable

Inst = dis.Instruction


class VersionMixin(CommonInstructions):
    def global_pushes_null(self, inst: Inst) -> bool:
        return bool(arg(inst) & 1)

    def LOAD_ATTR(self, inst: Inst) -> None:
        obj = self.pop()
        self.push(self.getattr_deferred(obj, inst.argval))

    def LOAD_METHOD(self, inst: Inst) -> None:
        obj = self.pop()
        self.push(NullVariable())
        self.push(BoundCallVariable(obj, inst.argval))

    def PRECALL(self, inst: Inst) -> None:
        pass

    def CALL(self, inst: Inst) -> None:
        self.call_n(arg(inst))

    def POP_JUMP_FORWARD_IF_FALSE(self, inst: Inst) -> None:
        self.branch(inst, False)

    def POP_JUMP_FORWARD_IF_TRUE(self, inst: Inst) -> None:
        self.branch(inst, True)

    POP_JUMP_BACKWARD_IF_FALSE = POP_JUMP_FORWARD_IF_FALSE
    POP_JUMP_BACKWARD_IF_TRUE = POP_JUMP_FORWARD_IF_TRUE

    def POP_JUMP_FORWARD_IF_NONE(self, inst: Inst) -> None:
        self.branch_none(inst, True)

    def POP_JUMP_FORWARD_IF_NOT_NONE(self, inst: Inst) -> None:
        self.branch_none(inst, False)

    POP_JUMP_BACKWARD_IF_NONE = POP_JUMP_FORWARD_IF_NONE
    POP_JUMP_BACKWARD_IF_NOT_NONE = POP_JUMP_FORWARD_IF_NOT_NONE

    def JUMP_IF_FALSE_OR_POP(self, inst: Inst) -> None:
        self.branch(inst, False, pop=False)

    def JUMP_IF_TRUE_OR_POP(self, inst: Inst) -> None:
        self.branch(inst, True, pop=False)

    def FOR_ITER(self, inst: Inst) -> None:
        it = self.stack[-1]
        assert isinstance(it, ListIteratorVariable)
        item = it.next_item()
        if item is None:
            self.pop()
            self.jump_to(inst.argval)
        else:
            self.push(item)
