"""Symbolic sizes at run time: ember's SymNode and the shape environment behind it.

Graph IR sizes may be sympy expressions over size symbols (``"2*s0"``). While
a program is traced, such a size lives inside fake tensors as a
``torch.SymInt`` whose node is a :class:`SymNode`: a sympy expression plus
its *hint*, the value it has for the inputs being traced. torch calls the
node's methods for arithmetic (``add``, ``mul``, ``int_floordiv``, ...) and
whenever it needs a concrete answer (``guard_bool``, ``guard_int``,
``guard_size_oblivious``, ...). Those answers come from the hint, and the
:class:`ShapeEnv` records each relation it answered as a *guard*: the
compiled program is valid exactly while the guards hold. Relations the
environment can decide from the symbols' ranges alone (``s0 >= 1`` when
``s0 >= 2``) are answered without a guard, so only the relations the program
actually branched on are recorded.

Every stage that makes or reads symbolic fake tensors uses these classes:
ember.dynamo creates symbols for dynamic input dimensions, ember.aotgrad
traces with them, ember.inductor reads ``node.expr``, and ember.ir rebuilds
symbolic fake inputs from saved graphs. Which dimensions are dynamic, and
where a symbol's value comes from, is the frontend's business (ember.dynamo).

The nodes report ``shape_env = None`` to torch: torch then treats them as a
foreign symbolic implementation (the path torch_xla uses) and asks the node
itself for every decision instead of reaching into torch's own ShapeEnv.

*Unbacked* symbols (``u0``, ADR 0046) are sizes that depend on tensor data: the
number of True values of a mask, the rows ``nonzero`` returns. Tracing never
knows their value, so no relation over them is answered from a value: one the
symbols' ranges decide (``u0 >= 0``) is answered, any other raises
:class:`DataDependentError` (capture breaks the graph there, as torch does on a
data-dependent guard) and never becomes a guard. Their *hint* (what heuristics
read) is a stand-in, :data:`UNBACKED_HINT` or the largest value the op allows.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import torch

from ember.ir.symbolic import is_relation, size_symbol

if TYPE_CHECKING:
    import sympy

Hint: TypeAlias = int | float | bool
Expr: TypeAlias = "sympy.Basic"

#: Smallest value a dynamic size symbol may take: 0 and 1 are specialized
#: (a size-1 dimension broadcasts, a size-0 one is empty), as in torch.
MIN_SIZE = 2

#: The hint of an unbacked size without an upper bound: read by heuristics only
#: (loop parallelism, tiling), never by a decision that changes a result. torch's value.
UNBACKED_HINT = 8192


class DataDependentError(RuntimeError):
    """A relation over an unbacked size (one that depends on tensor data) that tracing
    cannot decide: the program branches on data (``if mask.sum() > 3`` spelled as sizes,
    ``int(x[mask].shape[0])``). Capture breaks the graph here; a backend tracing such a
    graph refuses it and the graph runs eagerly."""

    def __init__(self, expr: object) -> None:
        super().__init__(
            f"the program decides on {expr}, which depends on tensor data (an unbacked size "
            "such as the number of True values of a mask, or a value `.item()` read); it "
            "cannot be decided while tracing"
        )
        self.expr = expr


@dataclass(frozen=True, slots=True)
class ShapeGuard:
    """A relation the traced program relied on, and where it was decided."""

    expr: Expr
    where: str = ""


@dataclass
class ShapeEnv:
    """Size symbols with their hints and ranges, and the relations guarded on them."""

    hints: dict[sympy.Symbol, int] = field(default_factory=dict)
    lower: dict[sympy.Symbol, int] = field(default_factory=dict)
    guards: list[ShapeGuard] = field(default_factory=list)
    #: Symbols a guard pinned to one value (``Eq(s2, 32)``): expressions made from
    #: then on use the value, so the rest of the trace is static in that symbol.
    replacements: dict[sympy.Symbol, sympy.Integer] = field(default_factory=dict)
    #: Called when a guard is recorded; returns where (user file:line) it was decided.
    site: Callable[[], str] | None = None
    #: unbacked symbols (``u<N>``, sizes that depend on data) -> the hint heuristics read
    unbacked: dict[sympy.Symbol, int] = field(default_factory=dict)
    #: the largest value an unbacked symbol may take, where known (a mask's element count)
    upper: dict[sympy.Symbol, int] = field(default_factory=dict)
    #: unbacked *values* (ADR 0060): numbers read from tensor data by ``.item()`` (``v<N>``
    #: ints of any sign, ``vf<N>`` floats) -> their Python type; each is also in ``unbacked``
    #: (no relation over one is decided from a value), never in ``lower`` (no range)
    unbacked_values: dict[sympy.Symbol, type] = field(default_factory=dict)
    #: Dynamic Python floats (``f<N>``, ADR 0044) and their values for the traced inputs.
    floats: dict[sympy.Symbol, float] = field(default_factory=dict)
    #: Float symbols a decision was taken on (``if t > 0.5``, a kernel choice), with
    #: where (user file:line, "" when the backend decided): the frontend pins each to
    #: its value (guarded equal), so no relation over floats is ever a guard.
    pinned_floats: dict[sympy.Symbol, str] = field(default_factory=dict)
    _known: dict[Expr, bool] = field(default_factory=dict)

    # -- symbols -----------------------------------------------------------
    def new_symbol(self, hint: int, *, lower: int = MIN_SIZE) -> sympy.Symbol:
        """A fresh size symbol ``s<N>`` whose value is ``hint`` for the inputs traced now."""
        sym = size_symbol(f"s{len(self.hints)}")
        while sym in self.hints:
            sym = size_symbol(f"s{len(self.hints) + 1}")
        self.bind(sym, hint, lower=lower)
        return sym

    def new_unbacked(self, upper: int | None = None) -> sympy.Symbol:
        """A fresh unbacked size symbol ``u<N>`` (``>= 0``; at most ``upper`` when given):
        the size of a result that depends on tensor data. It has no value while tracing."""
        sym = size_symbol(f"u{len(self.unbacked)}")
        hint = UNBACKED_HINT if upper is None else max(MIN_SIZE, min(int(upper), UNBACKED_HINT))
        self.unbacked[sym] = hint
        self.lower[sym] = 0
        if upper is not None:
            self.upper[sym] = int(upper)
        return sym

    def new_unbacked_value(self, pytype: type) -> sympy.Symbol:
        """A fresh unbacked value symbol: the number ``.item()`` reads from a tensor, an int
        ``v<N>`` (any sign) or a float ``vf<N>``. It has no value and no range while
        tracing; its hint (for heuristics only) is :data:`UNBACKED_HINT`."""
        prefix = "vf" if pytype is float else "v"
        n = sum(1 for t in self.unbacked_values.values() if (t is float) == (pytype is float))
        sym = size_symbol(f"{prefix}{n}")
        self.unbacked_values[sym] = pytype
        self.unbacked[sym] = UNBACKED_HINT
        return sym

    def has_unbacked(self, expr: Expr) -> bool:
        """Whether ``expr`` depends on an unbacked symbol."""
        import sympy
        return bool(self.unbacked) and any(
            s in self.unbacked for s in sympy.sympify(expr).free_symbols
        )

    def new_float(self, hint: float) -> sympy.Symbol:
        """A fresh float symbol ``f<N>`` whose value is ``hint`` for the inputs traced now."""
        from ember.ir.symbolic import size_symbol as make
        sym = make(f"f{len(self.floats)}")
        self.floats[sym] = float(hint)
        return sym

    def bind(self, sym: sympy.Symbol, hint: int, *, lower: int = MIN_SIZE) -> None:
        """Register an existing symbol (read from a graph file or another environment)."""
        self.hints[sym] = int(hint)
        self.lower[sym] = lower

    def sym_int(self, expr: Expr | int) -> torch.SymInt | int:
        """``expr`` as a value torch accepts as a size: an int, or a SymInt over this environment."""
        import sympy
        if isinstance(expr, int):
            return expr
        expr = sympy.sympify(expr)
        if expr.is_Integer:
            return int(expr)
        return torch.SymInt(SymNode(self, expr, int(self.evaluate(expr)), int))  # type: ignore[no-untyped-call]

    def sym_value(self, expr: Expr, pytype: type) -> torch.SymInt | torch.SymFloat | torch.SymBool:
        """``expr`` as a symbolic ``pytype`` (int, float or bool) over this environment."""
        import sympy
        expr = sympy.sympify(expr)
        hint = pytype(self.evaluate(expr))
        wrap: dict[type, Callable[[SymNode], torch.SymInt | torch.SymFloat | torch.SymBool]] = {
            int: torch.SymInt, float: torch.SymFloat, bool: torch.SymBool,
        }
        return wrap[pytype](SymNode(self, expr, hint, pytype))

    def evaluate(self, expr: Expr) -> Hint:
        """The value of ``expr`` for the hints (the inputs traced now; an unbacked symbol's
        stand-in hint, so a value with one is for heuristics only)."""
        import sympy
        values: dict[Any, Any] = {s: sympy.Integer(v) for s, v in self.hints.items()}
        values.update({s: (sympy.Float(v) if self.unbacked_values.get(s) is float else sympy.Integer(v))
                       for s, v in self.unbacked.items()})
        values.update({s: sympy.Float(v) for s, v in self.floats.items()})
        value = sympy.sympify(expr).xreplace(values)
        if value is sympy.true or value is sympy.false:
            return bool(value)
        if is_relation(value):
            return bool(value)
        if value.is_Integer:
            return int(value)
        if value.is_number:
            return float(value)
        missing = sorted(str(s) for s in value.free_symbols)
        raise ValueError(f"size expression {expr} has symbols without a value: {', '.join(missing)}")

    # -- deciding relations --------------------------------------------------
    def static_value(self, expr: Expr) -> bool | None:
        """``expr`` (a relation) when it holds or fails for every value the symbols may take."""
        import sympy
        expr = sympy.sympify(expr)
        if expr is sympy.true or expr is sympy.false:
            return bool(expr)
        hit = self._known.get(expr)
        if hit is not None:
            return hit
        decided = _decide(expr, self.lower)
        if decided is None and self.upper:
            decided = _decide(expr, self.lower, self.upper)  # ``u0 <= 20`` of a 20-value mask
        return decided

    def guard(self, expr: Expr, hint: bool) -> bool:
        """Answer the relation ``expr`` (``hint`` is its value now), recording a guard unless static."""
        import sympy
        static = self.static_value(expr)
        if static is not None:
            return static
        if self.has_unbacked(expr):
            raise DataDependentError(expr)
        floats = [s for s in sympy.sympify(expr).free_symbols if s in self.floats]
        if floats and (not _exact_float_relation(sympy.sympify(expr), self.floats)
                       or (hint and isinstance(sympy.sympify(expr), sympy.Eq))):
            # a decision on a float that no relation guard states exactly, or that fixes
            # its value: pinned, guarded by value, and remembered (ADR 0044)
            where = self.site() if self.site is not None else ""
            for sym in floats:
                self.pinned_floats.setdefault(sym, where)
            return bool(hint)
        holds = sympy.sympify(expr) if hint else sympy.Not(expr)
        self._known[sympy.sympify(expr)] = bool(hint)
        if holds is not sympy.true:
            where = self.site() if self.site is not None else ""
            self.guards.append(ShapeGuard(holds, where))
            self._known[holds] = True
            if isinstance(holds, sympy.Eq):
                self._pin(holds)
        return bool(hint)

    def _pin(self, eq: sympy.Eq) -> None:
        """Record ``sym = value`` when ``eq`` leaves one symbol a single integer value."""
        import sympy
        diff = sympy.expand(eq.lhs - eq.rhs)
        syms = [x for x in diff.free_symbols if isinstance(x, sympy.Symbol)]
        if len(syms) != 1 or syms[0] not in self.hints or not diff.is_polynomial(syms[0]):
            return
        sym = syms[0]
        if sympy.degree(diff, sym) != 1:
            return
        value = sympy.solve(diff, sym)
        if len(value) == 1 and value[0].is_Integer and int(value[0]) == self.hints[sym]:
            self.replacements[sym] = value[0]

    def simplify(self, expr: Expr) -> Expr:
        """``expr`` with pinned symbols replaced by their values."""
        import sympy
        if not self.replacements:
            return expr
        return sympy.sympify(expr).xreplace(self.replacements)

    def specialize(self, expr: Expr, hint: int) -> int:
        """``expr`` as a plain int (``int(size)``, ``range(size)``): guards it equals its hint."""
        import sympy
        if sympy.sympify(expr).is_Integer:
            return int(expr)
        self.guard(sympy.Eq(expr, hint), True)
        return hint

    # -- fake tensors ----------------------------------------------------------
    def fake_tensor(
        self,
        mode: Any,
        sizes: Sequence[Expr | int],
        strides: Sequence[Expr | int],
        dtype: torch.dtype,
        device: torch.device,
        requires_grad: bool = False,
        leaf: bool = True,
    ) -> torch.Tensor:
        """A fake tensor of ``mode`` whose sizes and strides are these expressions;
        with ``requires_grad`` and not ``leaf``, the result of an autograd op (not a
        view, same layout), as an input computed from a leaf is: in-place ops on its
        views are allowed, where on a leaf's they raise.

        Turns off ``mode``'s dispatch cache: torch keys it on its own ShapeEnv.
        """
        mode.cache_enabled = False
        size = [self.sym_int(s) for s in sizes]
        stride = [self.sym_int(s) for s in strides]
        with mode:
            t = torch.empty_strided(size, stride, dtype=dtype, device=device)
        if requires_grad:
            t.requires_grad_(True)
            if not leaf:
                with mode, torch.enable_grad():
                    t = _NonLeaf.apply(t)  # type: ignore[no-untyped-call]
        return t


class _NonLeaf(torch.autograd.Function):
    """A new tensor of its input's layout, computed from it (never differentiated:
    fake tensors only trace)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


