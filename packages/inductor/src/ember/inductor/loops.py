"""Loop simplification shared by all backends: merge adjacent dims that address memory linearly.

Two adjacent loops ``(v_k, v_k1)`` of sizes ``(s_k, s_k1)`` merge into one loop
``w`` of size ``s_k * s_k1`` when every memory access uses them as
``c * s_k1 * v_k + c * v_k1`` (same ``c`` per access). Such accesses become
``c * w``; any other use of the old symbols (values computed from the index)
becomes ``w // s_k1`` and ``w % s_k1``.

Accesses are first simplified with the loop ranges (``index.simplify_index``), so the
div/mod a reshape introduced does not hide an affine access.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import sympy

from .index import FloorDiv, ModIndex, affine_coefficients, simplify_index
from .sizes import Size, as_size


@dataclass(frozen=True)
class MergedLoops:
    sizes: tuple[Size, ...]
    symbols: tuple[sympy.Symbol, ...]
    rewrite: Callable[[sympy.Expr], sympy.Expr]

    @property
    def ranges(self) -> dict[sympy.Symbol, Size]:
        """Each (merged) loop symbol -> its trip count."""
        return dict(zip(self.symbols, self.sizes))


def merge_loops(
    sizes: Sequence[Size],
    symbols: Sequence[sympy.Symbol],
    accesses: Sequence[sympy.Expr],
    known: Mapping[sympy.Symbol, Size] | None = None,
) -> MergedLoops:
    """Merge ``symbols``' loops where every access allows; ``known``: ranges of enclosing loops."""
    before = {**(known or {}), **dict(zip(symbols, sizes))}
    merged = _merge(sizes, symbols, [simplify_index(e, before) for e in accesses])
    after = {**(known or {}), **merged.ranges}
    inner = merged.rewrite

    def rewrite(expr: sympy.Expr) -> sympy.Expr:
        return simplify_index(inner(simplify_index(expr, before)), after)

    return MergedLoops(merged.sizes, merged.symbols, rewrite)


def _merge(
    sizes: Sequence[Size], symbols: Sequence[sympy.Symbol], accesses: Sequence[sympy.Expr]
) -> MergedLoops:
    sizes = list(sizes)
    syms = list(symbols)
    fits = [affine_coefficients(e, syms) if e.free_symbols & set(syms) else None for e in accesses]
    relevant = [(e, f) for e, f in zip(accesses, fits) if e.free_symbols & set(syms)]
    # groups[k] = original dim indices merged into new dim k
    groups: list[list[int]] = [[0]] if sizes else []
    for k in range(1, len(sizes)):
        last = groups[-1][-1]
        ok = all(
            f is not None and _same(f[0][syms[last]], f[0][syms[k]] * sizes[k]) for _, f in relevant
        )
        if ok:
            groups[-1].append(k)
        else:
            groups.append([k])
    if all(len(g) == 1 for g in groups):
        return MergedLoops(tuple(sizes), tuple(syms), lambda e: e)
    new_syms = [syms[g[-1]] for g in groups]
    new_sizes = [_group_size(sizes, g) for g in groups]
    generic: dict[sympy.Symbol, sympy.Expr] = {}
    affine_map: dict[sympy.Symbol, sympy.Expr] = {}
    for g, w in zip(groups, new_syms):
        inner: Size = 1
        for k in reversed(g):
            generic[syms[k]] = (
                ModIndex(FloorDiv(w, inner), sizes[k]) if k != g[0] else FloorDiv(w, inner)
            )
            affine_map[syms[k]] = w if k == g[-1] else sympy.Integer(0)
            inner = inner * sizes[k]
    sym_set = set(syms)

    def rewrite(expr: sympy.Expr) -> sympy.Expr:
        if not expr.free_symbols & sym_set:
            return expr
        fit = affine_coefficients(expr, syms)
        if fit is not None and _mergeable(fit[0], groups, syms, sizes):
            return sympy.expand(expr.xreplace(affine_map))
        return expr.xreplace(generic)

    return MergedLoops(tuple(new_sizes), tuple(new_syms), rewrite)


def _same(a: Size, b: Size) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return bool(sympy.expand(sympy.sympify(a) - b) == 0)


def _group_size(sizes: Sequence[Size], group: Sequence[int]) -> Size:
    n: Size = 1
    for k in group:
        n = n * sizes[k]
    return n if isinstance(n, int) else as_size(n)


def _mergeable(
    coeffs: dict[sympy.Symbol, Size],
    groups: list[list[int]],
    syms: list[sympy.Symbol],
    sizes: list[Size],
) -> bool:
    for g in groups:
        for a, b in zip(g, g[1:]):
            if not _same(coeffs[syms[a]], coeffs[syms[b]] * sizes[b]):
                return False
    return True
