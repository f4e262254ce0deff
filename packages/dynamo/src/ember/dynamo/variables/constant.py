"""Python values known exactly at trace time: numbers, strings, None, dtypes.

They are folded: operations on them run now, in Python, and their results
are constants too. Values read from the frame were guarded by the builder.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from typing import TYPE_CHECKING, Any

import torch

from ember.ir import Source

from ..errors import Unsupported, UserRaised
from .base import VariableTracker

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx

# Types whose values are immutable, so folding any of their methods is safe.
IMMUTABLE_TYPES: tuple[type, ...] = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    type(Ellipsis),
    type(NotImplemented),
    range,
    slice,
    frozenset,
    torch.dtype,
    torch.device,
    torch.Size,
    torch.layout,
    torch.memory_format,
    types.CodeType,
    # metadata objects folded from constants (inspect.signature, dataclasses.fields)
    inspect.Signature,
    inspect.Parameter,
    dataclasses.Field,
    type(dataclasses.MISSING),
)


def is_typing_value(value: Any) -> bool:
    """A type annotation object (``typing.List[int]``, ``list[int]``,
    ``Optional[T]``, a ``TypeVar``): immutable, used only as a marker."""
    return type(value).__module__ == "typing" or isinstance(
        value, (types.GenericAlias, types.UnionType)
    )


def is_constant_value(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(is_constant_value(v) for v in value)
    return isinstance(value, IMMUTABLE_TYPES)


class ConstantVariable(VariableTracker):
    def __init__(self, value: Any, source: Source | None = None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def describe(self) -> str:
        return f"constant {self.value!r}"

    def as_python_constant(self) -> Any:
        return self.value

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        try:
            attr = getattr(self.value, name)
        except AttributeError as e:
            raise UserRaised(
                AttributeError, f"{type(self.value).__name__} has no attribute `{name}` (AttributeError)"
            ) from e
        if callable(attr) and not is_constant_value(attr) and not isinstance(attr, type):
            return ConstantMethodVariable(self, name)
        if not is_constant_value(attr):
            return tx.wrap_constant(attr)
        return ConstantVariable(attr)

    def unpack(self, tx: Tx) -> list[VariableTracker]:
        try:
            items = list(self.value)
        except TypeError as e:
            raise Unsupported(f"{self.describe()} is not iterable") from e
        return [ConstantVariable(v) for v in items]

    def reconstruct(self, cg: PyCodegen) -> None:
        cg.load_const(self.value)

    def __repr__(self) -> str:
        return f"Const({self.value!r})"


class ConstantMethodVariable(VariableTracker):
    """A bound method of a constant (``"{}".format``, ``(1, 2).index``)."""

    def __init__(self, obj: ConstantVariable, name: str) -> None:
        super().__init__(None)
        self.obj = obj
        self.name = name

    def describe(self) -> str:
        return f"method `{self.name}` of {self.obj.describe()}"

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
            raise Unsupported(f"{self.describe()} called with non-constant arguments")
        cargs = [a.as_python_constant() for a in args]
        ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
        try:
            result = getattr(self.obj.value, self.name)(*cargs, **ckw)
        except Exception as e:
            raise Unsupported(
                f"{self.describe()} raised {type(e).__name__}: {e}"
            ) from e
        return tx.wrap_constant(result)


class OpaqueConstantVariable(ConstantVariable):
    """An object used only by identity (compared with ``is``, passed along)."""

    def describe(self) -> str:
        return f"`{type(self.value).__name__}` object"
