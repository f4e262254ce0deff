"""Small trackers the translator needs: the NULL stack marker and
``obj.method`` before the call."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import VariableTracker

if TYPE_CHECKING:
    from ..symbolic_convert import InstructionTranslatorBase as Tx


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

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        return self.obj.call_method(tx, self.name, args, kwargs)
