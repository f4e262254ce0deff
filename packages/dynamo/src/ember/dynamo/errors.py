"""Errors raised by frame capture.

Every message says what happened, where (the user's file:line and source
text), why, and what to do.
"""

from __future__ import annotations

import linecache
import traceback
import types
from typing import Any


class Unsupported(Exception):
    """The interpreter met something it cannot put in a graph.

    Example::

        graph break in `f` at model.py:42 `print(x)`: builtin `print` cannot be
        traced (fullgraph=True makes this an error)

    ``reason`` is the bare reason ("builtin `print` cannot be traced");
    ``user_stack`` the frames (outermost first) where it happened, once known.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.user_stack: list[traceback.FrameSummary] = []
        self.located = False

    def locate(self, stack: list[traceback.FrameSummary]) -> None:
        """Attach the user's location (innermost frame last); done once."""
        if self.located:
            return
        self.located = True
        self.user_stack = list(stack)
        self.args = (self.message(),)

    def message(self) -> str:
        if not self.user_stack:
            return self.reason
        fs = self.user_stack[-1]
        where = f"{fs.filename}:{fs.lineno}"
        text = (fs.line or "").strip()
        src = f" `{text}`" if text else ""
        return (
            f"graph break in `{fs.name}` at {where}{src}: {self.reason} "
            "(fullgraph=True makes this an error)"
        )

    def __str__(self) -> str:
        return self.message()


class UserRaised(Unsupported):
    """The traced code raises an exception (``raise IndexError(...)``): a
    graph break, unless the caller models the ``except`` itself (iteration
    through ``__getitem__`` stops at ``IndexError``)."""

    def __init__(self, exc_type: type[BaseException], reason: str, exception: Any = None) -> None:
        super().__init__(reason)
        self.exc_type = exc_type
        #: the exception object's tracker (None: made on demand from ``exc_type``)
        self.exception = exception


class MissingKey(UserRaised):
    """A traced lookup of a key a traced dict does not hold (a ``KeyError``
    at run time). Still a graph break, unless the caller models the
    ``except KeyError`` itself (``Mapping.__contains__``)."""

    def __init__(self, reason: str, key: Any = None) -> None:
        super().__init__(KeyError, reason)
        self.key = key


class InternalCaptureError(Exception):
    """A bug in ember's capture, not in the user's program.

    Example::

        ember.dynamo internal error while capturing `f` at model.py:3: stack
        underflow at BINARY_OP; please report this with the function source
    """


def frame_summary(code: types.CodeType, lineno: int | None) -> traceback.FrameSummary:
    """A FrameSummary for ``code`` at ``lineno`` with the source line filled in."""
    line = linecache.getline(code.co_filename, lineno or code.co_firstlineno).rstrip()
    return traceback.FrameSummary(
        code.co_filename, lineno or code.co_firstlineno, code.co_name, line=line
    )
