"""Symbolic sizes: Python ints (floats, bools) computed from dynamic dimensions.

A :class:`SymNodeVariable` is what ``x.shape[0]`` is when that dimension is
dynamic: an FX node computing the value in the graph (``x.size(0)``,
``mul(size, 2)``) and a ``torch.SymInt`` example carrying its sympy
expression. Arithmetic makes new nodes; a decision Python must take now
(``if n > 4``, ``range(n)``, ``lst[n]``) asks the shape environment, which
answers from the value at hand and records a guard on the relation, so the
graph is reused only where the same decision holds.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from ember.ir.shapes import python_value

from ..errors import Unsupported
from .base import VariableTracker
from .constant import ConstantVariable

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx

log = logging.getLogger("ember.dynamo.dynamic")

SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


def is_symbolic(value: object) -> bool:
    """A SymInt/SymFloat/SymBool whose expression is not a plain number."""
    if not isinstance(value, SYM_TYPES):
        return False
    expr = value.node.expr
    return not (getattr(expr, "is_number", False) or expr in (True, False))


class SymNodeVariable(VariableTracker):
    """A symbolic scalar: its FX node and its ``torch.Sym*`` example value."""

    def __init__(self, node: torch.fx.Node, example: Any, source: Any = None) -> None:
        super().__init__(source)  # a source: a dynamic float read from the frame (ADR 0044)
        self.node = node
        self.example = example

    def python_type(self) -> type:
        if isinstance(self.example, torch.SymBool):
            return bool
        return float if isinstance(self.example, torch.SymFloat) else int

    def describe(self) -> str:
        return f"symbolic {self.python_type().__name__} `{self.example}`"

    def __repr__(self) -> str:
        return f"Sym({self.example})"

    def is_python_constant(self) -> bool:
        return False

    def as_python_constant(self) -> Any:
        """The value now, specialized: the graph is guarded to this value from here on."""
        value = python_value(self.example)  # guards: ``int(s0)`` specializes ``s0``
        log.debug("specializing %s to %r", self.example, value)
        return value

    def specialized(self) -> ConstantVariable:
        return ConstantVariable(self.as_python_constant())

    def truth(self, tx: Tx) -> bool:
        return bool(self.example)

    def unpack(self, tx: Tx) -> list[VariableTracker]:
        raise Unsupported(f"iterating over {self.describe()}")

    def reconstruct(self, cg: PyCodegen) -> None:
        if self.source is not None:  # a frame's float, unchanged: read it again
            cg.load_source(self.source)
            return
        cg.load_tensor(self)  # the graph computes it and returns it


class SliceVariable(VariableTracker):
    """``a:b:c`` where a bound is symbolic (``x[:, : y.shape[1]]``)."""

    def __init__(self, parts: list[VariableTracker]) -> None:
        super().__init__(None)
        self.parts = list(parts)

    def python_type(self) -> type:
        return slice

    def describe(self) -> str:
        return "slice with a symbolic bound"

    def is_python_constant(self) -> bool:
        return False

    def as_python_constant(self) -> Any:
        return slice(*[_constant(p) for p in self.parts])

    def reconstruct(self, cg: PyCodegen) -> None:
        cg.load_const(self.as_python_constant())


def _constant(v: VariableTracker) -> Any:
    return v.as_python_constant()


def make_slice(parts: list[VariableTracker]) -> VariableTracker:
    """The tracker for ``slice(*parts)``: a constant unless a bound is symbolic (a bound
    that is a 0-d tensor of known value is given as that value: ``known_scalars``)."""
    if any(isinstance(p, SymNodeVariable) for p in parts) and all(
        p.is_python_constant() or isinstance(p, SymNodeVariable) for p in parts
    ):
        return SliceVariable(parts)
    if not all(p.is_python_constant() for p in parts):
        raise Unsupported("slice bounds that are not constants (data-dependent slicing)")
    return ConstantVariable(slice(*[p.as_python_constant() for p in parts]))


__all__ = ["SYM_TYPES", "SliceVariable", "SymNodeVariable", "is_symbolic", "make_slice"]
