"""Index arithmetic on sympy: floor division and modulo over non-negative integers.

Loop bodies address memory with sympy expressions over loop symbols. Views and
reshapes need integer division and remainder; sympy's own ``floor``/``Mod``
reason about reals and simplify poorly, so we use two small functions whose
only simplifications are the ones that are always valid for non-negative
integer operands.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy


class FloorDiv(sympy.Function):  # type: ignore[misc]
    """``a // b`` for non-negative integer ``a`` and positive integer ``b``."""

    is_integer = True
    nargs = (2,)

    @classmethod
    def eval(cls, base: sympy.Expr, divisor: sympy.Expr) -> sympy.Expr | None:
        if divisor == 1:
            return base
        if base == 0:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) // int(divisor))
        if isinstance(base, FloorDiv):
            return FloorDiv(base.args[0], base.args[1] * divisor)
        if divisor.is_Integer and base.is_Add:
            # Pull out terms whose coefficient is a multiple of the divisor.
            d = int(divisor)
            kept, pulled = [], []
            for term in base.args:
                coeff, _ = term.as_coeff_Mul()
                if coeff.is_Integer and int(coeff) % d == 0:
                    pulled.append(term / d)
                else:
                    kept.append(term)
            if pulled and kept:
                return sympy.Add(*pulled) + FloorDiv(sympy.Add(*kept), divisor)
        if divisor.is_Integer and base.is_Mul:
            coeff, rest = base.as_coeff_Mul()
            if coeff.is_Integer and int(coeff) % int(divisor) == 0:
                return (coeff / divisor) * rest
        return None


class ModIndex(sympy.Function):  # type: ignore[misc]
    """``a % b`` for non-negative integer ``a`` and positive integer ``b``."""

    is_integer = True
    nargs = (2,)

    @classmethod
    def eval(cls, base: sympy.Expr, divisor: sympy.Expr) -> sympy.Expr | None:
        if divisor == 1 or base == 0:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) % int(divisor))
        if divisor.is_Integer and base.is_Add:
            d = int(divisor)
            kept = []
            for term in base.args:
                coeff, _ = term.as_coeff_Mul()
                if not (coeff.is_Integer and int(coeff) % d == 0):
                    kept.append(term)
            if len(kept) < len(base.args):
                return ModIndex(sympy.Add(*kept), divisor)
        return None


def contiguous_strides(size: Sequence[int]) -> tuple[int, ...]:
    strides: list[int] = []
    acc = 1
    for s in reversed(size):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


def linear_index(
    index: Sequence[sympy.Expr], strides: Sequence[int], offset: int = 0
) -> sympy.Expr:
    terms = [i * s for i, s in zip(index, strides) if s != 0 and i != 0]
    if offset:
        terms.append(sympy.Integer(offset))
    return sympy.Add(*terms) if terms else sympy.Integer(0)


def affine_coefficients(
    expr: sympy.Expr, symbols: Sequence[sympy.Symbol]
) -> tuple[dict[sympy.Symbol, int], int] | None:
    """Coefficients and offset if ``expr`` is affine with integer coefficients in ``symbols``."""
    expr = sympy.expand(expr)
    coeffs: dict[sympy.Symbol, int] = {}
    rest = expr
    for sym in symbols:
        c = expr.coeff(sym)
        if c.free_symbols or not c.is_Integer:
            return None
        coeffs[sym] = int(c)
        rest = rest - c * sym
    rest = sympy.expand(rest)
    if rest.free_symbols & set(symbols) or not rest.is_Integer:
        return None
    return coeffs, int(rest)


def index_symbols(prefix: str, n: int) -> list[sympy.Symbol]:
    return [sympy.Symbol(f"{prefix}{k}", integer=True, nonnegative=True) for k in range(n)]
