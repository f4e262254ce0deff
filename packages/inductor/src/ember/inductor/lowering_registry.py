"""The lowering registry: ATen op (overload or packet) -> the function lowering it.

Its own module, without the lowering stack (sympy, loop IR), so that what needs only
the registry (the graph cache key's user lowerings, the decomposition table's
fingerprint) imports nothing else. ``ember.inductor.lowering`` re-exports it; its
submodules register ember's lowerings when imported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LoweringFn = Callable[..., Any]
LOWERINGS: dict[Any, LoweringFn] = {}


def _builtin(fn: Any) -> bool:
    return (getattr(fn, "__module__", "") or "").startswith("ember.inductor")


def register_lowering(*ops: Any) -> Callable[[LoweringFn], LoweringFn]:
    """Register ``fn`` for ATen overloads or whole packets (all overloads).

    A lowering registered from outside ember.inductor wins over ember's own for the
    same op whichever was imported first: ember's lowering modules are imported when
    the first graph is lowered (not by ``import ember.inductor``), which may be after
    the user's ``register_lowering``.
    """

    def wrap(fn: LoweringFn) -> LoweringFn:
        builtin = _builtin(fn)
        for op in ops:
            if builtin and op in LOWERINGS and not _builtin(LOWERINGS[op]):
                continue
            LOWERINGS[op] = fn
        return fn

    return wrap


def find_lowering(target: Any) -> LoweringFn | None:
    if target in LOWERINGS:
        return LOWERINGS[target]
    packet = getattr(target, "overloadpacket", None)
    if packet is not None and packet in LOWERINGS:
        return LOWERINGS[packet]
    return None
