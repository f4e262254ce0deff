"""Index arithmetic on sympy: floor division and modulo over non-negative integers.

Loop bodies address memory with sympy expressions over loop symbols. Views and
reshapes need integer division and remainder; sympy's own ``floor``/``Mod``
reason about reals and simplify poorly, so we use two small functions whose
only simplifications are the ones that are always valid for non-negative
integer operands.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

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


def upper_bound(expr: sympy.Expr, ranges: Mapping[sympy.Symbol, int]) -> int | None:
    """Largest value of a non-negative index ``expr`` when each symbol ``s`` < ``ranges[s]``."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        size = ranges.get(expr)
        return None if size is None else max(int(size) - 1, 0)
    if expr.is_Add:
        total = 0
        for term in expr.args:
            b = upper_bound(term, ranges)
            if b is None or b < 0:
                return None
            total += b
        return total
    if expr.is_Mul:
        coeff, rest = expr.as_coeff_Mul()
        b = upper_bound(rest, ranges)
        if not coeff.is_Integer or int(coeff) < 0 or b is None:
            return None
        return int(coeff) * b
    if isinstance(expr, FloorDiv) and expr.args[1].is_Integer:
        b = upper_bound(expr.args[0], ranges)
        return None if b is None else b // int(expr.args[1])
    if isinstance(expr, ModIndex) and expr.args[1].is_Integer:
        b = upper_bound(expr.args[0], ranges)
        cap = int(expr.args[1]) - 1
        return cap if b is None else min(b, cap)
    return None


def simplify_index(expr: sympy.Expr, ranges: Mapping[sympy.Symbol, int]) -> sympy.Expr:
    """Undo the div/mod a reshape introduced, using loop ranges.

    ``a % m`` with ``a < m`` is ``a``, and ``c*d*(a // d) + c*(a % d)`` is ``c*a``: a
    (512, 512) view of an (8, 64, 512) buffer indexed ``512*(i % 64) + 32768*((i // 64) % 8)``
    becomes ``512*i``, which is affine again (a strided view, a mergeable loop).
    """
    if expr.is_Atom or not (expr.has(ModIndex) or expr.has(FloorDiv)):
        return expr
    args = tuple(simplify_index(a, ranges) for a in expr.args)
    if args != expr.args:
        expr = expr.func(*args)
    if isinstance(expr, ModIndex) and expr.args[1].is_Integer:
        b = upper_bound(expr.args[0], ranges)
        if b is not None and b < int(expr.args[1]):
            return expr.args[0]
    if expr.is_Add:
        return _combine_div_mod(expr)
    return expr


def _combine_div_mod(expr: sympy.Expr) -> sympy.Expr:
    """``c*(a % d) + c*d*(a // d)`` -> ``c*a`` inside a sum, repeatedly."""
    terms = list(expr.args)
    changed = True
    while changed:
        changed = False
        for i, t in enumerate(terms):
            c, rest = t.as_coeff_Mul()
            if not isinstance(rest, ModIndex) or not rest.args[1].is_Integer:
                continue
            a, d = rest.args
            for j, u in enumerate(terms):
                c2, rest2 = u.as_coeff_Mul()
                if rest2 == FloorDiv(a, d) and c2 == c * d:
                    terms = [x for k, x in enumerate(terms) if k not in (i, j)] + [c * a]
                    changed = True
                    break
            if changed:
                break
    return sympy.Add(*terms)


def print_index(
    expr: sympy.Expr, *, div: str, mul: str, integer: Callable[[int], str] = str
) -> str:
    """An index expression as source text: ``div`` is the language's floor division of
    non-negative integers, ``mul`` joins factors, ``integer`` prints a constant. The
    backends' printers (C++ ``cexpr``, Triton ``texpr``) differ only in these."""

    def p(e: sympy.Expr) -> str:
        if isinstance(e, sympy.Integer):
            return integer(int(e))
        if isinstance(e, sympy.Symbol):
            return str(e.name)
        if isinstance(e, FloorDiv):
            return f"({p(e.args[0])} {div} {p(e.args[1])})"
        if isinstance(e, ModIndex):
            return f"({p(e.args[0])} % {p(e.args[1])})"
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(p(a) for a in e.args) + ")"
        if isinstance(e, sympy.Mul):
            return "(" + mul.join(p(a) for a in e.args) + ")"
        raise NotImplementedError(f"cannot print index expression {e!r}")

    return p(expr)
