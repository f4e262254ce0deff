"""Sizes as Python source, for the generated wrapper.

Static sizes print as Python ints (``(4, 16)``); symbolic ones as expressions
over the size symbols the wrapper binds from its inputs at the top of
``call`` (``(s0, 16)``, ``(16*s0, 1)``, ``(s0 // 2,)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..index import print_index


def pyexpr(expr: Any) -> str:
    """A size (int or sympy expression over size symbols) as a Python integer expression."""
    if isinstance(expr, int):
        return repr(expr)
    return print_index(expr, div="//", mul="*")


def pysizes(values: Sequence[Any]) -> str:
    """A tuple of sizes as Python source (``repr`` of the tuple when every size is an int)."""
    if all(isinstance(v, int) for v in values):
        return repr(tuple(values))
    inner = ", ".join(pyexpr(v) for v in values)
    return f"({inner},)" if len(values) == 1 else f"({inner})"


__all__ = ["pyexpr", "pysizes"]
