"""Emitting bytecode that rebuilds Python values after a graph ran.

``PyCodegen`` collects ``bytecode.Instr`` objects. Trackers push their real
value by ``reconstruct(cg)``: constants by ``LOAD_CONST``, values read from
the frame by replaying their source (``L['self'].layers[0]``), tensors
computed by the graph by indexing the graph's output tuple. Tensors asked
for here become the graph's outputs, in the order first asked. How a call or
an attribute load is spelled on the running Python comes from ``instructions``.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from bytecode import Instr
from bytecode.instr import CellVar, FreeVar

from ember.ir import Attr, DictEntry, DictItem, Global, Item, Local, Source

from .errors import Unsupported
from .instructions import NULL_AFTER_CALLABLE, SET_FUNCTION_ATTRIBUTE, emit_call, load_attr_arg
from .rebuild import dict_entry
from .tensor_subclass import is_plain_subclass, restore

if TYPE_CHECKING:
    from .variables.base import VariableTracker
    from .variables.sym import SymNodeVariable
    from .variables.tensor import TensorVariable

OUT_LOCAL = "__ember_graph_out"


class PyCodegen:
    def __init__(
        self,
        cellvars: tuple[str, ...],
        freevars: tuple[str, ...],
        lineno: int,
        code: types.CodeType | None = None,
    ) -> None:
        self.code = code  # the frame whose cells LOAD_CLOSURE may reach
        self.instrs: list[Instr] = []
        self.cellvars = cellvars
        self.freevars = freevars
        self.lineno = lineno
        self.outputs: list[TensorVariable | SymNodeVariable] = []
        self._out_index: dict[int, int] = {}
        self._tmp = 0
        #: id(tracker) -> temporary holding the object it was rebuilt into
        self._built: dict[int, str] = {}
        self._building: set[int] = set()

    # --- primitive emission ------------------------------------------------
    def emit(self, name: str, arg: Any = None) -> None:
        if arg is None and name not in ("LOAD_CONST",):
            self.instrs.append(Instr(name, lineno=self.lineno))
        else:
            self.instrs.append(Instr(name, arg, lineno=self.lineno))

    def load_const(self, value: Any) -> None:
        self.instrs.append(Instr("LOAD_CONST", value, lineno=self.lineno))

    def load_local(self, name: str) -> None:
        if name in self.cellvars:
            self.emit("LOAD_DEREF", CellVar(name))
        elif name in self.freevars:
            self.emit("LOAD_DEREF", FreeVar(name))
        else:
            self.emit("LOAD_FAST", name)

    def store_local(self, name: str) -> None:
        if name in self.cellvars:
            self.emit("STORE_DEREF", CellVar(name))
        elif name in self.freevars:
            self.emit("STORE_DEREF", FreeVar(name))
        else:
            self.emit("STORE_FAST", name)

    def load_global(self, name: str, push_null: bool = False) -> None:
        self.emit("LOAD_GLOBAL", (push_null, name))

    def store_global(self, name: str) -> None:
        self.emit("STORE_GLOBAL", name)

    def load_attr(self, name: str) -> None:
        self.emit("LOAD_ATTR", load_attr_arg(name))

    def store_attr(self, name: str) -> None:
        self.emit("STORE_ATTR", name)

    def store_subscr(self) -> None:
        self.emit("STORE_SUBSCR")

    def subscr(self) -> None:
        self.emit("BINARY_SUBSCR")

    def push_null(self) -> None:
        """A NULL stack slot, as it is. For a call, use :meth:`load_callable_const`
        or :meth:`before_callable` / :meth:`after_callable`: where the NULL goes
        differs between versions."""
        self.emit("PUSH_NULL")

    def load_callable_const(self, fn: object) -> None:
        """Load the constant ``fn`` to be called by :meth:`call`."""
        self.before_callable()
        self.load_const(fn)
        self.after_callable()

    def load_closure(self, name: str) -> None:
        """Push the cell object of this frame's cell or free variable ``name``
        (3.13 spells ``LOAD_CLOSURE`` as ``LOAD_FAST`` of the cell's slot)."""
        ref = CellVar(name) if name in self.cellvars else FreeVar(name)
        self.emit("LOAD_FAST" if SET_FUNCTION_ATTRIBUTE else "LOAD_CLOSURE", ref)

    def before_callable(self) -> None:
        """Emitted before loading a callable for :meth:`call`: its NULL on 3.11/3.12."""
        if not NULL_AFTER_CALLABLE:
            self.emit("PUSH_NULL")

    def after_callable(self) -> None:
        """Emitted after loading a callable for :meth:`call`: its NULL on 3.13+."""
        if NULL_AFTER_CALLABLE:
            self.emit("PUSH_NULL")

    def make_function(self, flags: int) -> None:
        """``MAKE_FUNCTION`` of the code object on top, with the attributes
        ``flags`` names below it (in ``MAKE_FUNCTION``'s order)."""
        if not SET_FUNCTION_ATTRIBUTE:
            self.emit("MAKE_FUNCTION", flags)
            return
        self.emit("MAKE_FUNCTION")
        for flag in (0x08, 0x04, 0x02, 0x01):
            if flags & flag:
                self.emit("SET_FUNCTION_ATTRIBUTE", flag)

    def call(self, nargs: int, kw_names: tuple[str, ...] = ()) -> None:
        """Call with the callable (between :meth:`before_callable` and
        :meth:`after_callable`) and the arguments on the stack (``kw_names``:
        the names of the last ``len(kw_names)`` arguments)."""
        emit_call(self, nargs, kw_names)

    def pop_top(self) -> None:
        self.emit("POP_TOP")

    def build(self, kind: type, n: int) -> None:
        if kind is tuple:
            self.emit("BUILD_TUPLE", n)
        elif kind is list:
            self.emit("BUILD_LIST", n)
        elif kind is dict:
            self.emit("BUILD_MAP", n)
        else:
            raise TypeError(kind)

    def get_iter(self) -> None:
        self.emit("GET_ITER")

    def return_value(self) -> None:
        self.emit("RETURN_VALUE")

    # --- values --------------------------------------------------------------
    def load_source(self, source: Source) -> None:
        if isinstance(source, Local):
            self.load_local(source.name)
        elif isinstance(source, Global):
            self.load_global(source.name)
        elif isinstance(source, Attr):
            self.load_source(source.base)
            self.load_attr(source.member)
        elif isinstance(source, Item):
            self.load_source(source.base)
            self.load_const(source.index)
            self.subscr()
        elif isinstance(source, DictItem):
            self.load_callable_const(dict.__getitem__)
            self.load_source(source.base)
            self.load_const(source.index)
            self.call(2)
        elif isinstance(source, DictEntry):
            self.load_callable_const(dict_entry)
            self.load_source(source.base)
            self.load_const(source.position)
            self.load_const(source.part)
            self.call(3)
        else:
            raise TypeError(f"cannot load source {source.expr()}")

    def load_tensor(self, var: TensorVariable | SymNodeVariable) -> None:
        """Push a graph value: a tensor from its source, or one of the graph's outputs
        (a tensor or a symbolic size the graph computes)."""
        if var.source is not None:
            self.load_source(var.source)
            return
        cls = getattr(var, "cls", torch.Tensor)
        if is_plain_subclass(cls):  # the graph computed it as a plain tensor
            def build() -> None:
                self.load_callable_const(restore)
                self._load_output(var)
                self.load_const(cls)
                self.call(2)

            self.reconstruct_once(var, build)
            return
        self._load_output(var)

    def _load_output(self, var: TensorVariable | SymNodeVariable) -> None:
        key = id(var.node)
        if key not in self._out_index:
            self._out_index[key] = len(self.outputs)
            self.outputs.append(var)
        self.load_local(OUT_LOCAL)
        self.load_const(self._out_index[key])
        self.subscr()

    def reconstruct_once(self, var: VariableTracker, build: Callable[[], None]) -> None:
        """Push the one real object for ``var``: built by ``build`` the first
        time, loaded from its temporary afterwards, so every place that holds
        an object made while tracing (a stack slot, a local, another object's
        attribute) gets the same object, as in Python."""
        tmp = self._built.get(id(var))
        if tmp is not None:
            self.load_local(tmp)
            return
        if id(var) in self._building:
            raise Unsupported(f"{var.describe()} refers to itself: rebuilding it would not end")
        self._building.add(id(var))
        build()
        self._building.discard(id(var))
        tmp = self.new_tmp()
        self.emit("COPY", 1)
        self.store_local(tmp)
        self._built[id(var)] = tmp

    def new_tmp(self) -> str:
        self._tmp += 1
        return f"__ember_tmp_{self._tmp}"

    def stash(self, var: VariableTracker, fresh: bool = False) -> str:
        """Compute ``var`` into a fresh local; return its name."""
        if fresh:
            var.reconstruct_items(self)  # type: ignore[attr-defined]
        else:
            var.reconstruct(self)
        name = self.new_tmp()
        self.store_local(name)
        return name

    def stash_source(self, var: VariableTracker) -> str:
        assert var.source is not None
        self.load_source(var.source)
        name = self.new_tmp()
        self.store_local(name)
        return name

    def call_method_on_local(self, obj: str, method: str, args: list[str]) -> None:
        self.before_callable()
        self.load_local(obj)
        self.load_attr(method)
        self.after_callable()
        for a in args:
            self.load_local(a)
        self.call(len(args))
        self.pop_top()
