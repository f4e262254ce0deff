"""The symbolic bytecode interpreter.

``InstructionTranslator`` runs a frame's bytecode over trackers instead of
values: one UPPER_CASE method per opcode (in the ``instructions_*`` mixins),
dispatched by ``inst.opname``. Tensor work is recorded in the
``OutputGraph``; Python work is folded. User function calls are inlined by
``InliningInstructionTranslator`` (a child interpreter over the callee's
code sharing the parent's graph). Per-version opcode differences live in
``instructions_311`` / ``instructions_312``.
"""

from __future__ import annotations

import dis
import sys
import traceback
import types
from typing import Any

from .config import DynamoOptions
from .errors import InternalCaptureError, Unsupported, frame_summary
from .output_graph import OutputGraph
from .source_tracking import GlobalSource, Source
from .variables.base import VariableTracker
from .variables.builtins import apply_operator, contains
from .variables.constant import ConstantVariable
from .variables.dicts import DictVariable
from .variables.functions import BaseFunctionVariable, CellVariable
from .variables.lists import BaseListVariable, ListIteratorVariable
from .variables.misc import NullVariable
from .variables.nn_module import NNModuleVariable
from .variables.objects import UserObjectVariable
from .variables.tensor import TensorVariable

if sys.version_info >= (3, 12):
    from .instructions_312 import VersionMixin
else:
    from .instructions_311 import VersionMixin
from .instructions_common import CommonInstructions

NULL = NullVariable()
MAX_STEPS = 200_000


class ReturnSignal(Exception):
    """Raised by RETURN_VALUE to stop the run loop."""


