"""Splitting a frame at an instruction the interpreter cannot trace.

The translator rolls back to the state before the failing instruction and
calls :func:`compile_break`. The code it produces: call the graph captured
so far, rebuild the value stack and the live locals from its outputs, replay
side effects, run the failing instruction itself, and hand the resulting
stack and locals to a resume function (``resume.py``) whose frame the
runtime captures afresh. A data-dependent branch gets one resume function
per side.
"""

from __future__ import annotations

import dis
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bytecode import Instr, Label
from bytecode.instr import CellVar

from .bytecode_transform import arg, assemble
from .bytecode_verify import verify
from .codegen import PyCodegen
from .errors import Unsupported
from .frame import CapturedGraph, CompilerFn, FrameHooks
from .frame_cache import has_hooks
from .frame_hook import run_uncaptured
from .hooked_call import HooksEagerForwardCompiled
from .instructions import (
    COND_JUMPS,
    EXACT_BOOL_JUMPS,
    NULL_AFTER_CALLABLE,
    native_stack_effect,
    replay_arg,
)
from .resume import live_locals, super_receiver
from .trace_rules import is_frame_disabled, is_torch_disabled
from .variables.base import VariableTracker
from .variables.constant import ConstantVariable
from .variables.functions import UserFunctionVariable, UserMethodVariable
from .variables.lists import ListIteratorVariable
from .variables.misc import BoundCallVariable, ControlFunctionVariable, NullVariable
from .variables.nn_module import NNModuleVariable, is_leaf_module
from .variables.objects import ObjectVariable
from .variables.torch import AutocastVariable, ContextMethodVariable, GradModeVariable

if TYPE_CHECKING:
    from .symbolic_convert import InstructionTranslator

# Instructions that may be replayed natively with the same argument.
REPLAYABLE = {
    "CALL", "CALL_FUNCTION_EX", "BINARY_SUBSCR", "STORE_SUBSCR", "DELETE_SUBSCR",
    "STORE_ATTR", "LOAD_ATTR", "LOAD_METHOD", "BINARY_OP", "COMPARE_OP", "CONTAINS_OP",
    "IS_OP", "UNARY_NOT", "UNARY_NEGATIVE", "UNARY_INVERT", "UNARY_POSITIVE",
    "FORMAT_VALUE", "BUILD_STRING", "GET_ITER", "UNPACK_SEQUENCE", "UNPACK_EX",
    "IMPORT_NAME", "IMPORT_FROM", "STORE_GLOBAL", "BINARY_SLICE", "STORE_SLICE",
    "CALL_KW", "CONVERT_VALUE", "FORMAT_SIMPLE", "FORMAT_WITH_SPEC", "TO_BOOL",
}


@dataclass
class BreakResult:
    code: Any
    graphs: list[CapturedGraph]


def check_breakable(tx: InstructionTranslator, inst: dis.Instruction) -> None:
    if inst.opname not in REPLAYABLE and inst.opname not in COND_JUMPS:
        raise Unsupported(f"graph break at {inst.opname} is not supported")
    if tx.exc_infos:
        raise Unsupported("graph break inside an `except` block")
    for v in tx.stack:
        if isinstance(v, (GradModeVariable, AutocastVariable)):
            raise Unsupported("graph break while a context manager is being entered")
        if isinstance(v, ContextMethodVariable) and not (
            isinstance(v.ctx, GradModeVariable) and v.name == "__exit__" and v.ctx.prior
        ):
            raise Unsupported(f"graph break inside a `with {v.ctx.describe()}` block")


