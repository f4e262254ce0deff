"""What capture changes in place, and how a failed instruction is undone.

Trackers are immutable: once made, a tracker's attributes never change. A
Python object that *can* change (a list's items, a dict's items, a closure
cell, an iterator's position, a grad-mode block's saved mode) is modelled
by a :class:`Box` that every tracker for that object shares, so every alias
sees a change, as in Python. Box contents are themselves immutable values
(tuples, dicts never edited after they are made): a change writes a new
value into the box through the capture's :class:`Trail`, which remembers
the old one.

The trail is the undo log of one capture. Before each top-level
instruction the translator takes a mark; when the instruction raises
``Unsupported``, :meth:`Trail.undo` puts every box, journaled dict
(:class:`TrailDict`: the root frame's locals, the pending side effects)
back as it was at the mark, so the frame can be split right before the
instruction, even when the failing call had already mutated a container.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

T = TypeVar("T")

_MISSING: Any = object()


class Box(Generic[T]):
    """The current value of one mutable Python object, written only through a :class:`Trail`."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Box({self.value!r})"


class Trail:
    """The undo log of one capture: every in-place change since the last mark."""

    __slots__ = ("_undo", "writes")

    def __init__(self) -> None:
        # (box, old value) or (TrailDict, key, old value or _MISSING)
        self._undo: list[tuple[Any, ...]] = []
        #: How many observable changes were made (``set(..., observable=True)``), ever.
        self.writes = 0

    def set(self, box: Box[T], value: T, *, observable: bool = True) -> None:
        """``box.value = value``, undoably. ``observable=False`` for a change no
        other code can see: more of an object read (a lazily wrapped item or
        cell), an iterator advanced; ``writes`` counts only the others."""
        self._undo.append((box, box.value))
        box.value = value
        if observable:
            self.writes += 1

    def mark(self) -> int:
        """A point to :meth:`undo` to (cheap: the log's length)."""
        return len(self._undo)

    def undo(self, mark: int) -> None:
        """Put back everything changed since ``mark``, newest first."""
        log = self._undo
        while len(log) > mark:
            entry = log.pop()
            if len(entry) == 2:
                entry[0].value = entry[1]
            else:
                target, key, old = entry
                if old is _MISSING:
                    dict.pop(target, key, None)
                else:
                    dict.__setitem__(target, key, old)

    def forget(self) -> None:
        """Drop the log (no undo can reach further back than now)."""
        self._undo.clear()

    def _record(self, target: TrailDict[Any, Any], key: Any, old: Any) -> None:
        self._undo.append((target, key, old))


K = TypeVar("K")
V = TypeVar("V")


class TrailDict(dict[K, V]):
    """A dict whose writes are undoable through a :class:`Trail` (reads are plain dict reads).

    Only ``[k] = v``, ``del d[k]``, ``pop`` and ``setdefault`` may change it.
    """

    __slots__ = ("_trail",)

    def __init__(self, trail: Trail, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._trail = trail

    def __setitem__(self, key: K, value: V) -> None:
        self._trail._record(self, key, dict.get(self, key, _MISSING))
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: K) -> None:
        old = dict.__getitem__(self, key)
        self._trail._record(self, key, old)
        dict.__delitem__(self, key)

    def pop(self, key: K, *default: Any) -> Any:
        if key in self:
            self._trail._record(self, key, dict.__getitem__(self, key))
        return dict.pop(self, key, *default)

    def setdefault(self, key: K, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return dict.__getitem__(self, key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def clear(self) -> None:
        for key in list(self):
            del self[key]

    def popitem(self) -> tuple[K, V]:
        raise TypeError("TrailDict.popitem is not undoable")
