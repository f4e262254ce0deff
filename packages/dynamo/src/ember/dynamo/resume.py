"""Resume functions: the rest of a frame after a graph break.

``__resume_at_<offset>_<n>(___stack0, ..., live locals...)`` is a copy of
the original code that pushes the saved stack values and jumps to
``offset``. Where the code can call zero-argument ``super()``, which reads
the frame's first local, that local (``self``) comes first, before the stack
values (:func:`super_receiver`). Its own frame is captured afresh by the runtime. Resume code is
always made from the *original* code (a break inside a resume function maps
back through :func:`origin_of`), and cached per (code, offset, stack depth,
arguments), so a loop that breaks on every iteration reuses one resume
function and one cache entry (:class:`ResumeCodes`, one per runtime).
"""

from __future__ import annotations

import dis
import itertools
import types
from dataclasses import dataclass
from typing import Any

from bytecode import Bytecode, CompilerFlags, Instr, Label
from bytecode.instr import CellVar, FreeVar, TryBegin

from .bytecode_transform import to_code
from .errors import Unsupported

#: Numbers resume functions' global names. Process-wide on purpose: two
#: runtimes splitting functions of one module must never install their resume
#: functions under the same name in that module's globals.
_ids = itertools.count(1)

#: Prefix of the globals resume functions are installed under.
RESUME_PREFIX = "__resume_at_"


def resume_name(offset: int) -> str:
    """A fresh global name for a resume function continuing at ``offset``."""
    return f"{RESUME_PREFIX}{offset}_{next(_ids)}"


@dataclass(frozen=True)
class ResumeInfo:
    origin: types.CodeType
    #: dis-instruction index in the resume code minus this = index in origin
    shift: int
    name: str


ResumeKey = tuple[types.CodeType, int, int, tuple[str, ...]]


class ResumeCodes:
    """One runtime's resume functions: made once per (code, offset, stack depth,
    arguments) and reused, and where each came from. Owned by the runtime's
    cache table, so ``ember.dynamo.reset()`` drops them with the cache."""

    def __init__(self) -> None:
        self.origins: dict[types.CodeType, ResumeInfo] = {}
        self.codes: dict[ResumeKey, tuple[types.CodeType, str]] = {}

    def clear(self) -> None:
        self.origins.clear()
        self.codes.clear()

    def origin_of(self, code: types.CodeType, offset: int) -> tuple[types.CodeType, int]:
        """The original code and offset behind ``offset`` in ``code``."""
        info = self.origins.get(code)
        if info is None:
            return code, offset
        insts = real_instructions(code)
        index = next(i for i, inst in enumerate(insts) if inst.offset == offset)
        orig = real_instructions(info.origin)
        return info.origin, orig[index - info.shift].offset

    def resume_code(
        self,
        orig: types.CodeType,
        offset: int,
        nstack: int,
        argnames: tuple[str, ...],
        iter_slots: tuple[int, ...] = (),
        null_slots: tuple[int, ...] = (),
    ) -> tuple[types.CodeType, str]:
        """:func:`resume_code`, made once per key."""
        marks = tuple(f"#iter{i}" for i in iter_slots) + tuple(f"#null{i}" for i in null_slots)
        key = (orig, offset, nstack, argnames + marks)
        hit = self.codes.get(key)
        if hit is not None:
            return hit
        code, name, info = resume_code(orig, offset, nstack, argnames, iter_slots, null_slots)
        self.origins[code] = info
        self.codes[key] = (code, name)
        return code, name


def super_receiver(code: types.CodeType) -> str | None:
    """The local zero-argument ``super()`` reads in ``code`` (its first local, named by no
    instruction), where ``code`` can call it (it has the ``__class__`` cell); a resume
    function of such code takes that local as its first parameter, before the stack."""
    if "__class__" in code.co_freevars and code.co_argcount > 0:
        return code.co_varnames[0]
    return None


def real_instructions(code: types.CodeType) -> list[dis.Instruction]:
    return [i for i in dis.get_instructions(code) if i.opname not in ("EXTENDED_ARG", "CACHE")]


