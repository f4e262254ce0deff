"""CPython 3.11: its opcode handlers, how generated code spells calls and
attribute loads, and which of its opcodes are deliberate graph breaks.

Every version module has the same parts (``instructions`` picks the running
one): ``VersionInstructions`` (handlers mixed over ``CommonInstructions``),
the emission functions ``emit_call`` / ``load_attr_arg`` / ``replay_arg`` /
``native_stack_effect``, ``COND_JUMPS``, ``GRAPH_BREAK_OPCODES`` (opcode ->
why it is a break), ``NOT_TRACED`` (opcodes ``dis`` never shows in a code
object: pseudo and instrumented ones) and ``KNOWN_MISSING`` (opcodes still
without a handler; ``tests/test_opcodes.py`` lists them). Adding an opcode:
write its handler here (or in ``instructions_common`` if its meaning is the
same on every version) and take it off ``KNOWN_MISSING``.
"""

from __future__ import annotations

import dis
from typing import TYPE_CHECKING, Any

from bytecode import Compare

from .bytecode_transform import arg
from .variables.constant import ConstantVariable
from .variables.lists import ListIteratorVariable
from .variables.misc import BoundCallVariable, NullVariable

if TYPE_CHECKING:
    from .codegen import PyCodegen
    from .instructions_common import CommonInstructions as Handlers
else:
    Handlers = object

Inst = dis.Instruction


class VersionInstructions(Handlers):
    """Handlers whose meaning is specific to 3.11 (mixed in before ``CommonInstructions``)."""

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

    def SEND(self, inst: Inst) -> None:
        """``yield from``'s step: the next item, or (exhausted) the
        sub-iterator's return value in its place and a jump past the loop."""
        self.pop()  # the value sent in: None (generators are run, not driven)
        it = self.stack[-1]
        assert isinstance(it, ListIteratorVariable)
        item = it.next_item(self)
        if item is None:
            self.pop()
            self.push(it.returned or ConstantVariable(None))
            self.jump_to(inst.argval)
        else:
            self.push(item)

    def FOR_ITER(self, inst: Inst) -> None:
        it = self.stack[-1]
        assert isinstance(it, ListIteratorVariable)
        item = it.next_item(self)
        if item is None:
            self.pop()
            self.jump_to(inst.argval)
        else:
            self.push(item)


# -- emitting bytecode ---------------------------------------------------------------


def emit_call(cg: PyCodegen, nargs: int, kw_names: tuple[str, ...] = ()) -> None:
    """Call with ``[NULL, callable, *args]`` (or ``[callable, self, *args]``) on the stack."""
    if kw_names:
        cg.emit("KW_NAMES", kw_names)
    cg.emit("PRECALL", nargs)
    cg.emit("CALL", nargs)


def load_attr_arg(name: str) -> Any:
    """``LOAD_ATTR``'s argument for a plain attribute load."""
    return name


def replay_arg(inst: Inst) -> Any:
    """The argument that re-emits ``inst`` unchanged with the ``bytecode`` library."""
    if inst.opname == "COMPARE_OP":
        return Compare(arg(inst))
    return None


def native_stack_effect(inst: Inst) -> int | None:
    """Stack effect of running ``inst`` natively where ``dis.stack_effect`` is
    wrong for how a split replays it; ``None``: use ``dis.stack_effect``."""
    if inst.opname == "CALL":
        return -(arg(inst) + 1)
    if inst.opname == "LOAD_METHOD":
        return 1
    return None


#: Conditional jumps, and the name that jumps *forward* the same way (a split
#: frame re-emits the test and jumps to code placed after it).
COND_JUMPS: dict[str, str] = {
    "POP_JUMP_FORWARD_IF_FALSE": "POP_JUMP_FORWARD_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_FALSE": "POP_JUMP_FORWARD_IF_FALSE",
    "POP_JUMP_FORWARD_IF_TRUE": "POP_JUMP_FORWARD_IF_TRUE",
    "POP_JUMP_BACKWARD_IF_TRUE": "POP_JUMP_FORWARD_IF_TRUE",
}

# -- what any code object must respect on this version (``bytecode_verify``) --------------

#: ``CALL`` takes ``[NULL or callable, callable or self, args...]``: the NULL a
#: ``LOAD_GLOBAL``/``LOAD_ATTR`` pushes for a call goes *below* the callable.
NULL_AFTER_CALLABLE = False
#: ``LOAD_FAST`` itself checks that the local is bound.
UNCHECKED_LOAD_FAST = False
#: Conditional jumps and ``UNARY_NOT`` take any object (they call ``bool()``).
EXACT_BOOL_JUMPS = False
#: The ``COMPARE_OP`` argument bit that makes its result an exact bool (0: none).
COMPARE_TO_BOOL = 0
#: ``MAKE_FUNCTION`` takes no flags; ``SET_FUNCTION_ATTRIBUTE`` sets each attribute.
SET_FUNCTION_ATTRIBUTE = False

# -- which opcodes are not traced, and why -------------------------------------------------

_GENERATORS = "generators and coroutines are not traced"
_HANDLERS = "exception handlers are not traced (tracing follows the path where nothing is raised)"
_NAMES = "module and class bodies are not captured (name-based variable access)"
_MATCH = "`match` statements are not traced"

#: Opcodes that are a graph break on purpose, with the reason given to the user.
GRAPH_BREAK_OPCODES: dict[str, str] = {
    "ASYNC_GEN_WRAP": _GENERATORS,
    "BEFORE_ASYNC_WITH": _GENERATORS,
    "END_ASYNC_FOR": _GENERATORS,
    "GET_AITER": _GENERATORS,
    "GET_ANEXT": _GENERATORS,
    "GET_AWAITABLE": _GENERATORS,
    "CHECK_EG_MATCH": _HANDLERS,
    "PREP_RERAISE_STAR": _HANDLERS,
    "WITH_EXCEPT_START": _HANDLERS,
    "DELETE_NAME": _NAMES,
    "IMPORT_STAR": _NAMES,
    "LOAD_CLASSDEREF": _NAMES,
    "LOAD_NAME": _NAMES,
    "PRINT_EXPR": _NAMES,
    "SETUP_ANNOTATIONS": _NAMES,
    "STORE_NAME": _NAMES,
    "GET_LEN": _MATCH,
    "MATCH_CLASS": _MATCH,
    "MATCH_KEYS": _MATCH,
    "MATCH_MAPPING": _MATCH,
    "MATCH_SEQUENCE": _MATCH,
    "DELETE_DEREF": "`del` of a closure variable inside a compiled region",
    "DELETE_GLOBAL": "`del` of a global inside a compiled region",
}

#: Opcodes ``dis.get_instructions`` never yields for a code object (inline
#: caches are skipped), so the translator never meets them.
NOT_TRACED: frozenset[str] = frozenset()

#: Opcodes of this version with neither a handler nor a deliberate break.
KNOWN_MISSING: frozenset[str] = frozenset()