# -- static decisions from symbol ranges --------------------------------------------


def _exact_float_relation(expr: Expr, floats: dict[Any, float]) -> bool:
    """Whether ``expr`` compares one float symbol with a number that the guard's text
    states exactly (``f0 > 0.5``, ``Eq(f0, 0)``): such a relation is guarded as it is.
    Any other (``0.43*f0 > 0.5``: sympy folded the program's arithmetic, whose rounding
    the guard would not repeat; ``f0 > 0.3`` for 0.30000000000000004) pins the float."""
    import sympy
    from sympy.printing.pycode import pycode

    from ember.ir.symbolic import parse_sym_expr, sym_text
    rels = (sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge)
    if not isinstance(expr, rels):
        return False
    sides = (expr.lhs, expr.rhs)
    if not any(isinstance(x, sympy.Symbol) and x in floats for x in sides):
        return False
    consts = [x for x in sides if x.is_Number]
    if len(consts) != 1:
        return False
    want = float(consts[0])
    try:
        back = parse_sym_expr(sym_text(expr))
    except Exception:
        return False
    if not isinstance(back, rels):
        return False
    got = [x for x in (back.lhs, back.rhs) if x.is_Number]
    if len(got) != 1 or float(got[0]) != want:
        return False
    try:
        return float(pycode(got[0])) == want
    except ValueError:
        return False


