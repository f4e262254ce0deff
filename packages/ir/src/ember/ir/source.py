"""Sources: where a guarded value lives, as a tiny expression language.

A source is an access path from a frame: ``L['x']`` (a local), ``G['torch']``
(a global), ``.member`` (an attribute), ``[index]`` (an item), ``.size()[d]``
and ``.stride()[d]`` (a tensor's size or stride), and
``dict.__getitem__(base, key)`` (a dict's own item, read past a ``__getitem__``
that a dict subclass overrides; guard format 2.0, ADR 0045). ``Source.expr()`` writes the
path as text that is also valid Python when evaluated with ``L`` bound to
``f_locals`` and ``G`` to ``f_globals``; :func:`parse_source` reads it back
with a small hand-written parser (text is never evaluated). The round trip
``parse_source(s.expr()) == s`` holds for every source.

Item indices are constants: ``int``, ``str``, ``bool``, ``None``, ``float``
or a tuple of those.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TypeAlias

from ember.ir.errors import FormatError

Index: TypeAlias = int | str | bool | float | None | tuple["Index", ...]


def _index_text(index: Index) -> str:
    if isinstance(index, float) and not math.isfinite(index):
        raise FormatError(f"source index {index!r} is not a finite number")
    if isinstance(index, tuple):
        inner = ", ".join(_index_text(i) for i in index)
        return f"({inner},)" if len(index) == 1 else f"({inner})"
    return repr(index)


def _check_index(index: object) -> None:
    if isinstance(index, tuple):
        for i in index:
            _check_index(i)
    elif index is not None and not isinstance(index, (int, str, bool, float)):
        raise FormatError(f"source index must be a constant, got {type(index).__name__}")


def _cache_hash(source: object, parts: tuple[object, ...]) -> int:
    """A derived source's hash, computed once: guard sets hash long chains many times
    (``L['self'].encoder.layer[3].attention.query.weight``: every base again per lookup)."""
    h = hash(parts) or 1
    object.__setattr__(source, "_hash", h)
    return h


@dataclass(frozen=True, slots=True)
class Local:
    """A local variable of the frame: ``L['x']``."""

    name: str

    def expr(self) -> str:
        return f"L[{self.name!r}]"


@dataclass(frozen=True, slots=True)
class Global:
    """A global of the frame's module: ``G['torch']``."""

    name: str

    def expr(self) -> str:
        return f"G[{self.name!r}]"


@dataclass(frozen=True, slots=True)
class Attr:
    """An attribute: ``G['torch'].nn``."""

    base: Source
    member: str
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        return self._hash or _cache_hash(self, (Attr, self.base, self.member))

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return Attr, (self.base, self.member)  # the cached hash is per process: never pickled

    def __post_init__(self) -> None:
        if not self.member.isidentifier():
            raise FormatError(f"attribute name {self.member!r} is not a Python identifier")

    def expr(self) -> str:
        return f"{self.base.expr()}.{self.member}"


@dataclass(frozen=True, slots=True)
class Item:
    """An item: ``L['self'].layers[2]`` or ``L['d']['key']``."""

    base: Source
    index: Index
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        return self._hash or _cache_hash(self, (Item, self.base, self.index))

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return Item, (self.base, self.index)  # the cached hash is per process: never pickled

    def __post_init__(self) -> None:
        _check_index(self.index)

    def expr(self) -> str:
        return f"{self.base.expr()}[{_index_text(self.index)}]"


@dataclass(frozen=True, slots=True)
class Size:
    """One dimension of a tensor's size: ``L['x'].size()[0]``."""

    base: Source
    dim: int
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        return self._hash or _cache_hash(self, (Size, self.base, self.dim))

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return Size, (self.base, self.dim)  # the cached hash is per process: never pickled

    def expr(self) -> str:
        return f"{self.base.expr()}.size()[{self.dim}]"


@dataclass(frozen=True, slots=True)
class Stride:
    """One dimension of a tensor's stride: ``L['x'].stride()[0]``."""

    base: Source
    dim: int
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        return self._hash or _cache_hash(self, (Stride, self.base, self.dim))

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return Stride, (self.base, self.dim)  # the cached hash is per process: never pickled

    def expr(self) -> str:
        return f"{self.base.expr()}.stride()[{self.dim}]"


