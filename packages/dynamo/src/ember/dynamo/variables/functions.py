"""User functions, closures and bound methods: inlined when called."""

from __future__ import annotations

import functools
import inspect
import types
from typing import TYPE_CHECKING, Any

from ember.ir import Attr, Item, Source

from ..errors import Unsupported
from ..mutable import Box
from .base import VariableTracker
from .constant import ConstantVariable, OpaqueConstantVariable
from .dicts import DictVariable
from .lists import TupleVariable

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx


#: data attributes of a function object that ``getattr`` may read as values
#: (each guarded through its own source)
FUNCTION_DATA_ATTRS = frozenset(
    {
        "__name__",
        "__qualname__",
        "__module__",
        "__doc__",
        "__defaults__",
        "__kwdefaults__",
        "__wrapped__",
    }
)


#: the names of a function, read as constants where the function has no source
FUNCTION_NAME_ATTRS = frozenset({"__name__", "__qualname__", "__module__"})


def code_variable(code: types.CodeType, source: Source | None) -> VariableTracker:
    """A code object: immutable, so every ``co_*`` attribute is a constant.
    Callers guarantee it is pinned (the ID guard on a sourced function's
    ``__code__``, or the code being the one traced)."""
    return OpaqueConstantVariable(code, source)


class CellVariable(VariableTracker):
    """A closure cell. Its contents are a box written through the trail; a
    cell that existed before the frame ran (``real``) is read lazily
    (guarded) and may be written only when it belongs to the frame being
    compiled."""

    def __init__(
        self,
        value: VariableTracker | None = None,
        real: types.CellType | None = None,
        source: Source | None = None,
        name: str = "",
        owner: types.CodeType | None = None,
    ) -> None:
        super().__init__(source)
        self.box: Box[VariableTracker | None] = Box(value)
        self.real = real
        self.name = name
        #: the code object whose frame holds this cell (None: not a frame cell)
        self.owner = owner

    @property
    def value(self) -> VariableTracker | None:
        """What the cell holds now (``None``: not read or written yet)."""
        return self.box.value

    def describe(self) -> str:
        return f"closure cell `{self.name}`"

    def get(self, tx: Tx) -> VariableTracker:
        value = self.box.value
        if value is None:
            if self.real is None:
                raise Unsupported(f"free variable `{self.name}` read before assignment")
            try:
                contents = self.real.cell_contents
            except ValueError as e:
                raise Unsupported(f"free variable `{self.name}` is empty") from e
            value = tx.wrap(contents, self.source)
            tx.output.trail.set(self.box, value, observable=False)
        return value

    def set(self, tx: Tx, value: VariableTracker) -> None:
        if self.real is not None and self.owner is tx.root_tx().code:
            # a free variable of the frame being compiled: written back
            # (STORE_DEREF) after the graph runs
            tx.output.trail.set(self.box, value)
            tx.output.side_effects.store_cell(self)
            return
        if self.real is not None:
            raise Unsupported(
                f"assignment to nonlocal `{self.name}` of an enclosing function cannot be traced"
            )
        tx.output.trail.set(self.box, value)


