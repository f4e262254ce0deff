"""Index arithmetic on sympy: floor division and modulo over non-negative integers.

Loop bodies address memory with sympy expressions over loop symbols. Views and
reshapes need integer division and remainder; sympy's own ``floor``/``Mod``
reason about reals and simplify poorly, so we use two small functions whose
only simplifications are the ones that are always valid for non-negative
integer operands.

Sizes (loop ranges, strides, divisors) may be size symbols (``s0``) when the
graph has dynamic shapes; every simplification here then holds for every
value those symbols can take (see ``sizes.provably``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import sympy

from .sizes import Size, as_size, is_size_symbol, provably


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
        if not divisor.is_Integer:
            return _floordiv_symbolic(base, divisor)
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


def _exact_quotient(term: sympy.Expr, divisor: sympy.Expr) -> sympy.Expr | None:
    """``term / divisor`` when it is a polynomial (an exact multiple), else None."""
    q = sympy.cancel(term / divisor)
    num, den = sympy.fraction(sympy.together(q))  # cancel may leave s0/2 + 1/2: not exact
    return q if den == 1 and all(r.is_Integer for r in num.atoms(sympy.Rational)) else None


def _floordiv_symbolic(base: sympy.Expr, divisor: sympy.Expr) -> sympy.Expr | None:
    """``(q*d + r) // d`` -> ``q + r // d`` for a symbolic divisor ``d``."""
    terms = base.args if base.is_Add else (base,)
    pulled: list[sympy.Expr] = []
    kept: list[sympy.Expr] = []
    for term in terms:
        q = _exact_quotient(term, divisor)
        (kept if q is None else pulled).append(term if q is None else q)
    if not pulled:
        return None
    if not kept:
        return sympy.Add(*pulled)
    return sympy.Add(*pulled) + FloorDiv(sympy.Add(*kept), divisor)


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
        if not divisor.is_Integer:
            terms = base.args if base.is_Add else (base,)
            kept = [t for t in terms if _exact_quotient(t, divisor) is None]
            if len(kept) < len(terms):
                return ModIndex(sympy.Add(*kept), divisor) if kept else sympy.Integer(0)
        return None


def contiguous_strides(size: Sequence[Size]) -> tuple[Size, ...]:
    strides: list[Size] = []
    acc: Size = 1
    for s in reversed(size):
        strides.append(acc)
        acc = acc * max(s, 1) if isinstance(s, int) else as_size(acc * s)
    return tuple(reversed(strides))


def linear_index(
    index: Sequence[sympy.Expr], strides: Sequence[Size], offset: Size = 0
) -> sympy.Expr:
    terms = [i * s for i, s in zip(index, strides) if s != 0 and i != 0]
    if offset != 0:
        terms.append(sympy.sympify(offset))
    return sympy.Add(*terms) if terms else sympy.Integer(0)


def affine_coefficients(
    expr: sympy.Expr, symbols: Sequence[sympy.Symbol]
) -> tuple[dict[sympy.Symbol, Size], Size] | None:
    """Coefficients and offset if ``expr`` is affine in ``symbols`` with coefficients that
    are integers or expressions of sizes (never of ``symbols``)."""
    expr = sympy.expand(expr)
    loop = set(symbols)
    coeffs: dict[sympy.Symbol, Size] = {}
    rest = expr
    for sym in symbols:
        c = expr.coeff(sym)
        if c.free_symbols & loop or not _is_size(c):
            return None
        coeffs[sym] = as_size(c)
        rest = rest - c * sym
    rest = sympy.expand(rest)
    if rest.free_symbols & loop or not _is_size(rest):
        return None
    return coeffs, as_size(rest)


def _is_size(expr: sympy.Expr) -> bool:
    """An integer, or a polynomial over size symbols with integer coefficients."""
    if expr.is_Integer:
        return True
    if expr.is_number or expr.has(FloorDiv, ModIndex, sympy.floor, sympy.Mod):
        return False
    return all(s.is_integer for s in expr.free_symbols) and sympy.fraction(
        sympy.together(expr))[1] == 1


def index_symbols(prefix: str, n: int) -> list[sympy.Symbol]:
    return [sympy.Symbol(f"{prefix}{k}", integer=True, nonnegative=True) for k in range(n)]