@dataclass(frozen=True, slots=True)
class DictItem:
    """A dict's own item, read as ``dict.__getitem__`` reads it:
    ``dict.__getitem__(L['acts'], 'silu')``.

    A dict subclass may override ``__getitem__`` (transformers' ``ACT2FN``
    builds a new module on every ``acts['silu']``), so ``Item`` would not name
    the object the dict holds. This source does, whatever the subclass does; it
    is written as a call because that is the Python that reads it. New in guard
    format 2.0 (``needs_format_2``).
    """

    base: Source
    index: Index
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        return self._hash or _cache_hash(self, (DictItem, self.base, self.index))

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return DictItem, (self.base, self.index)  # the cached hash is per process: never pickled

    def __post_init__(self) -> None:
        _check_index(self.index)

    def expr(self) -> str:
        return f"{DICT_ITEM_PREFIX}{self.base.expr()}, {_index_text(self.index)})"


#: how a :class:`DictItem` source's text starts
DICT_ITEM_PREFIX = "dict.__getitem__("


@dataclass(frozen=True, slots=True)
class DictEntry:
    """The key or the value at a position of a dict's own order:
    ``list(dict.keys(G['table']))[2]``, ``list(dict.values(G['table']))[2]``.

    A dict keyed by objects that are not constants (classes, ``typing.Union``:
    a registry of handlers per type) has keys no source text can name. Its keys
    are guarded by position (each key by identity) and its values are read by
    the same positions, which name them exactly while the keys match. Written
    as the Python that reads it (``dict``'s methods, past a subclass's
    overrides). New in guard format 2.1.
    """

    base: Source
    position: int
    #: ``"keys"`` or ``"values"``
    part: str
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        return self._hash or _cache_hash(self, (DictEntry, self.base, self.position, self.part))

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return DictEntry, (self.base, self.position, self.part)  # the cached hash is never pickled

    def __post_init__(self) -> None:
        if self.part not in ("keys", "values"):
            raise FormatError(f"a dict entry source reads 'keys' or 'values', not {self.part!r}")
        if not isinstance(self.position, int) or isinstance(self.position, bool) or self.position < 0:
            raise FormatError(f"a dict entry's position is an int >= 0, got {self.position!r}")

    def expr(self) -> str:
        return f"list(dict.{self.part}({self.base.expr()}))[{self.position}]"


#: how a :class:`DictEntry` source's text starts, per part
DICT_ENTRY_PREFIXES = {"keys": "list(dict.keys(", "values": "list(dict.values("}

Source: TypeAlias = Local | Global | Attr | Item | Size | Stride | DictItem | DictEntry
SOURCE_TYPES: tuple[type, ...] = (Local, Global, Attr, Item, Size, Stride, DictItem, DictEntry)


def format_needed(source: Source) -> tuple[int, int]:
    """The oldest guard format whose source text holds ``source``: 1.0, 2.0 (it reads
    through a :class:`DictItem`) or 2.1 (through a :class:`DictEntry`)."""
    need = (1, 0)
    while not isinstance(source, (Local, Global)):
        if isinstance(source, DictEntry):
            return (2, 1)
        if isinstance(source, DictItem):
            need = (2, 0)
        source = source.base
    return need


def needs_format_2(source: Source) -> bool:
    """Whether ``source``'s text needs guard format 2 (it reads through a
    :class:`DictItem` or a :class:`DictEntry`)."""
    return format_needed(source) >= (2, 0)


def root_of(source: Source) -> Local | Global:
    """The ``L[...]`` or ``G[...]`` a source starts from."""
    while not isinstance(source, (Local, Global)):
        source = source.base
    return source


