"""The symbolic bytecode interpreter.

``InstructionTranslator`` runs a frame's bytecode over trackers instead of
values: one UPPER_CASE method per opcode (in the ``instructions_*`` mixins),
dispatched by ``inst.opname``. Tensor work is recorded in the
``OutputGraph``; Python work is folded. User function calls are inlined by
``InliningInstructionTranslator`` (a child interpreter over the callee's
code sharing the parent's graph). Per-version opcode differences live in
``instructions_3xx`` (the running one chosen by ``instructions``), the
handlers every version shares in ``instructions_common``, the frame state
and value semantics in ``translator_core``.
"""

from __future__ import annotations

import dis
import inspect
import types
from typing import Any

from ember.ir import Attr, Item, Source

from .config import DynamoOptions
from .errors import Unsupported, UserRaised
from .instructions import VersionInstructions
from .instructions_common import CommonInstructions
from .output_graph import OutputGraph
from .rollback import checkpoint, restore
from .translator_core import ReturnSignal, TranslatorCore
from .variables.base import VariableTracker
from .variables.constant import ConstantVariable
from .variables.functions import BaseFunctionVariable, CellVariable
from .variables.lists import ListIteratorVariable

__all__ = [
    "BreakSignal",
    "InliningInstructionTranslator",
    "InstructionTranslator",
    "InstructionTranslatorBase",
    "ReturnSignal",
    "TranslatorCore",
]


class InstructionTranslatorBase(VersionInstructions, CommonInstructions):
    def inline_call(
        self,
        fn: BaseFunctionVariable,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if self.depth + 1 > self.options.max_inline_depth:
            raise Unsupported(f"inlining deeper than max_inline_depth={self.options.max_inline_depth}")
        code = fn.code
        is_generator = bool(code.co_flags & inspect.CO_GENERATOR)
        if code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE):
            raise Unsupported(f"calling coroutine `{code.co_name}`")
        bound = fn.bind(self, args, kwargs)
        cells: dict[str, CellVariable] = {}
        for name, cell in zip(code.co_freevars, fn.closure_cells(self), strict=True):
            cells[name] = cell
        cls = InliningGeneratorTranslator if is_generator else InliningInstructionTranslator
        child = cls(code, fn.get_globals(), bound, cells, self.output, self.options, self, fn)
        return child.run()



class BreakSignal(Exception):
    """The frame must be split before ``inst`` (state already rolled back)."""

    def __init__(self, inst: dis.Instruction, reason: Unsupported) -> None:
        super().__init__(reason.message())
        self.inst = inst
        self.reason = reason


class InstructionTranslator(InstructionTranslatorBase):
    """The translator for the frame being compiled. When ``may_break``, an
    unsupported instruction rolls the state back to just before it
    (``rollback``) and raises ``BreakSignal`` so ``convert_frame`` can split
    the frame there."""

    may_break = False

    def dispatch(self, inst: dis.Instruction) -> None:
        if not self.may_break:
            self.output.trail.forget()  # nothing is ever undone
            super().dispatch(inst)
            return
        cp = checkpoint(self)
        try:
            super().dispatch(inst)
        except Unsupported as e:
            if isinstance(e, UserRaised) and self.exception_entry(inst.offset) is not None:
                raise  # the frame's own `try` handles it (``run`` goes to the handler)
            if isinstance(e, UserRaised) and inst.opname not in RAISE_OPS:
                # The traced code raises where the frame calls or reads something. Eager
                # may not: code that asks `torch.compiler.is_compiling()` (transformers'
                # `is_torchdynamo_compiling()`) took the compiling branch while tracing,
                # and a split would run the rest for real on what that branch left
                # (LongT5 passed its unset attention mask on). The frame runs eagerly.
                e.reason = f"{e.reason}, raised while tracing; the frame runs eagerly rather than split there"
                raise
            here = self.user_stack()
            if e.located and len(e.user_stack) > len(here) and self.in_loop(inst):
                # A break inside a function this frame calls from a loop body
                # (`for block in self.blocks: x = block(x)`). Split here, the loop's
                # resume function would be entered once per iteration with the remaining
                # items on its stack, and be captured again for every block instance it
                # met. The frame runs eagerly instead, and each callee is captured as its
                # own frame (one capture per block class, ADR 0041's binding for the other
                # instances), as TorchDynamo skips a frame with a break in a loop (ADR 0048).
                e.reason = f"{e.reason}, inside a call in a loop; the frame runs eagerly and its callees are captured"
                raise
            e.locate(here)
            restore(self, cp)
            raise BreakSignal(inst, e) from e

    def in_loop(self, inst: dis.Instruction) -> bool:
        """Whether ``inst`` is in a loop body: a later backward jump lands at or before it."""
        for later in self.instructions[self.instructions.index(inst) + 1 :]:
            if later.opname.startswith("JUMP_BACKWARD") and later.argval <= inst.offset:
                return True
        return False

    def RETURN_VALUE(self, inst: dis.Instruction) -> None:
        self.return_value = self.pop()
        raise ReturnSignal


#: a frame's own `raise`: split there, the compiled part runs and the raise is replayed
RAISE_OPS = frozenset({"RAISE_VARARGS", "RERAISE"})


class InliningInstructionTranslator(InstructionTranslatorBase):
    """Runs a callee's code over the caller's graph and returns its result."""

    def __init__(
        self,
        code: types.CodeType,
        f_globals: dict[str, Any],
        symbolic_locals: dict[str, VariableTracker],
        cells: dict[str, CellVariable],
        output: OutputGraph,
        options: DynamoOptions,
        parent: InstructionTranslatorBase,
        fn: BaseFunctionVariable,
    ) -> None:
        super().__init__(code, f_globals, symbolic_locals, cells, output, options, parent)
        self.fn = fn

    def globals_source(self, name: str) -> Source | None:
        if self.fn.source is None:
            return None
        return Item(Attr(self.fn.source, "__globals__"), name)

    def RETURN_VALUE(self, inst: dis.Instruction) -> None:
        self.return_value = self.pop()
        raise ReturnSignal


class InliningGeneratorTranslator(InliningInstructionTranslator):
    """Runs a generator function (or expression) to completion when it is
    called; the call's result is an iterator over everything it yielded, in
    order (``yield from`` included), carrying the generator's return value.

    The body runs before the consumer sees the first item, which is what
    eager Python would compute as long as the two do not observe each other's
    writes between items (the generators of model code yield tensors and
    layers); a generator that yields more than ``max_loop_unroll`` items is
    a graph break."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.yielded: list[VariableTracker] = []

    def RETURN_GENERATOR(self, inst: dis.Instruction) -> None:
        self.push(ConstantVariable(None))

    def YIELD_VALUE(self, inst: dis.Instruction) -> None:
        self.yielded.append(self.pop())
        if len(self.yielded) > self.options.max_loop_unroll:
            raise Unsupported(f"generator `{self.code.co_name}` yields more than max_loop_unroll items")
        self.push(ConstantVariable(None))

    def GET_YIELD_FROM_ITER(self, inst: dis.Instruction) -> None:
        self.push(self.get_iter(self.pop()))

    def finish_generator(self, returned: VariableTracker) -> None:
        self.return_value = ListIteratorVariable(self.yielded, returned=returned)
        raise ReturnSignal

    def RETURN_VALUE(self, inst: dis.Instruction) -> None:
        self.finish_generator(self.pop())

    def RETURN_CONST(self, inst: dis.Instruction) -> None:
        self.finish_generator(ConstantVariable(inst.argval))