def compile_break(
    tx: InstructionTranslator,
    inst: dis.Instruction,
    reason: Unsupported,
    compiler: CompilerFn,
    hooks: FrameHooks,
    fn_name: str,
) -> BreakResult:
    check_breakable(tx, inst)
    code = tx.code
    lineno = tx.lineno
    insts = tx.instructions
    idx = insts.index(inst)
    next_offset = insts[idx + 1].offset if idx + 1 < len(insts) else None

    if inst.opname in COND_JUMPS:
        targets = [o for o in (next_offset, inst.argval) if o is not None]
        stack_after = len(tx.stack) - 1
    else:
        if next_offset is None:
            raise Unsupported("graph break at the last instruction")
        targets = [next_offset]
        stack_after = len(tx.stack) + native_effect(inst)
    kept = len(tx.stack) - consumed(inst)
    if consumed(inst) == 0 and any(isinstance(v, NullVariable) for v in tx.stack):
        raise Unsupported(f"graph break at {inst.opname} in the middle of a call sequence")
    live = sorted(live_locals(code, targets) & set(tx.symbolic_locals))
    receiver = super_receiver(code)
    if receiver is not None and receiver in tx.symbolic_locals:
        # zero-argument super() reads the first local, which no instruction names
        live = [receiver, *(n for n in live if n != receiver)]
    else:
        receiver = None
    stack, call_args = rewrite_call(tx, inst, hooks)
    # iterators below what the instruction consumes travel as tuples
    iter_slots = tuple(
        i
        for i, v in enumerate(tx.stack[: max(min(kept, stack_after), 0)])
        if isinstance(v, ListIteratorVariable)
    )
    # NULLs of calls pending below the break (`f(a, g(b))` broken in `g`)
    # travel as None and are pushed back as NULL by the resume function
    null_slots = tuple(
        i for i, v in enumerate(stack[: max(min(kept, stack_after), 0)]) if isinstance(v, NullVariable)
    )
    if null_slots and any(isinstance(v, ContextMethodVariable) for v in tx.stack):
        # kept out for now: an internal error while capturing the resume function
        # would propagate with the block's grad mode still set (issue 14's fallback)
        raise Unsupported(f"graph break at {inst.opname} inside a pending call within a `with` block")

    # Objects made while tracing (lists, dicts, instances) are rebuilt once
    # however many slots, locals and containers hold them (``reconstruct_once``).
    cg = PyCodegen(code.co_cellvars, code.co_freevars, lineno, code)
    for i, v in enumerate(stack):
        if i in null_slots:
            cg.load_const(None)
        elif isinstance(v, NullVariable):
            cg.push_null()
        elif i in iter_slots:
            v.reconstruct_items(cg)  # type: ignore[attr-defined]
        else:
            v.reconstruct(cg)
    for name in live:
        tx.symbolic_locals[name].reconstruct(cg)
    # cells of this frame hold what tracing stored in them; write it to the
    # real cells, which the resume function (and inner functions) share
    cells = [n for n in code.co_cellvars if n in tx.cells and tx.cells[n].value is not None]
    for name in cells:
        value = tx.cells[name].value
        assert value is not None
        value.reconstruct(cg)
    tx.output.side_effects.codegen(cg)
    for name in reversed(cells):
        cg.emit("STORE_DEREF", CellVar(name))
    for name in reversed(live):
        cg.store_local(name)

    def call_resume(offset: int) -> None:
        orig, orig_offset = hooks.resume_codes.origin_of(code, offset)
        rcode, rname = hooks.resume_codes.resume_code(
            orig, orig_offset, stack_after, tuple(live), iter_slots, null_slots
        )
        verify(rcode)
        # (re)installed on every split: the wrapper belongs to the runtime
        # (backend, cache table) that is capturing now
        cg.emit("BUILD_TUPLE", stack_after)
        if receiver is not None:  # the resume function takes it first: (receiver, *stack, *rest)
            cg.load_local(receiver)
            cg.emit("BUILD_TUPLE", 1)
            cg.emit("SWAP", 2)
            cg.emit("BINARY_OP", 0)
        if code.co_freevars or code.co_cellvars:
            # A closure: the resume function shares this frame's cells, so
            # it is made (and handed to the runtime) on each call.
            cg.before_callable()  # of the resume function's own call
            cg.before_callable()
            cg.load_const(hooks.wrap_function)
            cg.after_callable()
            for name in code.co_freevars + code.co_cellvars:
                cg.load_closure(name)
            cg.emit("BUILD_TUPLE", len(code.co_freevars) + len(code.co_cellvars))
            cg.load_const(rcode)
            cg.make_function(0x08)
            cg.call(1)
            cg.after_callable()
        else:
            fn = types.FunctionType(rcode, tx.f_globals, rname)
            tx.f_globals[rname] = hooks.wrap_function(fn)
            cg.load_global(rname, push_null=True)
        cg.emit("SWAP", 2)
        cg.emit("SWAP", 3)
        rest = live[1:] if receiver is not None else live
        for name in rest:
            cg.load_local(name)
        cg.emit("BUILD_TUPLE", len(rest))
        cg.emit("BINARY_OP", 0)
        cg.emit("CALL_FUNCTION_EX", 0)
        cg.return_value()

    cg.lineno = lineno
    if inst.opname in COND_JUMPS:
        taken = Label()
        if EXACT_BOOL_JUMPS:
            cg.emit("TO_BOOL")  # the traced TO_BOOL left the value as it was
        cg.instrs.append(Instr(COND_JUMPS[inst.opname], taken, lineno=lineno))
        call_resume(targets[0])
        cg.instrs.append(taken)  # type: ignore[arg-type]
        call_resume(inst.argval)
    else:
        replay(cg, tx, inst, call_args)
        call_resume(targets[0])

    head, graphs = tx.output.call_graph(code, cg, compiler, fn_name)
    new_code = assemble(code, head + cg.instrs)
    verify(new_code)
    return BreakResult(new_code, graphs)


