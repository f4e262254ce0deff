"""Size expressions as text: a restricted reader for sympy expressions.

Symbolic sizes (``"2*s0"``) and shape relations (``"Eq(Mod(s0*s1, 8), 0)"``)
travel as the text ``str(sympy_expr)`` prints. :func:`parse_sym_expr` reads
that text back with a small Pratt parser over an allow-list of functions, so
a file can never make ember run code (``sympy.sympify`` would ``eval``).

Grammar: integers, decimals, names (symbols), ``+ - * / // % **``, the
comparisons ``== != < <= > >=``, ``& | ~``, parentheses, and calls to
``Eq Ne Lt Le Gt Ge Mod floor ceiling Max Min Abs And Or Not sqrt`` plus the
torch spellings ``FloorDiv CeilDiv CleanDiv ModularIndexing PythonMod
IntTrueDiv FloatTrueDiv FloorToInt CeilToInt PowByNatural FloatPow TruncToInt
TruncToFloat ToFloat Identity``, which are rewritten into plain sympy
(``FloorDiv(a, b)`` -> ``floor(a/b)``). Other torch functions (``Where``,
``RoundToInt``, bitwise ops, ...) are rejected.

Symbols are created by :func:`size_symbol`: integer, and positive when named
like a size symbol (``s0``, ``s12``; nonnegative for an unbacked size ``u0``),
so every stage gets equal symbols.

sympy is imported on first use, not with this module: a warm start whose frames
and graphs have only static sizes never parses an expression, and importing
sympy is 0.3 s of CPU (most of ``import ember.dynamo``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from functools import cache, lru_cache
from typing import TYPE_CHECKING

from ember.ir.errors import FormatError

if TYPE_CHECKING:
    import sympy

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.\d*(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?|\.\d+)"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"
    r"|(?P<op>\*\*|//|==|!=|<=|>=|[-+*/%<>&|~(),]))"
)
_SIZE_SYMBOL = re.compile(r"s\d+")
#: unbacked size symbols: the size of an op's result that depends on data (``u0``)
_UNBACKED_SYMBOL = re.compile(r"u\d+")
#: a dynamic Python float (``f<N>``, ADR 0044): a real symbol, not an integer
_FLOAT_SYMBOL = re.compile(r"f\d+")
#: a float read from tensor data (``.item()`` of a floating tensor, ``vf<N>``): real, no
#: value while tracing; an int read so is ``v<N>`` (an integer of any sign)
_UNBACKED_FLOAT_SYMBOL = re.compile(r"vf\d+")


@cache
def size_symbol(name: str) -> sympy.Symbol:
    """The sympy symbol ember uses for ``name`` (integer; positive for ``s<N>``,
    nonnegative for an unbacked size ``u<N>``; real for ``f<N>``, a dynamic Python float,
    and ``vf<N>``, a float read from tensor data; any sign for ``v<N>``, an int read so)."""
    import sympy

    if _FLOAT_SYMBOL.fullmatch(name) or _UNBACKED_FLOAT_SYMBOL.fullmatch(name):
        return sympy.Symbol(name, real=True, finite=True)
    if _SIZE_SYMBOL.fullmatch(name):
        return sympy.Symbol(name, integer=True, positive=True)
    if _UNBACKED_SYMBOL.fullmatch(name):
        return sympy.Symbol(name, integer=True, nonnegative=True)
    return sympy.Symbol(name, integer=True)


def _floordiv(a: sympy.Basic, b: sympy.Basic) -> sympy.Basic:
    import sympy

    return sympy.floor(a / b)


def _ceildiv(a: sympy.Basic, b: sympy.Basic) -> sympy.Basic:
    import sympy

    return sympy.ceiling(a / b)


def _modular_indexing(x: sympy.Basic, d: sympy.Basic, m: sympy.Basic) -> sympy.Basic:
    import sympy

    return sympy.Mod(sympy.floor(x / d), m)


class _Tables:
    """The parser's function, constant and operator tables (they name sympy's classes)."""

    def __init__(self) -> None:
        import sympy

        self.functions: dict[str, tuple[int | None, Callable[..., sympy.Basic]]] = {
            "Eq": (2, sympy.Eq),
            "Ne": (2, sympy.Ne),
            "Lt": (2, sympy.Lt),
            "Le": (2, sympy.Le),
            "Gt": (2, sympy.Gt),
            "Ge": (2, sympy.Ge),
            "Mod": (2, sympy.Mod),
            "PythonMod": (2, sympy.Mod),
            "floor": (1, sympy.floor),
            "FloorToInt": (1, sympy.floor),
            "ceiling": (1, sympy.ceiling),
            "CeilToInt": (1, sympy.ceiling),
            "Max": (None, sympy.Max),
            "Min": (None, sympy.Min),
            "Abs": (1, sympy.Abs),
            "sqrt": (1, sympy.sqrt),
            "And": (None, sympy.And),
            "Or": (None, sympy.Or),
            "Not": (1, sympy.Not),
            "FloorDiv": (2, _floordiv),
            "CleanDiv": (2, _floordiv),
            "CeilDiv": (2, _ceildiv),
            "ModularIndexing": (3, _modular_indexing),
            "IntTrueDiv": (2, lambda a, b: a / b),
            "FloatTrueDiv": (2, lambda a, b: a / b),
            "PowByNatural": (2, lambda a, b: a**b),
            "FloatPow": (2, lambda a, b: a**b),
            "TruncToInt": (1, lambda a: sympy.sign(a) * sympy.floor(sympy.Abs(a))),
            "TruncToFloat": (1, lambda a: sympy.sign(a) * sympy.floor(sympy.Abs(a))),
            "ToFloat": (1, lambda a: a),
            "Identity": (1, lambda a: a),
        }
        self.constants: dict[str, sympy.Basic] = {
            "True": sympy.true,
            "False": sympy.false,
            "oo": sympy.oo,
            "zoo": sympy.zoo,
            "nan": sympy.nan,
        }
        self.binary: dict[str, tuple[int, Callable[[sympy.Basic, sympy.Basic], sympy.Basic]]] = {
            "|": (1, lambda a, b: sympy.Or(a, b)),
            "&": (2, lambda a, b: sympy.And(a, b)),
            "==": (3, sympy.Eq),
            "!=": (3, sympy.Ne),
            "<": (3, sympy.Lt),
            "<=": (3, sympy.Le),
            ">": (3, sympy.Gt),
            ">=": (3, sympy.Ge),
            "+": (4, lambda a, b: a + b),
            "-": (4, lambda a, b: a - b),
            "*": (5, lambda a, b: a * b),
            "/": (5, lambda a, b: a / b),
            "//": (5, _floordiv),
            "%": (5, sympy.Mod),
            "**": (7, lambda a, b: a**b),
        }


@cache
def _tables() -> _Tables:
    return _Tables()


_UNARY_PREC = 6


class _ExprParser:
    def __init__(self, text: str, field: str | None) -> None:
        self.text = text
        self.field = field
        self.tokens: list[tuple[str, str, int]] = []
        pos = 0
        stripped = text.rstrip()
        while pos < len(stripped):
            m = _TOKEN.match(stripped, pos)
            if m is None or m.end() == pos:
                while stripped[pos].isspace():
                    pos += 1
                raise self._fail(pos, f"unexpected character {stripped[pos]!r}")
            kind = m.lastgroup or "op"
            self.tokens.append((kind, m.group(kind), m.start(kind)))
            pos = m.end()
        self.i = 0

    def _fail(self, pos: int, what: str) -> FormatError:
        return FormatError(
            f"bad size expression at position {pos}: {what}\n  {self.text}\n  {' ' * pos}^",
            field=self.field,
        )

    def peek(self) -> tuple[str, str, int]:
        if self.i < len(self.tokens):
            return self.tokens[self.i]
        return ("end", "", len(self.text))

    def take(self, value: str) -> None:
        kind, tok, pos = self.peek()
        if tok != value or kind == "end":
            raise self._fail(pos, f"expected {value!r}")
        self.i += 1

    def parse(self) -> sympy.Basic:
        result = self.expr(0)
        kind, tok, pos = self.peek()
        if kind != "end":
            raise self._fail(pos, f"unexpected {tok!r}")
        return result

    def expr(self, min_prec: int) -> sympy.Basic:
        left = self.prefix()
        while True:
            kind, tok, _ = self.peek()
            binary = _tables().binary
            if kind != "op" or tok not in binary:
                return left
            prec, apply = binary[tok]
            if prec < min_prec:
                return left
            self.i += 1
            # ** is right-associative; everything else left-associative.
            right = self.expr(prec if tok == "**" else prec + 1)
            left = self.apply(apply, (left, right))

    def apply(self, fn: Callable[..., sympy.Basic], args: tuple[sympy.Basic, ...]) -> sympy.Basic:
        try:
            return fn(*args)
        except (TypeError, ValueError, ZeroDivisionError) as e:
            raise self._fail(self.peek()[2], f"cannot build the expression: {e}") from None

    def prefix(self) -> sympy.Basic:
        kind, tok, pos = self.peek()
        self.i += 1
        if kind == "num":
            import sympy

            return sympy.Float(tok) if any(c in tok for c in ".eE") else sympy.Integer(int(tok))
        if kind == "name":
            constants = _tables().constants
            if tok in constants:
                return constants[tok]
            if self.peek()[1] == "(":
                return self.call(tok, pos)
            return size_symbol(tok)
        if tok == "(":
            inner = self.expr(0)
            self.take(")")
            return inner
        if tok in ("-", "+", "~"):
            operand = self.expr(_UNARY_PREC)
            if tok == "-":
                return self.apply(lambda a: -a, (operand,))
            if tok == "~":
                import sympy

                return self.apply(sympy.Not, (operand,))
            return operand
        self.i -= 1
        raise self._fail(pos, "expected a number, a name or '('" if kind != "end" else "unexpected end")

    def call(self, name: str, pos: int) -> sympy.Basic:
        functions = _tables().functions
        if name not in functions:
            raise self._fail(pos, f"function {name!r} is not allowed (allowed: {', '.join(sorted(functions))})")
        arity, fn = functions[name]
        self.take("(")
        args: list[sympy.Basic] = []
        if self.peek()[1] != ")":
            args.append(self.expr(0))
            while self.peek()[1] == ",":
                self.i += 1
                args.append(self.expr(0))
        self.take(")")
        if arity is not None and len(args) != arity:
            raise self._fail(pos, f"{name} takes {arity} argument(s), got {len(args)}")
        return self.apply(fn, tuple(args))


def parse_sym_expr(text: str, *, field: str | None = None) -> sympy.Basic:
    """Parse a size expression or relation such as ``"Eq(Mod(s0*s1, 8), 0)"``.

    Never evaluates the text. Raises :class:`FormatError` with the position of
    the problem.
    """
    if not isinstance(text, str) or not text.strip():
        raise FormatError(f"expected a non-empty size expression string, got {text!r}", field=field)
    try:
        return _parse_cached(text)
    except FormatError as e:
        raise e.with_context(field=field) from None


@lru_cache(maxsize=8192)
def _parse_cached(text: str) -> sympy.Basic:
    # sympy expressions are immutable, so sharing parsed results is safe.
    return _ExprParser(text, None).parse()


def sym_text(expr: sympy.Basic) -> str:
    """Canonical text for a size expression: torch spellings rewritten to sympy.

    ``sym_text(FloorDiv(s0 - 1, 2))`` is ``"floor((s0 - 1)/2)"``-like text that
    :func:`parse_sym_expr` reads back to an equal expression.
    """
    return str(parse_sym_expr(str(expr)))


def is_relation(expr: sympy.Basic) -> bool:
    """True for a boolean-valued expression (a relation, And/Or/Not, true/false)."""
    sympy = sys.modules.get("sympy")
    if sympy is None:  # not imported yet: nothing can be a sympy expression
        return False
    return isinstance(expr, (sympy.logic.boolalg.Boolean, sympy.core.relational.Relational))