class BaseFunctionVariable(VariableTracker):
    code: types.CodeType

    def get_globals(self) -> dict[str, Any]:
        raise NotImplementedError

    def fn_name(self) -> str:
        return self.code.co_name

    def describe(self) -> str:
        return f"function `{self.fn_name()}`"

    def python_type(self) -> type:
        return types.FunctionType

    def defaults(self, tx: Tx) -> tuple[tuple[VariableTracker, ...], dict[str, VariableTracker]]:
        raise NotImplementedError

    def closure_cells(self, tx: Tx) -> list[CellVariable]:
        raise NotImplementedError

    def bind(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> dict[str, VariableTracker]:
        """Map the call's arguments onto the code's parameters (defaults applied)."""
        code = self.code
        defaults, kwdefaults = self.defaults(tx)
        shell = types.FunctionType(
            code,
            {},
            code.co_name,
            defaults or None,
            tuple(types.CellType() for _ in code.co_freevars) or None,
        )
        shell.__kwdefaults__ = kwdefaults or None
        try:
            bound = inspect.signature(shell).bind(*args, **kwargs)
        except TypeError as e:
            raise Unsupported(f"call to `{code.co_name}` does not match its signature: {e}") from e
        bound.apply_defaults()
        out: dict[str, VariableTracker] = {}
        params = inspect.signature(shell).parameters
        for name, value in bound.arguments.items():
            kind = params[name].kind
            if name.startswith("implicit") and "." + name[8:] in code.co_varnames:
                name = "." + name[8:]  # inspect renames comprehension args `.0`
            if kind is inspect.Parameter.VAR_POSITIONAL:
                out[name] = TupleVariable(list(value))
            elif kind is inspect.Parameter.VAR_KEYWORD:
                out[name] = DictVariable(dict(value))
            else:
                out[name] = value
        return out

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        return tx.inline_call(self, args, kwargs)


class UserFunctionVariable(BaseFunctionVariable):
    """A Python function that exists outside the traced frame."""

    def __init__(self, fn: types.FunctionType, source: Source | None = None) -> None:
        super().__init__(source)
        self.fn = fn
        self.code = fn.__code__

    def fn_name(self) -> str:
        return self.fn.__name__

    def get_globals(self) -> dict[str, Any]:
        return self.fn.__globals__

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        """Plain data attributes of the function object, read as constants.

        ``__code__`` is already pinned by the ID guard every sourced function
        gets in ``wrap`` (and is what an inlined call assumes anyway); the
        others are mutable, so they are read through their own source and
        guarded there. Without a source only ``__code__`` is safe."""
        if name == "__code__":
            if self.source is None:
                return code_variable(self.code, None)
            src = Attr(self.source, name)
            tx.output.guards.add_id(src, self.code)
            return code_variable(self.code, src)
        if name == "__class__":
            return tx.wrap(types.FunctionType, None)  # a function's class never changes
        if name in FUNCTION_DATA_ATTRS and self.source is not None:
            try:
                value = getattr(self.fn, name)
            except AttributeError as e:
                raise Unsupported(f"function `{self.fn_name()}` has no attribute `{name}`") from e
            return tx.wrap(value, Attr(self.source, name))
        if name in FUNCTION_NAME_ATTRS:
            # a function reached without a source (a method read from a guarded class):
            # its names, as TorchDynamo reads them, are constants
            return tx.wrap(getattr(self.fn, name), None)
        return super().var_getattr(tx, name)

    def as_python_constant(self) -> Any:
        return self.fn

    def defaults(self, tx: Tx) -> tuple[tuple[VariableTracker, ...], dict[str, VariableTracker]]:
        pos: list[VariableTracker] = []
        for i, d in enumerate(self.fn.__defaults__ or ()):
            src = Item(Attr(self.source, "__defaults__"), i) if self.source else None
            pos.append(tx.wrap(d, src))
        kw: dict[str, VariableTracker] = {}
        for k, d in (self.fn.__kwdefaults__ or {}).items():
            src = Item(Attr(self.source, "__kwdefaults__"), k) if self.source else None
            kw[k] = tx.wrap(d, src)
        return tuple(pos), kw

    def closure_cells(self, tx: Tx) -> list[CellVariable]:
        cells = []
        for i, (name, cell) in enumerate(
            zip(self.code.co_freevars, self.fn.__closure__ or (), strict=True)
        ):
            src = (
                Attr(Item(Attr(self.source, "__closure__"), i), "cell_contents")
                if self.source
                else None
            )
            cells.append(tx.cell_for(cell, src, name))
        return cells


class NestedFunctionVariable(BaseFunctionVariable):
    """A function created by ``MAKE_FUNCTION`` inside the traced region
    (lambdas, inner functions, comprehensions on 3.11)."""

    def __init__(
        self,
        code: types.CodeType,
        f_globals: dict[str, Any],
        qualname: str,
        defaults: tuple[VariableTracker, ...],
        kwdefaults: dict[str, VariableTracker],
        closure: list[CellVariable],
    ) -> None:
        super().__init__(None)
        self.code = code
        self.f_globals = f_globals
        self.qualname = qualname
        self._defaults = defaults
        self._kwdefaults = kwdefaults
        self.closure = closure
        #: data attributes written while tracing (``fn.__name__ = ...``, ``functools.wraps``)
        self.attrs: Box[dict[str, VariableTracker]] = Box({})

    def get_globals(self) -> dict[str, Any]:
        return self.f_globals

    def fn_name(self) -> str:
        name = self.attrs.value.get("__name__")
        return str(name.as_python_constant()) if name is not None else self.code.co_name

    def store_attr(self, tx: Tx, name: str, value: VariableTracker) -> None:
        if name == "__code__" or name == "__closure__" or name == "__globals__":
            raise Unsupported(f"assigning `{name}` of {self.describe()}")
        tx.output.trail.set(self.attrs, {**self.attrs.value, name: value})

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        # Made inside the traced region: nothing outside can have changed these.
        written = self.attrs.value.get(name)
        if written is not None:
            return written
        if name == "__code__":
            return code_variable(self.code, None)
        if name == "__name__":
            return ConstantVariable(self.code.co_name)
        if name == "__qualname__":
            return ConstantVariable(self.qualname)
        if name == "__module__" and isinstance(self.f_globals.get("__name__"), str):
            return ConstantVariable(self.f_globals["__name__"])
        if name == "__class__":
            return tx.wrap(types.FunctionType, None)
        return super().var_getattr(tx, name)

    def reconstruct(self, cg: PyCodegen) -> None:
        """Re-create the function over the real cells of the frame (once)."""
        cg.reconstruct_once(self, lambda: self._build(cg))

    def _build(self, cg: PyCodegen) -> None:
        if self._kwdefaults:
            raise Unsupported(f"rebuilding {self.describe()} with keyword-only defaults")
        for cell in self.closure:
            if cg.code is None or cell.owner is not cg.code:
                raise Unsupported(f"{self.describe()} closes over cells of another frame")
        flags = 0
        if self._defaults:
            for d in self._defaults:
                d.reconstruct(cg)
            cg.build(tuple, len(self._defaults))
            flags |= 0x01
        if self.closure:
            for cell in self.closure:
                cg.load_closure(cell.name)
            cg.build(tuple, len(self.closure))
            flags |= 0x08
        cg.load_const(self.code)
        cg.make_function(flags)
        for name, value in self.attrs.value.items():
            cg.emit("COPY", 1)
            value.reconstruct(cg)
            cg.emit("SWAP", 2)
            cg.store_attr(name)

    def defaults(self, tx: Tx) -> tuple[tuple[VariableTracker, ...], dict[str, VariableTracker]]:
        return self._defaults, self._kwdefaults

    def closure_cells(self, tx: Tx) -> list[CellVariable]:
        return self.closure


class UserMethodVariable(VariableTracker):
    """``obj.method`` for a Python-level method: calls inline with ``obj`` first."""

    def __init__(self, fn: BaseFunctionVariable, obj: VariableTracker) -> None:
        super().__init__(None)
        self.fn = fn
        self.obj = obj

    def describe(self) -> str:
        return f"method `{self.fn.fn_name()}`"

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        return self.fn.call_function(tx, [self.obj, *args], kwargs)


class PartialVariable(VariableTracker):
    """``functools.partial(fn, *args, **kwargs)``: calling it calls ``fn``
    with the bound arguments first (and keywords merged, the call's winning)."""

    def __init__(
        self,
        fn: VariableTracker,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
        source: Source | None = None,
    ) -> None:
        super().__init__(source)
        self.fn = fn
        self.args = tuple(args)
        self.kwargs = dict(kwargs)

    def describe(self) -> str:
        return f"functools.partial of {self.fn.describe()}"

    def python_type(self) -> type:
        return functools.partial

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        return self.fn.call_function(tx, [*self.args, *args], {**self.kwargs, **kwargs})

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        if name == "func":
            return self.fn
        if name == "args":
            return TupleVariable(list(self.args))
        if name == "keywords":
            return DictVariable(self.kwargs)
        return super().var_getattr(tx, name)

    def reconstruct(self, cg: PyCodegen) -> None:
        if self.source is not None:
            cg.load_source(self.source)
            return
        cg.load_callable_const(functools.partial)
        self.fn.reconstruct(cg)
        for a in self.args:
            a.reconstruct(cg)
        for v in self.kwargs.values():
            v.reconstruct(cg)
        cg.call(1 + len(self.args) + len(self.kwargs), tuple(self.kwargs))
