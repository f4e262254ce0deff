"""CPython 3.12: its opcode handlers, emission spellings and deliberate breaks.

3.12 dropped PRECALL, folded LOAD_METHOD into LOAD_ATTR (low bit of the
argument), renamed the conditional jumps, inlined comprehensions
(LOAD_FAST_AND_CLEAR) and added RETURN_CONST, BINARY_SLICE, STORE_SLICE,
END_FOR, CALL_INTRINSIC_1 and LOAD_SUPER_ATTR (``super().name``). The parts of this module are described in
``instructions_311``.
"""

from __future__ import annotations

import dis
from typing import TYPE_CHECKING, Any

from bytecode import Compare

from . import instructions_311 as previous
from .bytecode_transform import arg
from .errors import Unsupported
from .variables.base import VariableTracker
from .variables.classes import SuperVariable
from .variables.constant import ConstantVariable
from .variables.known_scalars import index_values
from .variables.lazy import LazyVariable
from .variables.lists import ListIteratorVariable, TupleVariable
from .variables.misc import BoundCallVariable, NullVariable
from .variables.sym import make_slice

if TYPE_CHECKING:
    from .codegen import PyCodegen
    from .instructions_common import CommonInstructions as Handlers
else:
    Handlers = object

Inst = dis.Instruction

INTRINSIC_UNARY_POSITIVE = 5
INTRINSIC_LIST_TO_TUPLE = 6


class VersionInstructions(Handlers):
    """Handlers whose meaning is specific to 3.12 (mixed in before ``CommonInstructions``)."""

    def global_pushes_null(self, inst: Inst) -> bool:
        return bool(arg(inst) & 1)

    def push_for_call(self, callee: VariableTracker) -> None:
        """What a method load pushes for ``CALL``: ``[NULL, callee]``."""
        self.push(NullVariable())
        self.push(callee)

    def LOAD_ATTR(self, inst: Inst) -> None:
        obj = self.pop()
        if arg(inst) & 1:
            self.push_for_call(BoundCallVariable(obj, inst.argval))
        else:
            self.push(self.getattr_deferred(obj, inst.argval))

    def LOAD_SUPER_ATTR(self, inst: Inst) -> None:
        """``super().name`` (and ``super(cls, obj).name``): ``[super, cls, obj]``
        on the stack; the low bit of the argument loads a method for a call."""
        obj = self.pop()
        cls = self.pop()
        global_super = self.pop()
        if not (global_super.is_python_constant() and global_super.as_python_constant() is super):
            raise Unsupported(f"`super()` where `super` is {global_super.describe()}")
        if not cls.is_python_constant() or not isinstance(cls.as_python_constant(), type):
            raise Unsupported(f"`super()` over the class {cls.describe()}")
        if isinstance(obj, LazyVariable):
            obj = obj.realize(self)
        attr = SuperVariable(cls.as_python_constant(), obj).var_getattr(self, inst.argval)
        if arg(inst) & 1:
            self.push_for_call(attr)
        else:
            self.push(attr)

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
        self.push(self.getitem(obj, make_slice(index_values(self, [start, stop]))))

    def STORE_SLICE(self, inst: Inst) -> None:
        stop = self.pop()
        start = self.pop()
        obj = self.pop()
        value = self.pop()
        self.setitem(obj, make_slice(index_values(self, [start, stop])), value)

    def END_FOR(self, inst: Inst) -> None:
        self.popn(2)

    def CALL_INTRINSIC_1(self, inst: Inst) -> None:
        if arg(inst) == INTRINSIC_LIST_TO_TUPLE:
            self.push(TupleVariable(self.pop().unpack(self)))
        elif arg(inst) == INTRINSIC_UNARY_POSITIVE:
            self.UNARY_POSITIVE(inst)
        else:
            raise Unsupported(f"CALL_INTRINSIC_1 {inst.argrepr}")

    def SEND(self, inst: Inst) -> None:
        """``yield from``'s step: the next item, or (exhausted) the
        sub-iterator's return value in place of the sent value and a jump
        to ``END_SEND``."""
        self.pop()  # the value sent in: None (generators are run, not driven)
        it = self.stack[-1]
        assert isinstance(it, ListIteratorVariable)
        item = it.next_item(self)
        if item is None:
            self.push(it.returned or ConstantVariable(None))
            self.jump_to(inst.argval)
        else:
            self.push(item)

    def END_SEND(self, inst: Inst) -> None:
        value = self.pop()
        self.pop()
        self.push(value)

    #: What an exhausted ``FOR_ITER`` skips after its jump target (3.13 adds ``POP_TOP``).
    AFTER_FOR: tuple[str, ...] = ("END_FOR",)

    def FOR_ITER(self, inst: Inst) -> None:
        """An exhausted iterator jumps past the instructions of :attr:`AFTER_FOR`."""
        it = self.stack[-1]
        assert isinstance(it, ListIteratorVariable)
        item = it.next_item(self)
        if item is not None:
            self.push(item)
            return
        self.pop()
        self.jump_to(inst.argval)
        for skipped in self.AFTER_FOR:
            if self.instructions[self.ip].opname == skipped:
                self.ip += 1


