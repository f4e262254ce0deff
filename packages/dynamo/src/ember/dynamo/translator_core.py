"""The translator's state and the value-level semantics its opcodes share.

``TranslatorCore`` holds one frame's symbolic state (value stack, locals,
cells, instruction pointer) and the operations opcode handlers and trackers
call back into (``getitem``, ``is_op``, ``get_iter``, ``load_global``...).
Trackers for real values are made through one entry point,
:meth:`TranslatorCore.wrap` (``builder.wrap``: picks the tracker and
records its guards). The opcode handlers are mixins over this class
(``instructions_*``); ``symbolic_convert`` assembles the translators.
"""

from __future__ import annotations

import dis
import logging
import operator
import traceback
import types
from typing import Any

from ember.ir import Attr, Global, Source
from ember.ir.shapes import DataDependentError

from .builder import wrap, wrap_constant_result
from .config import DynamoOptions
from .errors import InternalCaptureError, Unsupported, UserRaised, frame_summary
from .instructions import GRAPH_BREAK_OPCODES
from .logs import get_logger
from .output_graph import OutputGraph
from .variables.base import VariableTracker
from .variables.builtins import contains
from .variables.constant import ConstantVariable
from .variables.dicts import DictVariable
from .variables.functions import BaseFunctionVariable, CellVariable
from .variables.lists import BaseListVariable, ListIteratorVariable
from .variables.misc import DeferredAttrVariable
from .variables.ndarray import NumpyNdarrayVariable
from .variables.nn_module import NNModuleVariable
from .variables.objects import ObjectVariable
from .variables.operators import apply_operator, fold
from .variables.tensor import TensorVariable

MAX_STEPS = 200_000

log_dynamo = get_logger("dynamo")


class ReturnSignal(Exception):
    """Raised by RETURN_VALUE to stop the run loop."""


