"""Small trackers the translator needs: the NULL stack marker, ``obj.method``
before the call, and objects passed through without being looked into."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import Unsupported
from ..trace_rules import as_graph_target
from .base import VariableTracker
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ember.ir import Source

    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx


class NullVariable(VariableTracker):
    """The NULL that CPython pushes below a callable (``PUSH_NULL``)."""

    def describe(self) -> str:
        return "NULL"

    def __repr__(self) -> str:
        return "NULL"


class BoundCallVariable(VariableTracker):
    """``obj.name`` looked up for a call (``LOAD_METHOD``): calling it is
    ``obj.call_method(name, ...)``, so each tracker handles its own methods."""

    def __init__(self, obj: VariableTracker, name: str) -> None:
        super().__init__(None)
        self.obj = obj
        self.name = name

    def describe(self) -> str:
        return f"method `{self.name}` of {self.obj.describe()}"

    def reconstruct(self, cg: PyCodegen) -> None:
        self.obj.reconstruct(cg)
        cg.load_attr(self.name)

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        return self.obj.call_method(tx, self.name, args, kwargs)


class ControlFunctionVariable(VariableTracker):
    """The runtime's control functions, seen from inside a captured frame:
    ``graph_break()`` (always a break), ``is_compiling()`` (folds to True),
    functions marked with ``disable``/``disallow_in_graph`` (a break: they
    must run in Python)."""

    def __init__(self, value: object, kind: str) -> None:
        super().__init__(None)
        self.value = value
        self.kind = kind

    def describe(self) -> str:
        return f"`{getattr(self.value, '__name__', self.value)}`"

    def as_python_constant(self) -> object:
        return self.value

    def reconstruct(self, cg: PyCodegen) -> None:
        cg.load_const(self.value)

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        if self.kind == "is_compiling":
            return ConstantVariable(True)
        if self.kind == "graph_break":
            raise Unsupported("explicit `ember.dynamo.graph_break()` call")
        if self.kind == "disabled":
            which = "torch.compiler" if hasattr(self.value, "_torchdynamo_disable") else "ember.dynamo"
            raise Unsupported(f"{self.describe()} is marked with {which}.disable")
        if self.kind == "allowed":
            target = as_graph_target(self.value)
            return tx.output.create_op("call_function", target, args, kwargs)
        if self.kind == "allow_in_graph":
            # ``allow_in_graph(fn)`` called in the frame: ``fn`` goes in the graph as it is
            if len(args) != 1 or kwargs or not args[0].is_python_constant():
                raise Unsupported("`allow_in_graph` of a value made while tracing")
            return ControlFunctionVariable(args[0].as_python_constant(), "allowed")
        raise Unsupported(f"{self.describe()} is marked with ember.dynamo.disallow_in_graph")


class DeferredAttrVariable(VariableTracker):
    """``obj.name`` whose value cannot be traced (a C method, an opaque
    object): kept as "load it natively" so the failure happens where it is
    used, typically at the call, where a graph break can split the frame."""

    def __init__(self, obj: VariableTracker, name: str, error: Exception) -> None:
        super().__init__(None)
        self.obj = obj
        self.name = name
        self.error = error

    def describe(self) -> str:
        return f"attribute `{self.name}` of {self.obj.describe()}"

    def reconstruct(self, cg: PyCodegen) -> None:
        self.obj.reconstruct(cg)
        cg.load_attr(self.name)

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        raise self.error

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        raise self.error


class OpaqueObjectVariable(VariableTracker):
    """An object of torch's own (an optimizer, a generator, a stream) read from
    the frame: passed through as itself, never looked into. Any use of it is a
    graph break where it is used (at the call, which can split the frame), not
    where it is loaded."""

    def __init__(self, value: Any, source: Source) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def describe(self) -> str:
        return f"`{type(self.value).__qualname__}` object"

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        raise Unsupported(f"{self.describe()} cannot be traced (`.{name}` is run outside the graph)")