def upper_bound(expr: sympy.Expr, ranges: Mapping[sympy.Symbol, Size]) -> Size | None:
    """Largest value of a non-negative index ``expr`` when each symbol ``s`` < ``ranges[s]``
    (an expression of sizes when the ranges are symbolic); None when unknown."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        size = ranges.get(expr)
        if size is None:  # a size symbol (a stride, an offset) is its own bound
            return expr if is_size_symbol(expr) else None
        return max(size - 1, 0) if isinstance(size, int) else as_size(size - 1)
    if expr.is_Add:
        total: Size = 0
        for term in expr.args:
            b = upper_bound(term, ranges)
            if b is None or not provably(sympy.sympify(b) >= 0):
                return None
            total = total + b
        return as_size(total) if isinstance(total, sympy.Basic) else total
    if expr.is_Mul:
        coeff, rest = expr.as_coeff_Mul()
        if not coeff.is_Integer or int(coeff) < 0:
            return None
        if rest.is_Mul:  # a product of non-negative factors (``s1*x0``): of their bounds
            prod: Size = int(coeff)
            for factor in rest.args:
                fb = upper_bound(factor, ranges)
                if fb is None or not provably(sympy.sympify(fb) >= 0):
                    return None
                prod = prod * fb
            return as_size(prod) if isinstance(prod, sympy.Basic) else prod
        b = upper_bound(rest, ranges)
        if b is None:
            return None
        return int(coeff) * b if isinstance(b, int) else as_size(int(coeff) * b)
    if isinstance(expr, FloorDiv) and expr.args[1].is_Integer:
        b = upper_bound(expr.args[0], ranges)
        if b is None:
            return None
        return b // int(expr.args[1]) if isinstance(b, int) else FloorDiv(b, expr.args[1])
    if isinstance(expr, ModIndex):
        b = upper_bound(expr.args[0], ranges)
        cap = as_size(expr.args[1] - 1)
        if b is None:
            return cap
        if isinstance(b, int) and isinstance(cap, int):
            return min(b, cap)
        return b if provably(sympy.sympify(b) <= cap) else cap
    return None


def simplify_index(expr: sympy.Expr, ranges: Mapping[sympy.Symbol, Size]) -> sympy.Expr:
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
    if isinstance(expr, ModIndex):
        b = upper_bound(expr.args[0], ranges)
        if b is not None and provably(sympy.sympify(b) < expr.args[1]):
            return expr.args[0]
    if expr.is_Add:
        return _combine_div_mod(expr)
    return expr


def _split_term(term: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr] | None:
    """(coefficient, the one FloorDiv/ModIndex factor) of a product, or None."""
    factors = sympy.Mul.make_args(term)
    atoms = [f for f in factors if isinstance(f, (FloorDiv, ModIndex))]
    if len(atoms) != 1:
        return None
    return sympy.Mul(*[f for f in factors if f is not atoms[0]]), atoms[0]


def _combine_div_mod(expr: sympy.Expr) -> sympy.Expr:
    """``c*(a % d) + c*d*(a // d)`` -> ``c*a`` inside a sum, repeatedly."""
    terms = list(expr.args)
    changed = True
    while changed:
        changed = False
        for i, t in enumerate(terms):
            split = _split_term(t)
            if split is None or not isinstance(split[1], ModIndex):
                continue
            c, (a, d) = split[0], split[1].args
            for j, u in enumerate(terms):
                other = _split_term(u)
                if other is None or other[1] != FloorDiv(a, d):
                    continue
                if sympy.expand(other[0] - c * d) == 0:
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
        if isinstance(e, (ModIndex, sympy.Mod)):
            return f"({p(e.args[0])} % {p(e.args[1])})"
        if isinstance(e, sympy.floor):  # floor(a/b) of sizes (non-negative)
            num, den = sympy.fraction(sympy.together(e.args[0]))
            return f"({p(num)} {div} {p(den)})"
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) > 0:
            return "(" + mul.join([p(e.base)] * int(e.exp)) + ")"
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(p(a) for a in e.args) + ")"
        if isinstance(e, sympy.Mul):
            return "(" + mul.join(p(a) for a in e.args) + ")"
        raise NotImplementedError(f"cannot print index expression {e!r}")

    return p(expr)
