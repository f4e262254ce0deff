"""Dynamic shapes: which input dimensions are symbolic, and the guards on them.

ember.ir's :class:`~ember.ir.shapes.ShapeEnv` holds size symbols and the
relations a traced program branched on. This module is ember.dynamo's policy
on top of it, one :class:`ShapePolicy` per captured graph:

- *which dimensions get a symbol*: every dimension of size >= 2 with
  ``dynamic=True``; those ``mark_dynamic``/``maybe_mark_dynamic`` named; and,
  with the default ``dynamic=None`` (*automatic dynamic*), those whose size
  differs from what an earlier compile of the same code saw at the same
  source. ``dynamic=False`` turns automatic dynamic off; ``mark_static``
  always wins. Sizes 0 and 1 are never symbolic (they change broadcasting).
- *duck sizing*: dynamic dimensions with equal sizes share one symbol (and a
  guard that they stay equal), as torch does.
- *strides*: a dynamic tensor's strides are expressions of its sizes where
  the tensor is packed (contiguous or a permutation of it); other strides
  stay ints.
- *guards*: ``TENSOR_MATCH`` with ``None`` for every symbolic size or stride,
  plus ``SHAPE_EXPR`` guards binding each symbol to its source: that equal
  sizes stay equal, that symbolic strides keep their form, each symbol's
  range (``>= 2``, ``mark_dynamic``'s ``min``/``max``), and every relation
  the program branched on (with the user line where it did).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ember import ir
from ember.ir import Size, Source, Stride
from ember.ir.shapes import MIN_SIZE, ShapeEnv

from .cache import seen_key

if TYPE_CHECKING:
    import sympy

#: Attribute names ``mark_*`` store on a tensor (read when the tensor is traced).
DYNAMIC_ATTR = "_ember_dynamic_dims"
STATIC_ATTR = "_ember_static_dims"
STATIC_ADDRESS_ATTR = "_ember_static_address"


@dataclass(frozen=True, slots=True)
class DimMark:
    """``mark_dynamic(t, dim, min=, max=)``; ``strict`` is False for ``maybe_mark_dynamic``."""

    min: int | None = None
    max: int | None = None
    strict: bool = True


def _dims(t: torch.Tensor, index: int | Sequence[int]) -> list[int]:
    dims = [index] if isinstance(index, int) else list(index)
    out = []
    for d in dims:
        if not -t.dim() <= d < t.dim():
            raise IndexError(f"dimension {d} is out of range for a {t.dim()}-d tensor")
        out.append(d % t.dim())
    return out


def mark_dynamic(t: torch.Tensor, index: int | Sequence[int], *, min: int | None = None,
                 max: int | None = None) -> None:
    """Compile dimension(s) ``index`` of ``t`` as symbolic from the first compile.

    ``min``/``max`` bound the sizes the graph accepts (a size outside them
    recompiles). Sizes below 2 are always specialized, so ``min`` is raised to 2.
    """
    marks: dict[int, DimMark] = dict(getattr(t, DYNAMIC_ATTR, {}))
    for d in _dims(t, index):
        marks[d] = DimMark(min, max, strict=True)
    setattr(t, DYNAMIC_ATTR, marks)


def maybe_mark_dynamic(t: torch.Tensor, index: int | Sequence[int]) -> None:
    """Like :func:`mark_dynamic`, without complaint if the program specializes the size."""
    marks: dict[int, DimMark] = dict(getattr(t, DYNAMIC_ATTR, {}))
    for d in _dims(t, index):
        marks.setdefault(d, DimMark(strict=False))
    setattr(t, DYNAMIC_ATTR, marks)


def mark_static(t: torch.Tensor, index: int | Sequence[int] | None = None) -> None:
    """Never make dimension(s) ``index`` (default: all) of ``t`` symbolic."""
    dims = range(t.dim()) if index is None else _dims(t, index)
    setattr(t, STATIC_ATTR, set(getattr(t, STATIC_ATTR, set())) | set(dims))


def mark_static_address(t: torch.Tensor, guard: bool = True) -> None:
    """Promise that ``t``'s memory address will not change: under ``mode="reduce-overhead"``
    on CUDA, ember.inductor's CUDA graphs read it in place instead of copying it in on
    every call (ADR 0039). Elsewhere it changes nothing."""
    setattr(t, STATIC_ADDRESS_ATTR, bool(guard))


@dataclass
class SymbolInfo:
    """Where a symbol's value comes from, and why it exists."""

    sources: list[Source]
    why: str
    min: int = MIN_SIZE
    max: int | None = None
    strict: bool = False