def size_relation(expr: Expr) -> bool | None:
    """Decide a relation over size symbols (``s<N>``) for every value they may take in a
    compiled graph (each >= :data:`MIN_SIZE`); ``None`` when it depends on the values."""
    import sympy
    syms = [s for s in sympy.sympify(expr).free_symbols if isinstance(s, sympy.Symbol)]
    if not all(_is_size_name(s.name) for s in syms):
        return None
    return _decide(sympy.sympify(expr), {s: MIN_SIZE for s in syms})


def _is_size_name(name: str) -> bool:
    return len(name) > 1 and name[0] == "s" and name[1:].isdigit()


def _decide(expr: Expr, lower: dict[sympy.Symbol, int],
            upper: dict[sympy.Symbol, int] | None = None) -> bool | None:
    """Decide a relation from the symbols' lower bounds (``upper``: from these upper bounds
    instead, for the symbols that have one)."""
    import sympy
    if isinstance(expr, sympy.And):
        parts = [_decide(a, lower, upper) for a in expr.args]
        if any(p is False for p in parts):
            return False
        return True if all(p is True for p in parts) else None
    if isinstance(expr, sympy.Or):
        parts = [_decide(a, lower, upper) for a in expr.args]
        if any(p is True for p in parts):
            return True
        return False if all(p is False for p in parts) else None
    if isinstance(expr, sympy.Not):
        inner = _decide(expr.args[0], lower, upper)
        return None if inner is None else not inner
    if not isinstance(expr, sympy.core.relational.Relational):
        return None
    diff = sympy.expand(expr.lhs - expr.rhs)
    low = _sign_from_below(diff, lower, upper)
    high = _sign_from_below(sympy.expand(-diff), lower, upper)
    # low: diff >= 0 ("ge"), diff > 0 ("gt"), or None; high: the same for -diff
    if isinstance(expr, sympy.Eq):
        if low == "gt" or high == "gt":
            return False
        return True if diff == 0 else None
    if isinstance(expr, sympy.Ne):
        if low == "gt" or high == "gt":
            return True
        return False if diff == 0 else None
    if isinstance(expr, (sympy.StrictGreaterThan, sympy.GreaterThan)):
        strict = isinstance(expr, sympy.StrictGreaterThan)
        if low == "gt" or (low == "ge" and not strict):
            return True
        if high == "gt" or (high == "ge" and strict):
            return False
        return None
    if isinstance(expr, (sympy.StrictLessThan, sympy.LessThan)):
        strict = isinstance(expr, sympy.StrictLessThan)
        if high == "gt" or (high == "ge" and not strict):
            return True
        if low == "gt" or (low == "ge" and strict):
            return False
        return None
    return None


