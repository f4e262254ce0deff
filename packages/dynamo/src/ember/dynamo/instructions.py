"""The running interpreter's opcode module (``instructions_3xx``), chosen once.

Everything that differs between CPython versions goes through the names
re-exported here; nothing else in ember.dynamo reads ``sys.version_info``.
"""

from __future__ import annotations

import sys

#: Why capture refuses to run on this interpreter (``None``: it is supported).
#: A newer CPython changes the bytecode again; its frames run eagerly, with
#: this reason logged, until it has its own ``instructions_3xx``.
UNSUPPORTED_PYTHON: str | None = None
if sys.implementation.name != "cpython" or not (3, 11) <= sys.version_info[:2] <= (3, 13):
    UNSUPPORTED_PYTHON = (
        f"ember.dynamo reads the bytecode of CPython 3.11 to 3.13; this is "
        f"{sys.implementation.name} {sys.version.split()[0]}"
    )

if sys.version_info >= (3, 13):
    from . import instructions_313 as running
elif sys.version_info >= (3, 12):
    from . import instructions_312 as running
else:
    from . import instructions_311 as running

VersionInstructions = running.VersionInstructions
emit_call = running.emit_call
load_attr_arg = running.load_attr_arg
replay_arg = running.replay_arg
native_stack_effect = running.native_stack_effect
COND_JUMPS = running.COND_JUMPS
GRAPH_BREAK_OPCODES = running.GRAPH_BREAK_OPCODES
NULL_AFTER_CALLABLE = running.NULL_AFTER_CALLABLE
UNCHECKED_LOAD_FAST = running.UNCHECKED_LOAD_FAST
EXACT_BOOL_JUMPS = running.EXACT_BOOL_JUMPS
COMPARE_TO_BOOL = running.COMPARE_TO_BOOL
SET_FUNCTION_ATTRIBUTE = running.SET_FUNCTION_ATTRIBUTE

__all__ = [
    "UNSUPPORTED_PYTHON",
    "COMPARE_TO_BOOL",
    "COND_JUMPS",
    "EXACT_BOOL_JUMPS",
    "GRAPH_BREAK_OPCODES",
    "NULL_AFTER_CALLABLE",
    "SET_FUNCTION_ATTRIBUTE",
    "UNCHECKED_LOAD_FAST",
    "VersionInstructions",
    "emit_call",
    "load_attr_arg",
    "native_stack_effect",
    "replay_arg",
    "running",
]