def resume_code(
    orig: types.CodeType,
    offset: int,
    nstack: int,
    argnames: tuple[str, ...],
    iter_slots: tuple[int, ...] = (),
    null_slots: tuple[int, ...] = (),
) -> tuple[types.CodeType, str, ResumeInfo]:
    """Code (and its global name) resuming ``orig`` at ``offset`` with
    ``nstack`` stack values followed by the locals ``argnames``. Stack slots
    in ``iter_slots`` arrive as tuples and are turned back into iterators
    (a ``for`` loop's remaining items); slots in ``null_slots`` are the NULLs
    of calls pending below the break (``f(a, g(b))`` broken inside ``g``):
    they arrive as ``None`` and are pushed back as NULL."""
    bc = Bytecode.from_code(orig)
    dis_insts = real_instructions(orig)
    target_index = next(i for i, inst in enumerate(dis_insts) if inst.offset == offset)
    label = Label()
    body: list[Any] = []
    seen = 0
    skipped = 0  # the original's prologue (MAKE_CELL, COPY_FREE_VARS, RESUME)
    in_prologue = True
    for item in bc:
        if isinstance(item, Instr):
            if seen == target_index:
                body.append(label)
            if dis_insts[seen].opname != item.name:
                raise Unsupported(f"cannot map bytecode of `{orig.co_name}` for a resume function")
            seen += 1
            if in_prologue and item.name in ("MAKE_CELL", "COPY_FREE_VARS", "RESUME"):
                skipped += 1
                in_prologue = item.name != "RESUME"
                continue
            in_prologue = False
            if isinstance(item.arg, CellVar):
                # the frame's cells arrive as part of the resume function's closure
                item = Instr(item.name, FreeVar(item.arg.name), location=item.location)
            elif (
                item.name == "LOAD_FAST"
                and isinstance(item.arg, str)
                and item.arg in orig.co_cellvars
            ):
                # 3.13's LOAD_CLOSURE of a cell that is also an argument
                item = Instr(item.name, FreeVar(item.arg), location=item.location)
        body.append(item)
    closure_names = list(orig.co_freevars) + list(orig.co_cellvars)
    stack_names = tuple(f"___stack{i}" for i in range(nstack))
    line = dis_insts[target_index].positions
    lineno = line.lineno if line is not None and line.lineno is not None else orig.co_firstlineno
    prefix: list[Any] = []
    if closure_names:
        prefix.append(Instr("COPY_FREE_VARS", len(closure_names), lineno=lineno))
    prefix.append(Instr("RESUME", 0, lineno=lineno))
    for i, n in enumerate(stack_names):
        if i in null_slots:
            prefix.append(Instr("PUSH_NULL", lineno=lineno))
            continue
        prefix.append(Instr("LOAD_FAST", n, lineno=lineno))
        if i in iter_slots:
            prefix.append(Instr("GET_ITER", lineno=lineno))
    prefix.append(Instr("JUMP_FORWARD", label, lineno=lineno))
    name = resume_name(offset)
    new = Bytecode(prefix + body)
    new.argcount = len(stack_names) + len(argnames)
    new.posonlyargcount = 0
    new.kwonlyargcount = 0
    new.flags = CompilerFlags(orig.co_flags & ~(0x04 | 0x08))
    # Named like the user's function, so tracebacks and break messages from
    # the resumed part name it (the global it is installed under is `name`).
    new.name = orig.co_name
    new.qualname = orig.co_qualname
    new.filename = orig.co_filename
    new.first_lineno = orig.co_firstlineno
    lead = argnames[:1] if argnames and argnames[0] == super_receiver(orig) else ()
    new.argnames = list(lead + stack_names + argnames[len(lead):])
    new.freevars = closure_names
    # The stack inside the resumed code is the original's at the same point,
    # so the original's stack size and handler depths still hold; taking
    # them from the original's exception table avoids re-deriving them
    # through the jump into the middle of a `try`/`with` region.
    known = exact_handler_depths(orig, bc)
    try:
        code = to_code(
            new, stacksize=orig.co_stacksize + 1, compute_exception_stack_depths=not known
        )
    except Exception as e:  # the bytecode library rejected the layout
        raise Unsupported(f"cannot build a resume function for `{orig.co_name}`: {e}") from e
    return code, name, ResumeInfo(orig, len(prefix) - skipped, name)


def exact_handler_depths(orig: types.CodeType, bc: Bytecode) -> bool:
    """Copy each exception-table entry's depth onto its ``TryBegin``."""
    entries = sorted(
        getattr(dis.Bytecode(orig), "exception_entries", []), key=lambda e: (e.start, e.end)
    )
    begins = [i for i in bc if isinstance(i, TryBegin)]
    if len(begins) != len(entries):
        return False
    for tb, entry in zip(begins, entries, strict=True):
        tb.stack_depth = entry.depth
        tb.push_lasti = entry.lasti
    return True


READS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "DELETE_FAST"})


def local_access(inst: dis.Instruction) -> tuple[set[str], set[str]]:
    """The fast locals ``inst`` reads (before it writes any) and writes. The
    3.13 superinstructions name two locals (``argval`` is a pair)."""
    name = inst.opname
    if name in READS:
        return {inst.argval}, set()
    if name == "STORE_FAST":
        return set(), {inst.argval}
    if name == "LOAD_FAST_LOAD_FAST":
        return set(inst.argval), set()
    if name == "STORE_FAST_STORE_FAST":
        return set(), set(inst.argval)
    if name == "STORE_FAST_LOAD_FAST":  # stores the first, then loads the second
        stored, loaded = inst.argval
        return ({loaded} if loaded != stored else set()), {stored}
    return set(), set()


def live_locals(code: types.CodeType, offsets: list[int]) -> set[str]:
    """Locals that may be read, before being written, from any of ``offsets``."""
    insts = real_instructions(code)
    index = {inst.offset: i for i, inst in enumerate(insts)}
    handlers: list[tuple[int, int, int]] = []
    try:
        for e in dis.Bytecode(code).exception_entries:  # type: ignore[attr-defined]
            handlers.append((e.start, e.end, e.target))
    except AttributeError:
        pass
    terminal = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"}
    jumps_uncond = {"JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP"}

    def successors(i: int) -> list[int]:
        inst = insts[i]
        out: list[int] = []
        if inst.opname not in terminal and inst.opname not in jumps_uncond and i + 1 < len(insts):
            out.append(i + 1)
        is_jump = inst.opcode in dis.hasjrel or inst.opcode in dis.hasjabs
        if is_jump and inst.argval in index:
            out.append(index[inst.argval])
        for start, end, target in handlers:
            if start <= inst.offset < end and target in index:
                out.append(index[target])
        return out

    uses: list[set[str]] = []
    defs: list[set[str]] = []
    for inst in insts:
        read, written = local_access(inst)
        uses.append(read)
        defs.append(written)
    succ = [successors(i) for i in range(len(insts))]
    live_in: list[set[str]] = [set() for _ in insts]
    changed = True
    while changed:
        changed = False
        for i in reversed(range(len(insts))):
            out: set[str] = set()
            for j in succ[i]:
                out |= live_in[j]
            new = uses[i] | (out - defs[i])
            if new != live_in[i]:
                live_in[i] = new
                changed = True
    result: set[str] = set()
    for off in offsets:
        result |= live_in[index[off]]
    return result
