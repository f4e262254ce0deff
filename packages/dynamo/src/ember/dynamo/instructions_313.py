"""CPython 3.13: its opcode handlers, emission spellings and deliberate breaks.

Starts from 3.12 (``instructions_312``). 3.13 replaced ``KW_NAMES`` with
``CALL_KW``, ``FORMAT_VALUE`` with ``CONVERT_VALUE`` / ``FORMAT_SIMPLE`` /
``FORMAT_WITH_SPEC``, moved function attributes out of ``MAKE_FUNCTION``
into ``SET_FUNCTION_ATTRIBUTE``, added ``TO_BOOL`` before conditional jumps
and the superinstructions ``LOAD_FAST_LOAD_FAST`` / ``STORE_FAST_LOAD_FAST``
/ ``STORE_FAST_STORE_FAST``, and made ``LOAD_CLOSURE`` a pseudo opcode. The
opcodes still without a handler are listed in :data:`KNOWN_MISSING` (and
reported by ``tests/test_opcodes.py``); handlers inherited from 3.12 whose
stack layout changed in 3.13 (``CALL``, ``MAKE_FUNCTION``, ``LOAD_GLOBAL``,
``LOAD_ATTR``) need their 3.13 versions here too. The parts of this module
are described in ``instructions_311``.
"""

from __future__ import annotations

from . import instructions_312 as previous

emit_call = previous.emit_call
load_attr_arg = previous.load_attr_arg
replay_arg = previous.replay_arg
native_stack_effect = previous.native_stack_effect
COND_JUMPS = previous.COND_JUMPS

#: ``CALL`` takes ``[callable, self or NULL, args...]``: the NULL goes *after*
#: the callable (``LOAD_GLOBAL``/``LOAD_ATTR`` with the low bit push it there).
NULL_AFTER_CALLABLE = True
UNCHECKED_LOAD_FAST = previous.UNCHECKED_LOAD_FAST
#: ``POP_JUMP_IF_TRUE/FALSE`` and ``UNARY_NOT`` want an exact bool (a release
#: build does not check: any other object reads as false), so the compiler
#: puts ``TO_BOOL`` (or a ``COMPARE_OP`` with this bit) before them.
EXACT_BOOL_JUMPS = True
COMPARE_TO_BOOL = 16


class VersionInstructions(previous.VersionInstructions):
    """Handlers whose meaning is specific to 3.13 (mixed in before ``CommonInstructions``)."""


GRAPH_BREAK_OPCODES: dict[str, str] = {
    **previous.GRAPH_BREAK_OPCODES,
    "ENTER_EXECUTOR": "an interpreter-internal opcode that never appears in user code",
}

NOT_TRACED: frozenset[str] = previous.NOT_TRACED

KNOWN_MISSING: frozenset[str] = frozenset(
    {
        "CALL_KW",
        "CONVERT_VALUE",
        "EXIT_INIT_CHECK",
        "FORMAT_SIMPLE",
        "FORMAT_WITH_SPEC",
        "LOAD_FAST_LOAD_FAST",
        "SET_FUNCTION_ATTRIBUTE",
        "STORE_FAST_LOAD_FAST",
        "STORE_FAST_STORE_FAST",
        "TO_BOOL",
    }
)