# -- emitting bytecode ---------------------------------------------------------------


def emit_call(cg: PyCodegen, nargs: int, kw_names: tuple[str, ...] = ()) -> None:
    """Call with ``[NULL, callable, *args]`` (or ``[callable, self, *args]``) on the stack."""
    if kw_names:
        cg.emit("KW_NAMES", kw_names)
    cg.emit("CALL", nargs)


def load_attr_arg(name: str) -> Any:
    """``LOAD_ATTR``'s argument for a plain attribute load (low bit: method)."""
    return (False, name)


def replay_arg(inst: Inst) -> Any:
    """The argument that re-emits ``inst`` unchanged with the ``bytecode`` library."""
    if inst.opname == "COMPARE_OP":
        return Compare(arg(inst) >> 4)
    if inst.opname == "LOAD_ATTR":
        return (bool(arg(inst) & 1), inst.argval)
    return None


def native_stack_effect(inst: Inst) -> int | None:
    """Stack effect of running ``inst`` natively where ``dis.stack_effect`` is
    wrong for how a split replays it; ``None``: use ``dis.stack_effect``."""
    if inst.opname == "LOAD_ATTR":
        return 1 if arg(inst) & 1 else 0
    return None


COND_JUMPS: dict[str, str] = {
    "POP_JUMP_IF_FALSE": "POP_JUMP_IF_FALSE",
    "POP_JUMP_IF_TRUE": "POP_JUMP_IF_TRUE",
}

# -- what any code object must respect on this version (``bytecode_verify``) --------------

NULL_AFTER_CALLABLE = previous.NULL_AFTER_CALLABLE
#: ``LOAD_FAST`` reads the local unchecked (a NULL crashes); the compiler emits
#: ``LOAD_FAST_CHECK`` where a local may be unbound.
UNCHECKED_LOAD_FAST = True
EXACT_BOOL_JUMPS = previous.EXACT_BOOL_JUMPS
COMPARE_TO_BOOL = previous.COMPARE_TO_BOOL
SET_FUNCTION_ATTRIBUTE = previous.SET_FUNCTION_ATTRIBUTE

# -- which opcodes are not traced, and why -------------------------------------------------

_REMOVED_IN_312 = ("ASYNC_GEN_WRAP", "IMPORT_STAR", "LOAD_CLASSDEREF", "PREP_RERAISE_STAR", "PRINT_EXPR")

GRAPH_BREAK_OPCODES: dict[str, str] = {
    **{k: v for k, v in previous.GRAPH_BREAK_OPCODES.items() if k not in _REMOVED_IN_312},
    "CLEANUP_THROW": "generators and coroutines are not traced",
    "CALL_INTRINSIC_2": "exception groups and type parameters are not traced",
    "LOAD_FROM_DICT_OR_DEREF": "module and class bodies are not captured (name-based variable access)",
    "LOAD_FROM_DICT_OR_GLOBALS": "module and class bodies are not captured (name-based variable access)",
    "LOAD_LOCALS": "module and class bodies are not captured (name-based variable access)",
    "INTERPRETER_EXIT": "an interpreter-internal opcode that never appears in user code",
    "RESERVED": "an interpreter-internal opcode that never appears in user code",
}

#: Pseudo opcodes: the compiler's own, replaced before a code object is made.
#: (``INSTRUMENTED_*`` opcodes are never seen either: ``dis`` shows the opcode
#: they instrument.)
NOT_TRACED: frozenset[str] = frozenset(
    {
        "JUMP_NO_INTERRUPT",
        "LOAD_METHOD",
        "LOAD_SUPER_METHOD",
        "LOAD_ZERO_SUPER_ATTR",
        "LOAD_ZERO_SUPER_METHOD",
        "POP_BLOCK",
        "SETUP_CLEANUP",
        "SETUP_FINALLY",
        "SETUP_WITH",
        "STORE_FAST_MAYBE_NULL",
    }
)

KNOWN_MISSING: frozenset[str] = frozenset()