class TranslatorCore:
    def __init__(
        self,
        code: types.CodeType,
        f_globals: dict[str, Any],
        symbolic_locals: dict[str, VariableTracker],
        cells: dict[str, CellVariable],
        output: OutputGraph,
        options: DynamoOptions,
        parent: TranslatorCore | None,
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
        self.depth: int = 0 if parent is None else parent.depth + 1
        #: exceptions being handled (``except`` blocks entered), innermost last
        self.exc_infos: list[VariableTracker] = []
        self._exception_table: list[tuple[int, int, int, int, bool]] | None = None

    # --- the loop ----------------------------------------------------------------
    def run(self) -> VariableTracker:
        steps = 0
        trace = log_dynamo.isEnabledFor(logging.DEBUG)
        outer = self.output.tracing
        self.output.tracing = self
        try:
            while True:
                inst = self.instructions[self.ip]
                self.current = inst
                if inst.positions is not None and inst.positions.lineno is not None:
                    self.lineno = inst.positions.lineno
                if trace:
                    log_dynamo.debug(
                        "TRACE %s %s in `%s` (%s:%s), stack %s",
                        inst.opname, inst.argrepr, self.code.co_name, self.code.co_filename,
                        self.lineno, self.stack,
                    )
                self.ip += 1
                try:
                    self.dispatch(inst)
                except UserRaised as e:
                    if not self.catch(inst, e):
                        raise
                except DataDependentError as e:
                    # a branch, an int() or a range() over a size that depends on data
                    # (``x[mask].shape[0] > 3``): a graph break, as in torch.compile
                    raise Unsupported(f"data-dependent decision: {e}") from e
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
        finally:
            self.output.tracing = outer

    def dispatch(self, inst: dis.Instruction) -> None:
        handler = getattr(self, inst.opname, None)
        if handler is None:
            why = GRAPH_BREAK_OPCODES.get(inst.opname)
            raise Unsupported(f"opcode {inst.opname} is not supported" + (f": {why}" if why else ""))
        try:
            handler(inst)
        except DataDependentError as e:
            # here, not only in ``run``: a translator that may split the frame splits it
            # at this instruction (``if s > 0`` of an ``.item()`` value, ADR 0060)
            raise Unsupported(f"data-dependent decision: {e}") from e

    def user_stack(self) -> list[traceback.FrameSummary]:
        frames = []
        tx: TranslatorCore | None = self
        while tx is not None:
            frames.append(frame_summary(tx.code, tx.lineno))
            tx = tx.parent
        return list(reversed(frames))

    def user_line(self) -> str:
        """``file:line`` and source text of the instruction running now (for guard reasons)."""
        where = frame_summary(self.code, self.lineno)
        text = (where.line or "").strip()
        return f"{where.filename}:{where.lineno}" + (f" `{text}`" if text else "")

    def jump_to(self, offset: int) -> None:
        self.ip = self.index_of[offset]

    def exception_entry(self, offset: int) -> tuple[int, int, int, int, bool] | None:
        """The exception-table entry (start, end, target, depth, lasti) covering ``offset``."""
        if self._exception_table is None:
            entries = getattr(dis.Bytecode(self.code), "exception_entries", [])
            self._exception_table = [(e.start, e.end, e.target, e.depth, e.lasti) for e in entries]
        for entry in self._exception_table:
            if entry[0] <= offset < entry[1]:
                return entry
        return None

    def catch(self, inst: dis.Instruction, error: UserRaised) -> bool:
        raise NotImplementedError

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

    # --- making trackers ------------------------------------------------------------------
    def wrap(self, value: Any, source: Source | None) -> VariableTracker:
        """The tracker for a real ``value`` read from ``source`` (guards recorded)."""
        return wrap(self, value, source)

    def wrap_constant(self, value: Any) -> VariableTracker:
        """The tracker for a value computed while tracing from constants (no guards)."""
        return wrap_constant_result(value)

    # --- shared semantics used by trackers ----------------------------------------------
    def load_global(self, name: str) -> VariableTracker:
        same_module = self.f_globals is self.root_tx().f_globals
        pending = self.output.side_effects.globals.get(name) if same_module else None
        if pending is not None:
            return pending
        if name in self.f_globals:
            if not same_module:
                return self.wrap_foreign_global(name)
            return self.wrap(self.f_globals[name], Global(name))
        builtins_ns = self.f_globals.get("__builtins__", __builtins__)
        if isinstance(builtins_ns, types.ModuleType):
            builtins_ns = vars(builtins_ns)
        if name in builtins_ns:
            return self.wrap(builtins_ns[name], None)
        raise Unsupported(f"name `{name}` is not defined (NameError)")

    def wrap_foreign_global(self, name: str) -> VariableTracker:
        """A global of another module (an inlined callee's), reached through
        the callee's ``__globals__``."""
        return self.wrap(self.f_globals[name], self.globals_source(name))

    def globals_source(self, name: str) -> Source | None:
        return None

    def root_tx(self) -> TranslatorCore:
        tx = self
        while tx.parent is not None:
            tx = tx.parent
        return tx

    def getattr_deferred(self, obj: VariableTracker, name: str) -> VariableTracker:
        """``obj.name``; an untraceable value is deferred to its use."""
        try:
            return obj.var_getattr(self, name)
        except UserRaised:
            raise  # Python raises AttributeError here, not where the value is used
        except Unsupported as e:
            if obj.source is None and not obj.is_python_constant():
                raise
            return DeferredAttrVariable(obj, name, e)

    def getitem(self, obj: VariableTracker, key: VariableTracker) -> VariableTracker:
        if isinstance(obj, TensorVariable):
            return self.output.create_op("call_function", operator.getitem, [obj, key], {})
        if isinstance(obj, (BaseListVariable, DictVariable)):
            return obj.getitem(self, key)
        if isinstance(obj, (NNModuleVariable, NumpyNdarrayVariable)):
            return obj.call_method(self, "__getitem__", [key], {})
        if isinstance(obj, ObjectVariable):
            return obj.getitem(self, key)
        if obj.is_python_constant() and key.is_python_constant():
            return fold(self, operator.getitem, [obj, key])
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
        elif a.fresh or b.fresh:
            # an object made while tracing is only ever itself
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
        obj.store_attr(self, name, value)

    def binary(self, fn: Any, a: VariableTracker, b: VariableTracker) -> VariableTracker:
        return apply_operator(self, fn, [a, b])

    def contains(self, container: VariableTracker, item: VariableTracker) -> VariableTracker:
        return contains(self, container, item)

    def guard_module_training(self, mod: NNModuleVariable) -> None:
        if mod.source is not None:
            self.output.guards.add_constant(Attr(mod.source, "training"), mod.value.training)

    def cell_for(self, cell: types.CellType, source: Source | None, name: str) -> CellVariable:
        """The one tracker for a real cell (so a write through one path is
        seen through every other, e.g. a frame variable and a lambda's closure)."""
        known: CellVariable | None = self.output.real_cells.get(id(cell))
        if known is not None and known.real is cell:
            return known
        var = CellVariable(real=cell, source=source, name=name)
        self.output.real_cells[id(cell)] = var
        return var

    # --- calls ---------------------------------------------------------------------------
    def call(self, fn: VariableTracker, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
        return fn.call_function(self, args, kwargs)

    # --- provided by the opcode mixins and translator classes -------------------------
    def global_pushes_null(self, inst: dis.Instruction) -> bool:
        raise NotImplementedError

    def RETURN_VALUE(self, inst: dis.Instruction) -> None:
        raise NotImplementedError

    def inline_call(
        self,
        fn: BaseFunctionVariable,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        raise NotImplementedError