class _Parser:
    """Recursive-descent parser over the source text; errors carry the position."""

    def __init__(self, text: str, pos: int = 0, *, nested: bool = False) -> None:
        self.text = text
        self.pos = pos
        #: where the source being parsed starts (after ``dict.__getitem__(`` for the
        #: base of a ``DictItem``): what ``text[start:pos]`` remembers is a whole source
        self.start = pos if nested else 0
        #: parsing the base of a ``DictItem``: its trailers end at the ``,`` after it
        self.nested = nested

    def fail(self, what: str) -> FormatError:
        caret = " " * self.pos + "^"
        return FormatError(f"bad source text at position {self.pos}: {what}\n  {self.text}\n  {caret}")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip_ws(self) -> None:
        while self.peek() in (" ", "\t"):
            self.pos += 1

    def expect(self, token: str) -> None:
        self.skip_ws()
        if not self.text.startswith(token, self.pos):
            raise self.fail(f"expected {token!r}")
        self.pos += len(token)

    def parse(self) -> Source:
        self.skip_ws()
        if self.text.startswith(DICT_ITEM_PREFIX, self.pos):
            return self.trailers(self.dict_item())
        for part, prefix in DICT_ENTRY_PREFIXES.items():
            if self.text.startswith(prefix, self.pos):
                return self.trailers(self.dict_entry(part, prefix))
        head = self.peek()
        if head not in ("L", "G"):
            raise self.fail("a source starts with L[...], G[...] or dict.__getitem__(")
        self.pos += 1
        self.expect("[")
        name = self.constant()
        if not isinstance(name, str):
            raise self.fail("L[...] and G[...] take a string name")
        self.expect("]")
        return self.trailers(Local(name) if head == "L" else Global(name))

    def inner_source(self, prefix: str) -> Source:
        """The source written inside a call from ``pos`` on: ``prefix`` (``dict.__getitem__(``,
        ``list(dict.keys(``) skipped, the source parsed up to the ``,`` or ``)`` after it."""
        self.pos += len(prefix)
        self.skip_ws()
        inner = _Parser(self.text, self.pos, nested=True)
        base = inner.parse()
        self.pos = inner.pos
        return base

    def dict_item(self) -> DictItem:
        """``dict.__getitem__(<source>, <constant>)`` from ``pos`` on."""
        base = self.inner_source(DICT_ITEM_PREFIX)
        self.expect(",")
        index = self.constant()
        self.expect(")")
        return DictItem(base, index)

    def dict_entry(self, part: str, prefix: str) -> DictEntry:
        """``list(dict.keys(<source>))[<int>]`` (or ``values``) from ``pos`` on."""
        base = self.inner_source(prefix)
        self.expect("))")
        self.expect("[")
        position = self.constant()
        if not isinstance(position, int) or isinstance(position, bool):
            raise self.fail("a dict entry's position is an int")
        self.expect("]")
        return DictEntry(base, position, part)

    def trailers(self, src: Source) -> Source:
        """``src`` followed by the ``.member`` / ``[index]`` trailers from ``pos`` on; each
        prefix parsed is remembered, so sources sharing a base parse only their own end."""
        while True:
            if len(_PARSED) < _PARSED_MAX:
                _PARSED.setdefault(self.text[self.start : self.pos], src)
            self.skip_ws()
            ch = self.peek()
            if ch == "" or (self.nested and ch in ",)"):
                return src
            if ch == "[":
                self.pos += 1
                index = self.constant()
                self.expect("]")
                src = Item(src, index)
            elif ch == ".":
                self.pos += 1
                member = self.identifier()
                if member in ("size", "stride") and self.text.startswith("()", self.pos):
                    self.pos += 2
                    self.expect("[")
                    dim = self.constant()
                    if not isinstance(dim, int) or isinstance(dim, bool):
                        raise self.fail(f".{member}() takes an int index")
                    self.expect("]")
                    src = Size(src, dim) if member == "size" else Stride(src, dim)
                else:
                    src = Attr(src, member)
            else:
                raise self.fail(f"unexpected character {ch!r}")

    def identifier(self) -> str:
        start = self.pos
        self.pos = _WORD.match(self.text, start).end()  # type: ignore[union-attr]  # \w*: always matches
        word = self.text[start : self.pos]
        if not word.isidentifier():
            self.pos = start
            raise self.fail("expected an attribute name")
        return word

    def constant(self) -> Index:
        self.skip_ws()
        ch = self.peek()
        if ch in ("'", '"'):
            return self.string(ch)
        if ch == "(":
            return self.tuple_()
        if ch.isdigit() or ch in ("-", "+", "."):
            return self.number()
        if ch.isalpha():
            start = self.pos
            word = self.identifier()
            if word in ("None", "True", "False"):
                return {"None": None, "True": True, "False": False}[word]
            self.pos = start
        raise self.fail("expected a constant (int, str, None, True, False, float or tuple)")

    def tuple_(self) -> Index:
        self.pos += 1
        items: list[Index] = []
        self.skip_ws()
        if self.peek() == ")":
            self.pos += 1
            return ()
        while True:
            items.append(self.constant())
            self.skip_ws()
            if self.peek() == ",":
                self.pos += 1
                self.skip_ws()
                if self.peek() == ")":
                    self.pos += 1
                    return tuple(items)
            elif self.peek() == ")":
                self.pos += 1
                if len(items) == 1:
                    raise self.fail("a one-element tuple needs a trailing comma")
                return tuple(items)
            else:
                raise self.fail("expected ',' or ')'")

    def number(self) -> Index:
        start = self.pos
        if self.peek() in ("-", "+"):
            self.pos += 1
        while self.pos < len(self.text) and (self.text[self.pos].isalnum() or self.text[self.pos] in "._+-"):
            prev = self.text[self.pos - 1]
            if self.text[self.pos] in "+-" and prev not in "eE":
                break
            self.pos += 1
        word = self.text[start : self.pos]
        try:
            return int(word, 0) if not any(c in word for c in ".eE") or word.lower().startswith(("0x", "-0x")) else float(word)
        except ValueError:
            self.pos = start
            raise self.fail(f"bad number {word!r}") from None

    def string(self, quote: str) -> str:
        self.pos += 1
        out: list[str] = []
        escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0"}
        while True:
            ch = self.peek()
            if ch == "":
                raise self.fail("unterminated string")
            self.pos += 1
            if ch == quote:
                return "".join(out)
            if ch != "\\":
                out.append(ch)
                continue
            esc = self.peek()
            self.pos += 1
            if esc in escapes:
                out.append(escapes[esc])
            elif esc in ("x", "u", "U"):
                width = {"x": 2, "u": 4, "U": 8}[esc]
                digits = self.text[self.pos : self.pos + width]
                try:
                    out.append(chr(int(digits, 16)))
                except ValueError:
                    raise self.fail(f"bad escape \\{esc}{digits}") from None
                self.pos += width
            else:
                raise self.fail(f"unsupported escape \\{esc}")


