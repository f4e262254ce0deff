"""The root of the tracker family: what every symbolic value can do.

A tracker stands for one Python value during symbolic execution. Each kind
of value has its own subclass; the translator only talks to this interface.
Defaults raise :class:`~ember.dynamo.errors.Unsupported` with a reason, so a
missing capability is always a named failure, never a wrong result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.ir import Source

from ..errors import Unsupported

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx


class NotConstant(Unsupported):
    """Raised by ``as_python_constant`` for values only known symbolically.

    An ``Unsupported``: code that needed a Python value where only a
    symbolic one exists is a graph break, not an internal error."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} is used where a Python constant is needed")


class VariableTracker:
    """A symbolic Python value. ``source`` says how to reach the real one."""

    source: Source | None
    #: an object created during this capture (nothing outside the frame can be it)
    fresh: bool = False

    def __init__(self, source: Source | None = None) -> None:
        self.source = source

    # --- what it is -------------------------------------------------------
    def python_type(self) -> type:
        raise Unsupported(f"type of {self.describe()} is unknown while tracing")

    def describe(self) -> str:
        return type(self).__name__.replace("Variable", "").lower() or "value"

    def is_python_constant(self) -> bool:
        try:
            self.as_python_constant()
        except NotConstant:
            return False
        return True

    def as_python_constant(self) -> Any:
        raise NotConstant(self.describe())

    # --- how Python uses it -----------------------------------------------
    def truth(self, tx: Tx) -> bool:
        if self.is_python_constant():
            return bool(self.as_python_constant())
        raise Unsupported(f"truth value of {self.describe()} is not known while tracing")

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        raise Unsupported(f"attribute `{name}` of {self.describe()} cannot be traced")

    def store_attr(self, tx: Tx, name: str, value: VariableTracker) -> None:
        raise Unsupported(f"attribute write `{name}` on {self.describe()}")

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        raise Unsupported(f"calling {self.describe()} cannot be traced")

    def call_method(
        self,
        tx: Tx,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        method = self.var_getattr(tx, name)
        return method.call_function(tx, args, kwargs)

    def unpack(self, tx: Tx) -> list[VariableTracker]:
        """The items, for iteration and unpacking."""
        raise Unsupported(f"iterating over {self.describe()} cannot be traced")

    def reconstruct(self, cg: PyCodegen) -> None:
        """Emit bytecode that pushes the real value."""
        if self.source is not None:
            cg.load_source(self.source)
            return
        raise Unsupported(f"{self.describe()} created while tracing cannot be returned or kept alive")

    def __repr__(self) -> str:
        src = f" {self.source.expr()}" if self.source is not None else ""
        return f"<{type(self).__name__}{src}>"