#: Opcodes whose ``bytecode`` library argument is the raw integer.
INT_ARG_OPS = frozenset(
    {"BINARY_OP", "BUILD_SET", "UNPACK_SEQUENCE", "UNPACK_EX", "BUILD_STRING", "FORMAT_VALUE",
     "CALL_FUNCTION_EX", "IS_OP", "CONTAINS_OP"}
)

CONSUMES = {
    "BINARY_SUBSCR": 2, "BINARY_OP": 2, "COMPARE_OP": 2, "IS_OP": 2, "CONTAINS_OP": 2,
    "STORE_SUBSCR": 3, "DELETE_SUBSCR": 2, "STORE_ATTR": 2, "LOAD_ATTR": 1, "LOAD_METHOD": 1,
    "UNARY_NOT": 1, "UNARY_NEGATIVE": 1, "UNARY_INVERT": 1, "UNARY_POSITIVE": 1,
    "GET_ITER": 1, "UNPACK_SEQUENCE": 1, "UNPACK_EX": 1, "IMPORT_NAME": 2, "STORE_GLOBAL": 1,
    "BINARY_SLICE": 3, "STORE_SLICE": 4,
    "CONVERT_VALUE": 1, "FORMAT_SIMPLE": 1, "FORMAT_WITH_SPEC": 2, "TO_BOOL": 1,
}


def consumed(inst: dis.Instruction) -> int:
    """Stack entries the instruction pops (0 when unsure: check everything)."""
    if inst.opname == "CALL":
        return arg(inst) + 2
    if inst.opname == "CALL_KW":
        return arg(inst) + 3
    if inst.opname == "CALL_FUNCTION_EX":
        return 4 if arg(inst) & 1 else 3
    if inst.opname in COND_JUMPS:
        return 1
    if inst.opname in ("BUILD_STRING", "BUILD_SET"):
        return arg(inst)
    if inst.opname == "FORMAT_VALUE":
        return 2 if arg(inst) & 0x04 else 1
    return CONSUMES.get(inst.opname, 0)


def native_effect(inst: dis.Instruction) -> int:
    effect = native_stack_effect(inst)
    if effect is not None:
        return effect
    return dis.stack_effect(inst.opcode, arg(inst) if inst.opcode >= dis.HAVE_ARGUMENT else None, jump=False)


def rewrite_call(
    tx: InstructionTranslator, inst: dis.Instruction, hooks: FrameHooks
) -> tuple[list[VariableTracker], int]:
    """For a break at a call into user code, call the callee through the
    runtime (``hooks.wrap_function``) so its own frame is captured; returns
    the stack to rebuild and the call's argument count."""
    stack = list(tx.stack)
    if inst.opname == "CALL_FUNCTION_EX":
        # f(*args, **kwargs): [NULL, f, args(, kwargs)] on 3.11 and 3.12,
        # [f, NULL, args(, kwargs)] on 3.13
        n_in = 3 if (arg(inst) or 0) & 1 else 2  # the slots above NULL and f together
        at, null_at = (-n_in - 1, -n_in) if NULL_AFTER_CALLABLE else (-n_in, -n_in - 1)
        if len(stack) < n_in + 1 or not isinstance(stack[null_at], NullVariable):
            return stack, arg(inst) or 0
        target = callee_function(tx, stack[at])
        if target is None or target[1] is not None:
            return stack, arg(inst) or 0
        stack[at] = CalleeThroughRuntime(stack[at], hooks.wrap_function)
        return stack, arg(inst) or 0
    if inst.opname not in ("CALL", "CALL_KW"):
        return stack, arg(inst) or 0
    n = arg(inst)
    # the arguments, and on 3.13 CALL_KW's tuple of keyword names after them
    n_top = n + (1 if inst.opname == "CALL_KW" else 0)
    first, second = stack[-n_top - 2], stack[-n_top - 1]
    null, callee = (second, first) if NULL_AFTER_CALLABLE else (first, second)
    if not isinstance(null, NullVariable):
        return stack, n
    head = stack[: -n_top - 2]
    args = stack[len(stack) - n_top :]

    def call_pair(wrapped: VariableTracker) -> list[VariableTracker]:
        return [wrapped, null] if NULL_AFTER_CALLABLE else [null, wrapped]

    target = callee_function(tx, callee)
    if target is None:
        # the callee's slot, not the slot below the arguments (on 3.13 that is the NULL)
        value = callee.value if isinstance(callee, ControlFunctionVariable) else None
        if callable(value) and is_frame_disabled(value):
            return [*head, *call_pair(ConstantVariable(hooks.run_hooked(value))), *args], n
        if callable(value) and is_torch_disabled(value):
            # its wrapper switches TorchDynamo off, not ember's hook: run it with that off
            return [*head, *call_pair(ConstantVariable(run_uncaptured(value))), *args], n
        return stack, n
    fn, bound_self = target

    if bound_self is None:
        return [*head, *call_pair(CalleeThroughRuntime(callee, hooks.wrap_function)), *args], n
    # a function read from the object's class, which its guards pin
    compiled: Any = hooks.wrap_function(fn)
    if isinstance(bound_self, NNModuleVariable) and has_hooks(bound_self.value):
        # the hooks run eagerly by Module.__call__, the forward through the runtime
        compiled = HooksEagerForwardCompiled(compiled)
    return [*head, *call_pair(ConstantVariable(compiled)), bound_self, *args], n + 1


