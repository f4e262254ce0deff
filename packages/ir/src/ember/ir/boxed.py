"""Boxed calls: a compiled graph that takes its inputs as one list it may empty, so
that each input can be freed after its last use inside the call.

A graph called as ``graph(*args)`` cannot free anything its caller passed: the
argument tuple holds every input until the call returns. A training backward's
inputs are the values its forward saved, and eager frees each of them once the
autograd node that used it has run; a compiled backward that held all of them to
its end kept every saved activation alive beside the gradients it was computing
(ADR 0063).

So the caller that owns the only other references (ember.aotgrad's runtime, after
it released autograd's copies) hands the inputs over in a list with
:func:`call_boxed`; a compiled graph that supports it defines
``call_boxed(args: list)``, takes the values out of the list, clears it and drops
each input when its last use has run (ember.inductor's wrapper). A graph without
that method is called as before: nothing is freed early, nothing is wrong. Like
``updates.py``, this is what two packages agree on without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: the method a compiled graph defines to take its inputs as one list it may clear
BOXED_METHOD = "call_boxed"


def supports_boxed(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes its inputs as one list it frees (:data:`BOXED_METHOD`)."""
    return callable(getattr(fn, BOXED_METHOD, None))


def call_boxed(fn: Callable[..., Any], args: list[Any]) -> Any:
    """``fn(*args)``, with ``args`` handed over: the list is empty when this returns
    (or raises), so the caller holds none of the inputs during the call. A ``fn``
    that supports boxed calls may free each input after its last use."""
    method = getattr(fn, BOXED_METHOD, None)
    if callable(method):
        return method(args)
    values = tuple(args)
    args.clear()
    return fn(*values)


__all__ = ["BOXED_METHOD", "call_boxed", "supports_boxed"]
