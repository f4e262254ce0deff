"""Assembling new code objects with the original's signature.

The ``bytecode`` library does the encoding (exception tables, line tables,
stack depth, 3.11/3.12 differences). The prologue CPython needs before the
first real instruction (``MAKE_CELL``, ``COPY_FREE_VARS``, ``RESUME``) is
kept from the original code.
"""

from __future__ import annotations

import types

from bytecode import Bytecode, Instr

PROLOGUE = frozenset({"MAKE_CELL", "COPY_FREE_VARS", "RESUME"})


def prologue(code: types.CodeType) -> list[Instr]:
    out: list[Instr] = []
    for ins in Bytecode.from_code(code):
        if isinstance(ins, Instr) and ins.name in PROLOGUE:
            out.append(ins)
            if ins.name == "RESUME":
                break
        elif isinstance(ins, Instr) and ins.name != "NOP":
            break
    return out


def assemble(code: types.CodeType, body: list[Instr], name: str | None = None) -> types.CodeType:
    """A code object with ``code``'s signature, cells and flags running ``body``."""
    orig = Bytecode.from_code(code)
    new = Bytecode(prologue(code) + list(body))
    new.argcount = orig.argcount
    new.posonlyargcount = orig.posonlyargcount
    new.kwonlyargcount = orig.kwonlyargcount
    new.flags = orig.flags
    new.name = name or orig.name
    new.qualname = orig.qualname if name is None else name
    new.filename = orig.filename
    new.first_lineno = orig.first_lineno
    new.argnames = list(orig.argnames)
    new.cellvars = list(orig.cellvars)
    new.freevars = list(orig.freevars)
    new.docstring = orig.docstring
    return new.to_code()
