"""Errors raised by ember.ir.

Every problem with an IR file or an IR object is a :class:`FormatError`: a
truncated file, a missing field, a wrong type, an unknown op target, a newer
major version, a dangling node reference, a weight missing from the weights
file. The message says what is wrong and where (file, node, field), so a user
never sees a raw ``KeyError`` from deep inside the reader.
"""

from __future__ import annotations


class FormatError(ValueError):
    """An IR text, file or object does not follow the ember IR format.

    Example::

        >>> raise FormatError("expected a list", file="g/graph.json", node="add_1", field="args")
        Traceback (most recent call last):
        ...
        ember.ir.errors.FormatError: g/graph.json: node 'add_1', field 'args': expected a list

    ``file``, ``node`` and ``field`` are kept as attributes so callers can
    re-raise with more context (see :meth:`with_context`).
    """

    def __init__(
        self,
        problem: str,
        *,
        file: str | None = None,
        node: str | None = None,
        field: str | None = None,
    ) -> None:
        self.problem = problem
        self.file = file
        self.node = node
        self.field = field
        super().__init__(self._render())

    def _render(self) -> str:
        where: list[str] = []
        if self.node is not None:
            where.append(f"node '{self.node}'")
        if self.field is not None:
            where.append(f"field '{self.field}'")
        text = ", ".join(where)
        if self.file is not None:
            text = f"{self.file}: {text}" if text else self.file
        return f"{text}: {self.problem}" if text else self.problem

    def with_context(
        self, *, file: str | None = None, node: str | None = None, field: str | None = None
    ) -> FormatError:
        """A copy with missing location parts filled in (existing parts win)."""
        return type(self)(
            self.problem,
            file=self.file if self.file is not None else file,
            node=self.node if self.node is not None else node,
            field=self.field if self.field is not None else field,
        )


class UnsupportedGraphError(FormatError):
    """``from_fx`` met something the graph IR cannot represent.

    Example: a ``call_module`` on a user-defined module class, or an argument
    of a type with no JSON encoding. The message names the node, the field and
    the offending object; the caller should keep running that graph eagerly.
    """
