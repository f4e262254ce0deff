"""Symbolic sizes in the loop IR.

A size or stride is an ``int`` (static) or a sympy expression over size
symbols (``s0``, ``2*s1``, ``s0*s1*64``) when the graph was traced with
dynamic shapes. Static graphs keep plain ints everywhere, so their generated
code is unchanged. Decisions that must hold for every size the graph accepts
are taken symbolically (:func:`provably`: each size symbol is >= 2, as ember
compiles dynamic dimensions); decisions that only affect speed (parallelize
this loop? fuse these?) use the sizes of the inputs at hand, the *hints*
(:class:`SizeHints`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import sympy
import torch

from ember.ir.shapes import size_relation

Size: TypeAlias = int | sympy.Expr


def exact_divisions(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with every ``floor(a / b)`` whose ``b`` divides ``a`` for all sizes replaced
    by the quotient ``a / b`` (innermost first).

    Whether ``b`` divides ``a`` is sympy's own ``Mod(a, b) == 0`` over the size symbols
    (integers >= 1): padding to a multiple, ``p = w + (7 - w % 7) % 7`` (torchvision's
    Swin windows), is ``w + Mod(6*w, 7)``, and ``Mod(p, 7)`` evaluates to 0. So
    ``floor(p / 7)`` is ``p / 7`` and ``floor(p / floor(p / 7))`` is ``7``: a reshape of
    ``p`` into ``(p // 7, 7)`` then has equal element counts as expressions.
    """
    if not expr.has(sympy.floor):
        return expr
    if isinstance(expr, sympy.floor):
        arg = exact_divisions(expr.args[0])
        # together, not cancel: cancel writes (s0 + 1)/2 as s0/2 + 1/2, an Add whose
        # "denominator" is 1, which read as exact (fuzz seed 843: the 8*((s0 + 1)//2)
        # elements of a buffer became 4*s0 + 4, four too many at even s0)
        num, den = sympy.fraction(sympy.together(arg))
        if den == 1 and all(r.is_Integer for r in num.atoms(sympy.Rational)):
            return num
        if den != 1 and sympy.Mod(num, den) == 0:
            return sympy.cancel(num / den)
        return sympy.floor(arg)
    if not expr.args:
        return expr
    return expr.func(*[exact_divisions(a) for a in expr.args])


def simplify_size(expr: sympy.Expr) -> sympy.Expr:
    """``expr`` with exact divisions resolved (``exact_divisions``) where that leaves no
    fraction (``floor(p / floor(p / 7))`` -> ``7``); otherwise ``expr`` as is
    (``floor(p / 7)`` stays a floor division, which the code printers know)."""
    if not expr.has(sympy.floor):
        return expr
    exact = exact_divisions(expr)
    if exact == expr:
        return expr
    if all(r.is_Integer for r in exact.atoms(sympy.Rational)):
        return exact
    return expr


def as_size(value: Any) -> Size:
    """An int, or the sympy expression of a symbolic size (``SymInt`` or sympy)."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        value = value.node.expr
    if isinstance(value, sympy.Basic) and value.has(sympy.floor):
        value = simplify_size(value)
    if isinstance(value, sympy.Basic):
        if value.is_Integer:
            return int(value)
        if value.is_Float or value.is_Rational:
            return float(value)  # a scalar, not a size (batch norm's 1/(n-1))
        return value
    return int(value)


def as_sizes(values: Iterable[Any]) -> tuple[Size, ...]:
    return tuple(as_size(v) for v in values)


def is_static(values: Iterable[Any]) -> bool:
    return all(isinstance(v, int) for v in values)


def product(values: Iterable[Size]) -> Size:
    n: Size = 1
    for v in values:
        n = n * v
    return as_size(n) if isinstance(n, sympy.Basic) else n


def size_symbols(values: Iterable[Any]) -> set[sympy.Symbol]:
    """The size symbols in ``values`` (ints, expressions or nested sequences of them)."""
    found: set[sympy.Symbol] = set()
    for v in values:
        if isinstance(v, sympy.Basic):
            found |= {s for s in v.free_symbols if isinstance(s, sympy.Symbol)}
        elif isinstance(v, (list, tuple)):
            found |= size_symbols(v)
    return found


def is_size_symbol(sym: sympy.Basic) -> bool:
    """A size symbol (``s0``, ``s12``), as opposed to a loop or index variable."""
    name = getattr(sym, "name", "")
    return len(name) > 1 and name[0] == "s" and name[1:].isdigit()


def provably(relation: Any) -> bool:
    """True when ``relation`` (a bool or a sympy relation over sizes) holds for every size."""
    if isinstance(relation, bool):
        return relation
    if relation is sympy.true or relation is sympy.false:
        return bool(relation)
    return size_relation(relation) is True


class SizeHints:
    """The value of each size symbol for the inputs a graph is compiled with."""

    def __init__(self, hints: Mapping[sympy.Symbol, int] | None = None) -> None:
        self.hints: dict[sympy.Symbol, int] = dict(hints or {})

    def __bool__(self) -> bool:
        return bool(self.hints)

    def hint(self, value: Size) -> int:
        """``value`` for the inputs at hand (for heuristics only: never for correctness)."""
        if isinstance(value, int):
            return value
        got = value.xreplace({s: sympy.Integer(v) for s, v in self.hints.items()})
        if not got.is_number:
            raise ValueError(f"size {value} has symbols without a hint")
        return int(got)

    def hints_of(self, values: Sequence[Size]) -> tuple[int, ...]:
        return tuple(self.hint(v) for v in values)

    def numel(self, values: Sequence[Size]) -> int:
        n = 1
        for v in values:
            n *= self.hint(v)
        return n

    @staticmethod
    def of_inputs(example_inputs: Sequence[Any]) -> SizeHints:
        """Hints from symbolic example inputs (fake tensors and ``SymInt`` with hints)."""
        found: dict[sympy.Symbol, int] = {}
        for x in example_inputs:
            values = [*x.shape, *x.stride()] if isinstance(x, torch.Tensor) else [x]
            for v in values:
                if isinstance(v, torch.SymInt) and isinstance(v.node.expr, sympy.Symbol):
                    hint = getattr(v.node, "hint", None)
                    if hint is not None:
                        found.setdefault(v.node.expr, int(hint))
        return SizeHints(found)


__all__ = ["Size", "SizeHints", "as_size", "as_sizes", "exact_divisions", "is_size_symbol",
           "is_static", "product", "provably", "simplify_size", "size_symbols"]