@dataclass
class ShapePolicy:
    """Decides the symbolic dimensions of one captured graph and emits its shape guards.

    ``dynamic``: the ``compile(dynamic=...)`` setting. ``seen``: sizes earlier
    compiles of this code saw per source (``None`` where they already differed).
    """

    dynamic: bool | None = None
    seen: Mapping[str, tuple[int | None, ...]] = field(default_factory=dict)
    env: ShapeEnv = field(default_factory=ShapeEnv)
    symbols: dict[sympy.Symbol, SymbolInfo] = field(default_factory=dict)
    #: (stride source, expression) for every symbolic stride of an input
    strides: list[tuple[Source, sympy.Expr]] = field(default_factory=list)
    #: source expr -> (dims with symbolic size, dims with symbolic stride)
    dynamic_dims: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)
    #: source expr -> the sizes this capture saw (reported back to the runtime)
    sizes_seen: dict[str, tuple[int, ...]] = field(default_factory=dict)
    _by_hint: dict[int, sympy.Symbol] = field(default_factory=dict)
    #: float symbol -> the source of the Python float it stands for (ADR 0044)
    floats: dict[sympy.Symbol, Source] = field(default_factory=dict)

    @property
    def is_symbolic(self) -> bool:
        return bool(self.symbols) or bool(self.floats)

    # -- deciding -------------------------------------------------------------
    def _why_dynamic(self, source: Source, t: torch.Tensor, d: int) -> tuple[str, DimMark] | None:
        size = int(t.shape[d])
        if size < MIN_SIZE or d in getattr(t, STATIC_ATTR, ()):
            return None
        mark = getattr(t, DYNAMIC_ATTR, {}).get(d)
        if mark is not None:
            return ("marked dynamic" if mark.strict else "maybe_mark_dynamic"), mark
        if self.dynamic is True:
            return "dynamic=True", DimMark(strict=False)
        if self.dynamic is None:
            before = self.seen.get(seen_key(source.expr(), t.dim()))
            if before is not None and len(before) == t.dim() and before[d] != size:
                return "automatic dynamic: its size changed between calls", DimMark(strict=False)
        return None

    def tensor_layout(self, source: Source, t: torch.Tensor) -> tuple[list[Any], list[Any]] | None:
        """Sizes and strides (ints or sympy expressions) for the input at ``source``;
        ``None`` when every dimension stays static."""
        self.sizes_seen[source.expr()] = tuple(int(s) for s in t.shape)
        sizes: list[Any] = [int(s) for s in t.shape]
        dyn: list[int] = []
        for d in range(t.dim()):
            decided = self._why_dynamic(source, t, d)
            if decided is None:
                continue
            why, mark = decided
            sizes[d] = self._symbol(Size(source, d), sizes[d], why, mark)
            dyn.append(d)
        if not dyn:
            return None
        own: set[int] = set()

        def stride_symbol(d: int, value: int) -> Any:
            """A stride the sizes do not give (a slice of a larger tensor: ``b[:, :3]``
            has ``b``'s row length as stride): a symbol of its own, as TorchDynamo
            does, so a base that grows does not recompile; 0 and 1 stay (broadcast,
            unit stride). Never duck-sized with a size of the same value: a stride
            equal to a size now is not one later (that guard recompiled)."""
            if value < MIN_SIZE or int(t.shape[d]) == 1:
                return value
            sym = self.env.new_symbol(value)
            self.symbols[sym] = SymbolInfo([Stride(source, d)], "a stride of a dynamic tensor")
            own.add(d)
            return sym

        strides = _stride_exprs(sizes, [int(s) for s in t.stride()], [int(s) for s in t.shape],
                                stride_symbol)
        sym_strides = [d for d, st in enumerate(strides) if not isinstance(st, int)]
        for d in sym_strides:
            # a size-1 dim's stride is never read; a stride's own symbol is its binding
            if int(t.shape[d]) != 1 and d not in own:
                self.strides.append((Stride(source, d), strides[d]))
        self.dynamic_dims[source.expr()] = (tuple(dyn), tuple(sym_strides))
        return sizes, strides

    def _symbol(self, source: Size, hint: int, why: str, mark: DimMark) -> sympy.Symbol:
        sym = self._by_hint.get(hint)
        if sym is not None and mark.min is None and mark.max is None:
            info = self.symbols[sym]
            if info.min == MIN_SIZE and info.max is None:  # duck sizing: same size, same symbol
                info.sources.append(source)
                info.strict = info.strict or mark.strict
                return sym
        lower = max(MIN_SIZE, mark.min or MIN_SIZE)
        sym = self.env.new_symbol(hint, lower=lower)
        self.symbols[sym] = SymbolInfo([source], why, lower, mark.max, mark.strict)
        self._by_hint.setdefault(hint, sym)
        return sym

    def fake_input(self, mode: Any, source: Source, t: torch.Tensor) -> torch.Tensor | None:
        """A symbolic fake tensor for the input at ``source``, or None if it stays static."""
        layout = self.tensor_layout(source, t)
        if layout is None:
            return None
        sizes, strides = layout
        return self.env.fake_tensor(mode, sizes, strides, t.dtype, t.device, t.requires_grad,
                                   leaf=t.is_leaf)

    # -- Python floats (ADR 0044) -------------------------------------------------
    def float_symbol(self, source: Source, value: float, specialize: bool) -> sympy.Symbol | None:
        """A float symbol for the Python float at ``source``, or None if it stays a constant.

        Its history rides in the sizes map under :func:`float_key` (the value's IEEE
        bits, so the runtime's merge marks it ``None`` once two captures saw different
        values): a float becomes symbolic once it changed, with ``dynamic=True`` too (a
        float that never changes, an ``eps``, stays a constant the kernels see);
        ``dynamic=False`` or ``specialize_float=True``: never. Non-finite values stay
        constants.
        """
        key = float_key(source)
        self.sizes_seen[key] = (float_bits(value),)
        if specialize or self.dynamic is False or not math.isfinite(value):
            return None
        if self.seen.get(seen_key(pinned_key(source), 1)):
            return None  # an earlier capture decided on its value: a symbol would be pinned again
        before = self.seen.get(seen_key(key, 1))
        if before is None or (len(before) == 1 and before[0] == float_bits(value)):
            return None
        sym = self.env.new_float(value)
        self.floats[sym] = source
        return sym

    def pinned_floats(self) -> list[tuple[Source, float, str]]:
        """Float inputs a decision was taken on (``if t > 0.5``): guarded by value, with
        the reason a failing guard gives."""
        pinned: list[tuple[Source, float, str]] = []
        for sym, src in self.floats.items():
            where = self.env.pinned_floats.get(sym)
            if where is None:
                continue
            self.sizes_seen[pinned_key(src)] = (1,)
            pinned.append((src, self.env.floats[sym], f"the program decided on its value at {where}"
                           if where else "the backend's compiled code decided on its value"))
        return pinned

    def payload_dims(self, source: Source) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return self.dynamic_dims.get(source.expr(), ((), ()))

    # -- guards ---------------------------------------------------------------
    def guards(self) -> list[ir.Guard]:
        """The SHAPE_EXPR guards of this graph (empty when nothing is symbolic)."""
        import sympy
        if not self.symbols and not self.floats:
            return []
        names = {sym: info.sources[0] for sym, info in self.symbols.items()}
        names.update(self.floats)
        out: list[ir.Guard] = []

        def add(expr: sympy.Basic, extra: Mapping[sympy.Symbol, Source] = {}, reason: str = "") -> None:
            bound = {**names, **extra}
            symbols: dict[str, ir.JSON] = {s.name: bound[s].expr() for s in sorted(expr.free_symbols, key=str)
                       if isinstance(s, sympy.Symbol)}
            payload: dict[str, ir.JSON] = {"expr": ir.sym_text(expr), "symbols": symbols}
            if reason:
                payload["reason"] = reason
            out.append(ir.Guard(None, ir.GuardKind.SHAPE_EXPR, payload))

        for sym, info in self.symbols.items():
            for k, alias in enumerate(info.sources[1:]):
                other = ir.size_symbol(f"{sym.name}_{k + 1}")
                add(sympy.Eq(other, sym), {other: alias},
                    f"duck sizing: {alias.expr()} had the same size as {info.sources[0].expr()}")
            if info.min > MIN_SIZE:
                add(sympy.Ge(sym, info.min), reason="mark_dynamic(min=...)")
            else:
                add(sympy.Ge(sym, info.min),
                    reason="sizes 0 and 1 are specialized; this dimension was compiled for sizes >= 2")
            if info.max is not None:
                add(sympy.Le(sym, info.max), reason="mark_dynamic(max=...)")
        for k, (src, expr) in enumerate(self.strides):
            st = ir.size_symbol(f"stride{k}")
            add(sympy.Eq(st, expr), {st: src}, "the compiled code assumed this memory layout")
        for g in self.env.guards:
            add(g.expr, reason=f"the program branched on it at {g.where}" if g.where else
                "the backend's compiled code relies on it")
        return out

    def describe_dynamic(self) -> list[str]:
        """One line per symbol: its source(s) and why it is dynamic (for logs)."""
        return [
            f"{sym} = {', '.join(s.expr() for s in info.sources)} ({info.why})"
            for sym, info in self.symbols.items()
        ] + [f"{sym} = {src.expr()} (automatic dynamic: a float whose value changed between calls)"
             for sym, src in self.floats.items()]

    def specialized_marked(self) -> list[str]:
        """Sources of ``mark_dynamic`` dimensions the program forced to one value."""
        import sympy
        pinned = {
            side for g in self.env.guards if isinstance(g.expr, sympy.Eq)
            for side, other in (g.expr.args, reversed(g.expr.args))
            if isinstance(side, sympy.Symbol) and other.is_Integer
        }
        return [info.sources[0].expr() for sym, info in self.symbols.items()
                if info.strict and sym in pinned]