class CalleeThroughRuntime(VariableTracker):
    """A plain function called at a break, handed to the runtime when the call
    runs (``wrap_function(f)``): the function is read afresh on each call, since
    its guards pin only its code, not its cells or defaults (a closure made per
    call)."""

    def __init__(self, fn: VariableTracker, wrap: Callable[[types.FunctionType], Any]) -> None:
        super().__init__(None)
        self.fn = fn
        self.wrap = wrap

    def reconstruct(self, cg: PyCodegen) -> None:
        cg.before_callable()
        cg.load_const(self.wrap)
        cg.after_callable()
        self.fn.reconstruct(cg)
        cg.call(1)


def callee_function(
    tx: InstructionTranslator, callee: VariableTracker
) -> tuple[types.FunctionType, VariableTracker | None] | None:
    """The Python function a call at a break runs, and the object it is bound
    to: called through the runtime, its frame is captured afresh (and split
    where it breaks) instead of running eagerly. Functions, methods of objects
    and modules (``obj.m(x)``, a submodule's ``forward`` through its
    ``__call__``, decorated forwards), ``__call__`` of user objects; the bound
    object is rebuilt like any other stack value, so it needs a source or must
    have been made in the frame."""
    if isinstance(callee, BoundCallVariable):
        if not isinstance(callee.obj, (NNModuleVariable, ObjectVariable)):
            return None
        try:
            callee = callee.obj.var_getattr(tx, callee.name)
        except Unsupported:
            return None
    if isinstance(callee, UserFunctionVariable):
        return (callee.fn, None) if callee.source is not None else None
    if isinstance(callee, UserMethodVariable) and isinstance(callee.fn, UserFunctionVariable):
        fn = callee.fn.fn
        if rebuildable(callee.obj) and not fn.__module__.startswith("torch."):
            return fn, callee.obj
        return None
    if isinstance(callee, NNModuleVariable) and rebuildable(callee):
        m = callee.value
        if is_leaf_module(m, tx.options.inline_inbuilt_nn_modules):
            return None  # torch.nn's own forward: nothing of ours to capture
        if has_hooks(m) and "forward" in m.__dict__:
            return None  # its own forward attribute, which the call would replace
        fwd = type(m).forward
        return (fwd, callee) if isinstance(fwd, types.FunctionType) else None
    if isinstance(callee, ObjectVariable) and rebuildable(callee):
        call = inspect.getattr_static(callee.cls, "__call__", None)
        return (call, callee) if isinstance(call, types.FunctionType) else None
    return None


def rebuildable(v: VariableTracker) -> bool:
    return v.source is not None or bool(getattr(v, "fresh", False))


def replay(
    cg: PyCodegen, tx: InstructionTranslator, inst: dis.Instruction, call_args: int
) -> None:
    """Emit the failing instruction itself (a call with its keyword names)."""
    if inst.opname == "CALL":
        cg.call(call_args, tuple(tx.kw_names))
        return
    if inst.opname == "CALL_KW":  # 3.13: the names are on the stack already
        cg.emit("CALL_KW", call_args)
        return
    if inst.opname == "UNARY_NOT" and EXACT_BOOL_JUMPS:
        cg.emit("TO_BOOL")  # the traced TO_BOOL left the value as it was
    value: Any = inst.argval
    if inst.opname in INT_ARG_OPS:
        value = arg(inst)
    spelled = replay_arg(inst)
    if spelled is not None:
        value = spelled
    if inst.opcode < dis.HAVE_ARGUMENT:
        cg.emit(inst.opname)
    else:
        cg.emit(inst.opname, value)
