"""Errors raised while compiling guard IR into a check function."""

from __future__ import annotations


class GuardCompileError(ValueError):
    """A guard that cannot be turned into a check.

    Says which guard (its source and kind), what is wrong, and what to do.
    Example::

        cannot compile SHAPE_EXPR guard Eq(s0, 4): symbol 's0' is not bound to a
        source; give the payload a "symbols" map such as
        {"s0": "L['x'].size()[0]"}
    """
