"""Where a value came from: access paths from the frame.

A source is how generated code (and guards) reach a value again without
tracing it: ``L['self'].layers[0].weight``. The guard IR has its own source
classes (``ember.ir``); :func:`to_ir` converts, so capture can also express
paths the guard IR spells the same way (closure cells are reached as
``G['f'].__closure__[0].cell_contents``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Source:
    def expr(self) -> str:
        raise NotImplementedError

    def name_hint(self) -> str:
        """An identifier derived from the path, for placeholders and attributes."""
        text = re.sub(r"[^0-9a-zA-Z_]+", "_", self.plain()).strip("_")
        if not text or text[0].isdigit():
            text = "v_" + text
        return text

    def plain(self) -> str:
        raise NotImplementedError

    def root(self) -> Source:
        return self


@dataclass(frozen=True, slots=True)
class LocalSource(Source):
    """A local variable (argument) of the frame: ``L['x']``.

    ``kind`` is how the frame stores it: ``fast`` (a plain local), ``cell``
    (captured by an inner function) or ``free`` (the frame's own closure).
    """

    name: str
    kind: str = "fast"

    def expr(self) -> str:
        return f"L[{self.name!r}]"

    def plain(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class GlobalSource(Source):
    name: str

    def expr(self) -> str:
        return f"G[{self.name!r}]"

    def plain(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class AttrSource(Source):
    base: Source
    attr: str

    def expr(self) -> str:
        return f"{self.base.expr()}.{self.attr}"

    def plain(self) -> str:
        return f"{self.base.plain()}_{self.attr}"

    def root(self) -> Source:
        return self.base.root()


@dataclass(frozen=True, slots=True)
class ItemSource(Source):
    """``base[key]`` for a constant ``key`` (int or str)."""

    base: Source
    key: Any

    def expr(self) -> str:
        return f"{self.base.expr()}[{self.key!r}]"

    def plain(self) -> str:
        return f"{self.base.plain()}_{self.key}"

    def root(self) -> Source:
        return self.base.root()


def to_ir(source: Source) -> Any:
    """The ``ember.ir`` source for ``source``."""
    from ember import ir

    if isinstance(source, LocalSource):
        return ir.Local(source.name)
    if isinstance(source, GlobalSource):
        return ir.Global(source.name)
    if isinstance(source, AttrSource):
        return ir.Attr(to_ir(source.base), source.attr)
    if isinstance(source, ItemSource):
        return ir.Item(to_ir(source.base), source.key)
    raise TypeError(f"no guard-IR source for {source!r}")