class InstructionTranslatorBase(CommonInstructions, VersionMixin):
    def __init__(
        self,
        code: types.CodeType,
        f_globals: dict[str, Any],
        symbolic_locals: dict[str, VariableTracker],
        cells: dict[str, CellVariable],
        output: OutputGraph,
        options: DynamoOptions,
        parent: InstructionTranslatorBase | None,
    ) -> None:
        self.code = code
        self.f_globals = f_globals
        self.symbolic_locals = symbolic_locals
        self.cells = cells
        self.output = output
        self.options = options
        self.parent = parent
        self.instructions = list(dis.get_instructions(code))
        self.index_of = {inst.offset: i for i, inst in enumerate(self.instructions)}
        self.stack: list[VariableTracker] = []
        self.ip = 0
        self.kw_names: tuple[str, ...] = ()
        self.current: dis.Instruction | None = None
        self.lineno = code.co_firstlineno
        self.return_value: VariableTracker | None = None
        self.depth = 0 if parent is None else parent.depth + 1

    # --- the loop ----------------------------------------------------------------
    def run(self) -> VariableTracker:
        steps = 0
        try:
            while True:
                inst = self.instructions[self.ip]
                self.current = inst
                if inst.positions is not None and inst.positions.lineno is not None:
                    self.lineno = inst.positions.lineno
                self.ip += 1
                self.dispatch(inst)
                steps += 1
                if steps > MAX_STEPS:
                    raise Unsupported(f"more than {MAX_STEPS} bytecodes traced (unbounded loop?)")
        except ReturnSignal:
            assert self.return_value is not None
            return self.return_value
        except Unsupported as e:
            e.locate(self.user_stack())
            raise
        except (IndexError, KeyError, AssertionError) as e:
            where = frame_summary(self.code, self.lineno)
            raise InternalCaptureError(
                f"ember.dynamo internal error while capturing `{self.code.co_name}` at "
                f"{where.filename}:{where.lineno} ({self.current.opname if self.current else '?'}): "
                f"{type(e).__name__}: {e}; please report this with the function's source"
            ) from e

    def dispatch(self, inst: dis.Instruction) -> None:
        handler = getattr(self, inst.opname, None)
        if handler is None:
            raise Unsupported(f"opcode {inst.opname} is not supported")
        handler(inst)

    def user_stack(self) -> list[traceback.FrameSummary]:
        frames = []
        tx: InstructionTranslatorBase | None = self
        while tx is not None:
            frames.append(frame_summary(tx.code, tx.lineno))
            tx = tx.parent
        return list(reversed(frames))

    def jump_to(self, offset: int) -> None:
        self.ip = self.index_of[offset]

    # --- stack ---------------------------------------------------------------------
    def push(self, v: VariableTracker) -> None:
        self.stack.append(v)

    def pop(self) -> VariableTracker:
        return self.stack.pop()

    def popn(self, n: int) -> list[VariableTracker]:
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    # --- shared semantics used by trackers ----------------------------------------------
    def load_global(self, name: str) -> VariableTracker:
        same_module = self.f_globals is self.root_tx().f_globals
        pending = self.output.side_effects.globals.get(name) if same_module else None
        if pending is not None:
            return pending
        from .builder import wrap

        if name in self.f_globals:
            if not same_module:
                return self.wrap_foreign_global(name)
            return wrap(self, self.f_globals[name], GlobalSource(name))
        builtins_ns = self.f_globals.get("__builtins__", __builtins__)
        if isinstance(builtins_ns, types.ModuleType):
            builtins_ns = vars(builtins_ns)
        if name in builtins_ns:
            return wrap(self, builtins_ns[name], None)
        raise Unsupported(f"name `{name}` is not defined (NameError)")

    def wrap_foreign_global(self, name: str) -> VariableTracker:
        """A global of another module (an inlined callee's), reached through
        the callee's ``__globals__``."""
        from .builder import wrap

        src = self.globals_source(name)
        return wrap(self, self.f_globals[name], src)

    def globals_source(self, name: str) -> Source | None:
        return None

    def root_tx(self) -> InstructionTranslatorBase:
        tx = self
        while tx.parent is not None:
            tx = tx.parent
        return tx

    def getattr_deferred(self, obj: VariableTracker, name: str) -> VariableTracker:
        """``obj.name``; an untraceable value is deferred to its use."""
        from .variables.misc import DeferredAttrVariable

        try:
            return obj.var_getattr(self, name)
        except Unsupported as e:
            if obj.source is None and not obj.is_python_constant():
                raise
            return DeferredAttrVariable(obj, name, e)

    def getitem(self, obj: VariableTracker, key: VariableTracker) -> VariableTracker:
        if isinstance(obj, TensorVariable):
            import operator

            return self.output.create_op("call_function", operator.getitem, [obj, key], {})
        if isinstance(obj, (BaseListVariable, DictVariable)):
            return obj.getitem(self, key)
        if isinstance(obj, NNModuleVariable):
            return obj.call_method(self, "__getitem__", [key], {})
        if obj.is_python_constant() and key.is_python_constant():
            return _fold_getitem(obj, key)
        raise Unsupported(f"indexing {obj.describe()} with {key.describe()}")

    def is_op(self, a: VariableTracker, b: VariableTracker, negate: bool) -> VariableTracker:
        result: bool | None = None
        if a is b:
            result = True
        elif a.is_python_constant() and b.is_python_constant():
            result = a.as_python_constant() is b.as_python_constant()
        elif isinstance(a, ConstantVariable) or isinstance(b, ConstantVariable):
            # a constant (None, True, ...) is never a tensor/list/object tracker
            result = False
        elif isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
            result = a.node is b.node
        elif hasattr(a, "value") and hasattr(b, "value"):
            result = a.value is b.value
        if result is None:
            raise Unsupported(f"`is` between {a.describe()} and {b.describe()}")
        return ConstantVariable(result != negate)

    def get_iter(self, obj: VariableTracker) -> VariableTracker:
        if isinstance(obj, ListIteratorVariable):
            return obj
        if isinstance(obj, DictVariable):
            return ListIteratorVariable(obj.unpack(self))
        if isinstance(obj, TensorVariable):
            return ListIteratorVariable(obj.unpack(self))
        items = obj.unpack(self)
        if len(items) > self.options.max_loop_unroll:
            raise Unsupported(f"loop over {len(items)} items exceeds max_loop_unroll")
        return ListIteratorVariable(items)

    def store_attr(self, obj: VariableTracker, name: str, value: VariableTracker) -> None:
        if isinstance(obj, (UserObjectVariable, NNModuleVariable)):
            obj.store_attr(self, name, value)
            return
        if isinstance(obj, TensorVariable):
            raise Unsupported(f"setting tensor attribute `{name}` inside a compiled region")
        raise Unsupported(f"attribute write `{name}` on {obj.describe()}")

    def binary(self, fn: Any, a: VariableTracker, b: VariableTracker) -> VariableTracker:
        return apply_operator(self, fn, [a, b])

    def contains(self, container: VariableTracker, item: VariableTracker) -> VariableTracker:
        return contains(self, container, item)

    def guard_module_training(self, mod: NNModuleVariable) -> None:
        if mod.source is not None:
            from .source_tracking import AttrSource

            self.output.guards.add_constant(AttrSource(mod.source, "training"), mod.value.training)

    def cell_for(self, cell: types.CellType, source: Source | None, name: str) -> CellVariable:
        return CellVariable(real=cell, source=source, name=name)

    # --- calls ---------------------------------------------------------------------------
    def call(self, fn: VariableTracker, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        return fn.call_function(self, args, kwargs)

    def inline_call(
        self,
        fn: BaseFunctionVariable,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if self.depth + 1 > self.options.max_inline_depth:
            raise Unsupported(f"inlining deeper than max_inline_depth={self.options.max_inline_depth}")
        code = fn.code
        is_genexpr = code.co_name == "<genexpr>" and code.co_flags & 0x20
        if not is_genexpr and code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):
            raise Unsupported(f"calling generator or coroutine `{code.co_name}`")
        bound = fn.bind(self, args, kwargs)
        cells: dict[str, CellVariable] = {}
        for name, cell in zip(code.co_freevars, fn.closure_cells(self), strict=True):
            cells[name] = cell
        cls = InliningGeneratorTranslator if is_genexpr else InliningInstructionTranslator
        child = cls(code, fn.get_globals(), bound, cells, self.output, self.options, self, fn)
        return child.run()


def _fold_getitem(obj: VariableTracker, key: VariableTracker) -> VariableTracker:
    from .variables.builtins import fold
    import operator

    return fold(operator.getitem, [obj, key])


class BreakSignal(Exception):
    """The frame must be split before ``inst`` (state already rolled back)."""

    def __init__(self, inst: dis.Instruction, reason: Unsupported) -> None:
        super().__init__(reason.message())
        self.inst = inst
        self.reason = reason


class InstructionTranslator(InstructionTranslatorBase):
    """The translator for the frame being compiled. When ``may_break``, an
    unsupported instruction rolls the state back to just before it and
    raises ``BreakSignal`` so ``convert_frame`` can split the frame there."""

    may_break = False

    def dispatch(self, inst: dis.Instruction) -> None:
        if not self.may_break:
            super().dispatch(inst)
            return
        from .split_frame import restore, take_snapshot

        snap = take_snapshot(self)
        try:
            super().dispatch(inst)
        except Unsupported as e:
            e.locate(self.user_stack())
            restore(self, snap)
            raise BreakSignal(inst, e) from e

    def RETURN_VALUE(self, inst: dis.Instruction) -> None:
        self.return_value = self.pop()
        raise ReturnSignal


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
        from .source_tracking import AttrSource, ItemSource

        if self.fn.source is None:
            return None
        return ItemSource(AttrSource(self.fn.source, "__globals__"), name)

    def RETURN_VALUE(self, inst: dis.Instruction) -> None:
        self.return_value = self.pop()
        raise ReturnSignal


class InliningGeneratorTranslator(InliningInstructionTranslator):
    """Runs a generator expression to completion; the call's result is an
    iterator over everything it yielded (consumers such as ``sum``,
    ``tuple``, ``torch.cat`` read it all)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.yielded: list[VariableTracker] = []

    def RETURN_GENERATOR(self, inst: dis.Instruction) -> None:
        self.push(ConstantVariable(None))

    def YIELD_VALUE(self, inst: dis.Instruction) -> None:
        self.yielded.append(self.pop())
        self.push(ConstantVariable(None))

    def RETURN_VALUE(self, inst: dis.Instruction) -> None:
        self.pop()
        self.return_value = ListIteratorVariable(self.yielded)
        raise ReturnSignal

    def RETURN_CONST(self, inst: dis.Instruction) -> None:
        self.return_value = ListIteratorVariable(self.yielded)
        raise ReturnSignal