def parse_source(text: str) -> Source:
    """Parse source text like ``L['self'].layers[2].weight`` (never evaluated).

    Raises :class:`FormatError` with the position of the first bad character.
    """
    if not isinstance(text, str):
        raise FormatError(f"source text must be a string, got {type(text).__name__}")
    found = _PARSED.get(text)
    if found is None:
        # Sources are immutable: a stored frame's hundreds of guard sources, parsed once
        # when its file is checked and again when it is bound, are parsed once.
        found = _parse_after_known_base(text) or _Parser(text).parse()
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[text] = found
    return found


_PARSED: dict[str, Source] = {}
_PARSED_MAX = 1 << 16
#: what ``str.isalnum()`` or ``_`` accepts (``\w`` on str patterns is exactly that)
_WORD = re.compile(r"\w*")


def _parse_after_known_base(text: str) -> Source | None:
    """``text`` parsed from its longest already-parsed prefix ending before a ``.`` or
    ``[`` (a guard set's sources share long bases), or None when there is none.

    A remembered prefix is a complete source text, so ``text`` parses as that source
    followed by trailers: a cut inside a string or number constant leaves an incomplete
    prefix, which was never remembered.
    """
    cut = len(text)
    while True:
        cut = max(text.rfind(".", 0, cut), text.rfind("[", 0, cut))
        if cut <= 0:
            return None
        base = _PARSED.get(text[:cut])
        if base is not None:
            return _Parser(text, cut).trailers(base)