def _sign_from_below(diff: Expr, lower: dict[sympy.Symbol, int],
                     upper: dict[sympy.Symbol, int] | None = None) -> str | None:
    """'gt' if ``diff > 0`` for all symbol values >= their lower bounds, 'ge' if ``>= 0``
    (a symbol in ``upper`` ranges over the values <= its upper bound instead)."""
    import sympy
    if diff.is_Number:
        return "gt" if diff > 0 else ("ge" if diff == 0 else None)
    syms = [s for s in diff.free_symbols if isinstance(s, sympy.Symbol)]
    if not syms or any(s not in lower for s in syms):
        return None
    top = upper or {}
    shifted = {
        s: (top[s] - sympy.Symbol(f"_t_{s.name}", integer=True, nonnegative=True)) if s in top
        else sympy.Symbol(f"_t_{s.name}", integer=True, nonnegative=True) + lower[s]
        for s in syms
    }
    try:
        moved = sympy.expand(diff.xreplace(shifted))
    except (TypeError, ValueError):
        return None
    if moved.is_positive:
        return "gt"
    if moved.is_nonnegative:
        return "ge"
    return None


# -- the node torch calls into --------------------------------------------------------


class SymNode:
    """One symbolic int, float or bool: a sympy expression and its hint.

    Implements the method protocol ``torch.SymInt``/``SymFloat``/``SymBool``
    call on their node (arithmetic returns new nodes; ``guard_*`` returns a
    concrete value and records a guard in the environment).
    """

    #: torch reads this to decide how to evaluate; None selects the foreign-node path.
    shape_env = None

    def __init__(self, env: ShapeEnv, expr: Expr, hint: Hint, pytype: type) -> None:
        self.env = env
        self.expr = expr
        self._hint = hint
        self.pytype = pytype
        #: How a float value was computed, ``(operator function, operands)``: float
        #: arithmetic is not associative, so a graph recomputes it in this order, never
        #: from ``expr`` (which sympy canonicalizes: ``t / 3.0`` is ``0.333...*f0``).
        self.recipe: tuple[Callable[..., Any], tuple[Any, ...]] | None = None

    # -- identity ----------------------------------------------------------
    @property
    def hint(self) -> Hint:
        return self._hint

    def is_int(self) -> bool:
        return self.pytype is int

    def is_float(self) -> bool:
        return self.pytype is float

    def is_bool(self) -> bool:
        return self.pytype is bool

    def is_nested_int(self) -> bool:
        return False

    def nested_int(self) -> None:
        return None

    def is_symbolic(self) -> bool:
        return True

    def is_constant(self) -> bool:
        # not for floats: torch's operators turn a constant result into a Python value
        # through ``get_constant``, which takes only SymInt and SymBool (a symbolic size's
        # ``isize / (isize * scale)`` in upsample's decomposition raised AssertionError)
        import sympy
        if self.pytype is float:
            return False
        return bool(self.expr.is_number) or self.expr in (sympy.true, sympy.false)

    def has_hint(self) -> bool:
        """False over an unbacked size: torch then takes its paths for sizes without a value
        (a view of a ``u0``-sized tensor decided without asking ``u0 == 0``)."""
        return not self.env.has_unbacked(self.expr)

    def require_hint(self, fallback: Hint | None = None) -> Hint:
        if fallback is not None and not self.has_hint():
            return fallback
        return self._hint

    def maybe_as_int(self) -> int | None:
        return int(self.expr) if self.expr.is_Integer else None

    def maybe_as_float(self) -> float | None:
        return float(self.expr) if self.expr.is_Number else None

    def maybe_as_bool(self) -> bool | None:
        import sympy
        return bool(self.expr) if self.expr in (sympy.true, sympy.false) else None

    def constant_int(self) -> int | None:
        return self.maybe_as_int()

    def constant_bool(self) -> bool | None:
        return self.maybe_as_bool()

    def clone(self) -> SymNode:
        return self

    def __str__(self) -> str:
        return str(self.expr)

    def __repr__(self) -> str:
        return str(self.expr)

    def _graph_repr(self) -> str:
        return str(self.expr)

    # -- making nodes --------------------------------------------------------
    def _new(self, expr: Expr, hint: Hint, pytype: type) -> SymNode:
        return SymNode(self.env, self.env.simplify(expr), hint, pytype)

    def wrap_int(self, num: int) -> SymNode:
        import sympy
        return self._new(sympy.Integer(num), num, int)

    def wrap_float(self, num: float) -> SymNode:
        import sympy
        return self._new(sympy.Float(num), num, float)

    def wrap_bool(self, num: bool) -> SymNode:
        import sympy
        return self._new(sympy.true if num else sympy.false, num, bool)

    def _binary(self, other: SymNode, fn: Callable[[Any, Any], Any], hint_fn: Callable[[Any, Any], Any],
                pytype: type | None = None, op: Callable[[Any, Any], Any] | None = None) -> SymNode:
        out_type = pytype or (float if float in (self.pytype, other.pytype) else self.pytype)
        out = self._new(fn(self.expr, other.expr), hint_fn(self._hint, other._hint), out_type)
        if op is not None and out_type is float:
            out.recipe = (op, (self, other))
        return out

    def add(self, other: SymNode) -> SymNode:
        return self._binary(other, lambda a, b: a + b, lambda a, b: a + b, op=operator.add)

    def sym_sum(self, args: Sequence[SymNode]) -> SymNode:
        """``torch.sym_sum(args)``: the sum of ``args`` (``self`` only picks the environment)."""
        import sympy
        expr: Expr = sympy.Integer(0)
        hint: Hint = 0
        for o in args:
            expr, hint = expr + o.expr, hint + o._hint
        return self._new(expr, hint, self.pytype)

    def sub(self, other: SymNode) -> SymNode:
        return self._binary(other, lambda a, b: a - b, lambda a, b: a - b, op=operator.sub)

    def mul(self, other: SymNode) -> SymNode:
        return self._binary(other, lambda a, b: a * b, lambda a, b: a * b, op=operator.mul)

    def int_floordiv(self, other: SymNode) -> SymNode:
        import sympy
        return self._binary(other, lambda a, b: sympy.floor(a / b), lambda a, b: a // b, int)

    def floordiv(self, other: SymNode) -> SymNode:
        return self.int_floordiv(other)

    def mod(self, other: SymNode) -> SymNode:
        import sympy
        return self._binary(other, sympy.Mod, lambda a, b: a % b)

    def int_truediv(self, other: SymNode) -> SymNode:
        return self._binary(other, lambda a, b: a / b, lambda a, b: a / b, float, operator.truediv)

    def float_truediv(self, other: SymNode) -> SymNode:
        return self.int_truediv(other)

    def truediv(self, other: SymNode) -> SymNode:
        return self.int_truediv(other)

    def pow_by_natural(self, other: SymNode) -> SymNode:
        return self._binary(other, lambda a, b: a**b, lambda a, b: a**b, int)

    def float_pow(self, other: SymNode) -> SymNode:
        return self._binary(other, lambda a, b: a**b, lambda a, b: float(a) ** b, float, operator.pow)

    def pow(self, other: SymNode) -> SymNode:
        return self.float_pow(other) if float in (self.pytype, other.pytype) else self.pow_by_natural(other)

    def sym_min(self, other: SymNode) -> SymNode:
        import sympy
        return self._choose(other, self.le(other), sympy.Min, min)

    def sym_max(self, other: SymNode) -> SymNode:
        import sympy
        return self._choose(other, self.ge(other), sympy.Max, max)

    def _choose(self, other: SymNode, take_self: SymNode, fn: Any, hint_fn: Any) -> SymNode:
        """min/max decided by a guard (no Min/Max expressions reach the graphs), except
        over unbacked sizes that nothing decides: a ``Min``/``Max`` expression then."""
        decided = self.env.static_value(take_self.expr)
        if decided is None and self.env.has_unbacked(take_self.expr):
            return self._binary(other, fn, hint_fn)
        return self if take_self.guard_bool("", 0) else other

    def sym_ite(self, then_node: SymNode, else_node: SymNode) -> SymNode:
        return then_node if self.guard_bool("", 0) else else_node

    def neg(self) -> SymNode:
        out = self._new(-self.expr, -self._hint, self.pytype)
        if self.pytype is float:
            out.recipe = (operator.neg, (self,))
        return out

    def pos(self) -> SymNode:
        return self

    def abs(self) -> SymNode:
        import sympy
        out = self._new(sympy.Abs(self.expr), abs(self._hint), self.pytype)
        if self.pytype is float:
            out.recipe = (operator.abs, (self,))
        return out

    def sym_float(self) -> SymNode:
        return self._new(self.expr, float(self._hint), float)

    def sym_int(self) -> SymNode:
        return self.trunc()

    def trunc(self) -> SymNode:
        import sympy
        e = self.expr
        return self._new(sympy.sign(e) * sympy.floor(sympy.Abs(e)), math.trunc(self._hint), int)

    def floor(self) -> SymNode:
        import sympy
        return self._new(sympy.floor(self.expr), math.floor(self._hint), int)

    def ceil(self) -> SymNode:
        import sympy
        return self._new(sympy.ceiling(self.expr), math.ceil(self._hint), int)

    def round(self, ndigits: int | None = None) -> SymNode:
        """round() has no exact sympy form here: specialize the operand."""
        value = self.guard_float("", 0)
        rounded = round(value, ndigits)
        return self.wrap_float(rounded) if ndigits is not None else self.wrap_int(int(rounded))

    def sym_sqrt(self) -> SymNode:
        import sympy
        return self._new(sympy.sqrt(self.expr), math.sqrt(self._hint), float)

    def is_integer(self) -> SymNode:
        return self.wrap_bool(float(self.guard_float("", 0)).is_integer())

    # -- comparisons and logic ------------------------------------------------
    def _relation(self, other: SymNode, rel: Callable[[Any, Any], Any], hint_fn: Callable[[Any, Any], bool]) -> SymNode:
        return self._new(rel(self.expr, other.expr), hint_fn(self._hint, other._hint), bool)

    def eq(self, other: SymNode) -> SymNode:
        import sympy
        return self._relation(other, sympy.Eq, lambda a, b: a == b)

    def ne(self, other: SymNode) -> SymNode:
        import sympy
        return self._relation(other, sympy.Ne, lambda a, b: a != b)

    def lt(self, other: SymNode) -> SymNode:
        import sympy
        return self._relation(other, sympy.Lt, lambda a, b: a < b)

    def le(self, other: SymNode) -> SymNode:
        import sympy
        return self._relation(other, sympy.Le, lambda a, b: a <= b)

    def gt(self, other: SymNode) -> SymNode:
        import sympy
        return self._relation(other, sympy.Gt, lambda a, b: a > b)

    def ge(self, other: SymNode) -> SymNode:
        import sympy
        return self._relation(other, sympy.Ge, lambda a, b: a >= b)

    def sym_and(self, other: SymNode) -> SymNode:
        import sympy
        return self._relation(other, sympy.And, lambda a, b: bool(a and b))

    def sym_or(self, other: SymNode) -> SymNode:
        import sympy
        return self._relation(other, sympy.Or, lambda a, b: bool(a or b))

    def and_(self, other: SymNode) -> SymNode:
        return self.sym_and(other)

    def or_(self, other: SymNode) -> SymNode:
        return self.sym_or(other)

    def sym_not(self) -> SymNode:
        import sympy
        return self._new(sympy.Not(self.expr), not self._hint, bool)

    # -- layout queries (torch asks the node of a size) ------------------------
    def is_contiguous(self, sizes: Sequence[SymNode], strides: Sequence[SymNode]) -> SymNode:
        return self._layout_bool(_contiguous_terms(sizes, strides, range(len(sizes) - 1, -1, -1)))

    def is_channels_last_contiguous_2d(self, sizes: Sequence[SymNode], strides: Sequence[SymNode]) -> SymNode:
        return self._layout_bool(_contiguous_terms(sizes, strides, (1, 3, 2, 0)))

    def is_channels_last_contiguous_3d(self, sizes: Sequence[SymNode], strides: Sequence[SymNode]) -> SymNode:
        return self._layout_bool(_contiguous_terms(sizes, strides, (1, 4, 3, 2, 0)))

    def is_channels_last_strides_2d(self, sizes: Sequence[SymNode], strides: Sequence[SymNode]) -> SymNode:
        return self.is_channels_last_contiguous_2d(sizes, strides)

    def is_channels_last_strides_3d(self, sizes: Sequence[SymNode], strides: Sequence[SymNode]) -> SymNode:
        return self.is_channels_last_contiguous_3d(sizes, strides)

    def is_non_overlapping_and_dense_indicator(self, sizes: Sequence[SymNode], strides: Sequence[SymNode]) -> SymNode:
        dense = self._layout_bool(_dense_terms(sizes, strides))
        return self.wrap_int(1 if dense.guard_bool("", 0) else 0)

    def is_non_overlapping_and_dense(self, sizes: Sequence[SymNode], strides: Sequence[SymNode]) -> SymNode:
        return self._layout_bool(_dense_terms(sizes, strides))

    def _layout_bool(self, terms: list[tuple[Expr, bool]]) -> SymNode:
        """The conjunction of (relation, hint) terms as a bool node (constant when decided)."""
        import sympy
        exprs = [e for e, _ in terms]
        hint = all(h for _, h in terms)
        expr = sympy.And(*exprs) if exprs else sympy.true
        decided = self.env.static_value(expr)
        if decided is not None:
            return self.wrap_bool(decided)
        return self._new(expr, hint, bool)

    # -- concrete answers (guards) ------------------------------------------------
    def _answer(self) -> Hint:
        import sympy
        if self.pytype is bool:
            return self.env.guard(self.expr, bool(self._hint))
        if self.expr.is_Number:
            return self.pytype(self.expr)  # type: ignore[no-any-return]
        if self.pytype is int:
            return self.env.specialize(self.expr, int(self._hint))
        self.env.guard(sympy.Eq(self.expr, sympy.Float(self._hint)), True)
        return self._hint

    def guard_int(self, file: str = "", line: int = 0) -> int:
        return int(self._answer())

    def guard_float(self, file: str = "", line: int = 0) -> float:
        return float(self._answer())

    def guard_bool(self, file: str = "", line: int = 0) -> bool:
        if self.pytype is bool and self.env.has_unbacked(self.expr):
            decided = self.env.static_value(self.expr)
            if decided is not None:
                return decided
            default = _guard_or_default()
            if default is not None:
                return default
        return bool(self._answer())

    def expect_true(self, file: str = "", line: int = 0) -> bool:
        return self.guard_bool(file, line)

    def expect_size(self, file: str = "", line: int = 0) -> bool:
        return True

    def guard_size_oblivious(self, file: str = "", line: int = 0) -> bool:
        """As ``guard_bool``, except that a relation over unbacked sizes is decided as for
        sizes >= 2 when that decides it (torch's size-oblivious rule: the answer for the
        general case is also correct for 0 and 1 where torch asks this)."""
        if self.pytype is bool and self.env.has_unbacked(self.expr):
            lower = dict(self.env.lower)
            # (sizes only: a value ``.item()`` read, ``v<N>``, has no range)
            lower.update({s: MIN_SIZE for s in self.env.unbacked if s not in self.env.unbacked_values})
            decided = _decide(self.expr, lower)
            if decided is not None:
                return decided
        return self.guard_bool(file, line)

    def guard_or_false(self, file: str = "", line: int = 0) -> bool:
        """True only when decided without a guard: torch calls this where False is always
        a correct answer (the general path), so no relation is guarded for it."""
        return self.env.static_value(self.expr) is True

    def guard_or_true(self, file: str = "", line: int = 0) -> bool:
        """False only when decided without a guard (see ``guard_or_false``)."""
        return self.env.static_value(self.expr) is not False

    def statically_known_true(self, file: str = "", line: int = 0) -> bool:
        return self.env.static_value(self.expr) is True

    def int_(self) -> int:
        return self.guard_int()

    def bool_(self) -> bool:
        return self.guard_bool()

    def evaluate(self, size_oblivious: bool = False) -> Hint:
        return self._answer()

    def str(self) -> str:  # last in the class: the name shadows the builtin below it
        return self.__str__()

    # -- hashing (FakeTensorMode's dispatch cache keys on these) -------------------
    def _value_hash(self) -> int:
        return hash((self.expr, self.pytype))

    def _value_eq(self, other: object) -> bool:
        return isinstance(other, SymNode) and other.expr == self.expr and other.pytype is self.pytype


def _guard_or_default() -> bool | None:
    """The default of torch's ``guard_or_false``/``guard_or_true`` when one of them is what
    asks (torch's path for foreign nodes calls ``guard_bool`` from them, so the node cannot
    tell otherwise); None when they are not on the stack. Only relations over unbacked
    sizes ask: torch calls these exactly where the default is a correct answer."""
    import sys
    import types
    frame: types.FrameType | None = sys._getframe(2)
    for _ in range(3):
        if frame is None:
            return None
        if frame.f_code.co_name == "_guard_or" and "symbolic_shapes" in frame.f_code.co_filename:
            default = frame.f_locals.get("default")
            return default if isinstance(default, bool) else None
        frame = frame.f_back
    return None


def _contiguous_terms(sizes: Sequence[SymNode], strides: Sequence[SymNode], order: Sequence[int]) -> list[tuple[Expr, bool]]:
    """Relations saying the dims, walked innermost first in ``order``, are packed."""
    import sympy
    terms: list[tuple[Expr, bool]] = []
    expected: Expr = sympy.Integer(1)
    hint_expected: Hint = 1
    for d in order:
        size, stride = sizes[d], strides[d]
        one = sympy.Eq(size.expr, 1)
        packed = sympy.Eq(stride.expr, expected)
        terms.append((sympy.Or(one, packed), size.hint == 1 or stride.hint == hint_expected))
        expected = expected * size.expr
        hint_expected = hint_expected * size.hint
    return terms


def _dense_terms(sizes: Sequence[SymNode], strides: Sequence[SymNode]) -> list[tuple[Expr, bool]]:
    """Relations saying the tensor is a permutation of a contiguous one (order from the hints)."""
    order = sorted(range(len(sizes)), key=lambda d: (strides[d].hint, sizes[d].hint))
    return _contiguous_terms(sizes, strides, order)


def symint_expr(value: object) -> Expr | None:
    """The sympy expression of a SymInt/SymFloat/SymBool (ember's or torch's), else None."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        expr: Expr = value.node.expr
        return expr
    return None


def float_int_pow(base: Any, exp: int) -> Any:
    """``base ** exp`` for a float ``base`` and an int ``exp``, what a graph calls for it.

    Run on a symbolic float it skips ``SymFloat.__pow__``'s check that the base is
    ``>= 0`` (there for exponents that could make a complex number; an int exponent
    cannot), which would pin the float to its value (ADR 0044)."""
    if isinstance(base, torch.SymFloat):
        return base.__float_pow__(exp)
    return base**exp


def python_value(value: Any) -> Any:
    """A SymBool/SymInt/SymFloat as a Python number (a symbolic one is specialized to its
    value, guarded); any other value as it is."""
    if isinstance(value, torch.SymBool):
        return bool(value)
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    return value


__all__ = ["MIN_SIZE", "UNBACKED_HINT", "DataDependentError", "ShapeEnv", "ShapeGuard", "SymNode",
           "float_int_pow", "python_value", "size_relation", "symint_expr"]