def float_key(source: Source) -> str:
    """Where a Python float's history is kept in the sizes map (beside tensor sources)."""
    return f"{source.expr()} (float)"


def pinned_key(source: Source) -> str:
    """Where the sizes map remembers that a capture decided on the float at ``source``."""
    return f"{source.expr()} (float, decided on)"


def float_bits(value: float) -> int:
    """``value``'s IEEE-754 bits as an int (exact, and storable wherever sizes are)."""
    return int.from_bytes(struct.pack("<d", value), "little", signed=True)


def _stride_exprs(sizes: Sequence[Any], strides: Sequence[int], hints: Sequence[int],
                  other: Callable[[int, int], Any] = lambda d, value: value) -> list[Any]:
    """Strides as expressions of ``sizes`` where the tensor is packed, ``other(dim,
    stride)`` elsewhere (an int, or a symbol of its own).

    Dims are walked innermost first (by stride, then size); a dim whose stride
    equals the product of the sizes inside it gets that product as its stride.
    """
    import sympy
    order = sorted(range(len(sizes)), key=lambda d: (strides[d], hints[d]))
    out: list[Any] = list(strides)
    expected: Any = sympy.Integer(1)
    expected_hint = 1
    for d in order:
        if strides[d] == expected_hint or hints[d] == 1:
            value = sympy.sympify(expected)
            out[d] = int(value) if value.is_Integer else value
            expected = expected * sizes[d]
            expected_hint *= hints[d]
        else:
            out[d] = other(d, strides[d])
            expected = sympy.sympify(out[d]) * sizes[d]
            expected_hint = strides[d] * hints[d]
    return out


__all__ = [
    "DimMark",
    "ShapePolicy",
    "mark_dynamic",
    "mark_static",
    "mark_static_address",
    "maybe_mark_dynamic",
]
