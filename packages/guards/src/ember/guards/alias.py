"""Shared objects reached by several paths are guarded once.

Real models reach one object through many sources: a transformers config is
``L['self'].config``, ``L['self'].transformer.config`` and the ``config`` of
every attention block; a module's globals dict is the ``__globals__`` of each
function defined in it. Guards on such an object's attributes are then
repeated per path, and each repeat re-reads the attribute (for a config, two
Python ``__getattribute__`` calls per read).

:func:`share_aliases` finds, in the frame the guards were captured from, the
sources that something is read *through* (bases of other sources) and whose
value is the very object an earlier such source holds. For each such pair it
keeps one identity check, ``later is earlier``, and moves every guard read
through the later path onto the earlier one, where equal guards merge.

This is stricter than the original set, never looser: with the identity
holding, every read through the later path gives what the same read through
the earlier path gives, so the moved guards test the same values; and a call
where the two paths hold different objects (even objects that would pass
every original guard) fails the check and recompiles. Values whose identity
is an accident of CPython (small ints, interned strings, ``None``, bools) and
tensors (whose aliasing capture handles itself) are never merged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from ember.ir import Guard, GuardKind, Source, decode_value

#: Values whose identity carries no meaning (caches and interning make equal ones shared).
_NO_IDENTITY = (type(None), bool, int, float, complex, str, bytes, torch.Tensor)


@dataclass(frozen=True, slots=True)
class Alias:
    """``later`` (read through canonical bases) must be the object at ``earlier``."""

    later: Source
    earlier: Source
    #: the path as the capture wrote it, for explanations
    original: Source


def _chain(source: Source) -> list[Source]:
    """``source`` and its bases, outermost base first."""
    out = [source]
    while hasattr(source, "base"):
        source = source.base
        out.append(source)
    out.reverse()
    return out


def share_aliases(
    guards: Sequence[Guard],
    frame: tuple[Mapping[str, Any], Mapping[str, Any]],
    evaluate: Any,
) -> tuple[list[Guard], list[Alias]]:
    """``guards`` with paths through an already-seen object moved onto its first path,
    and the identity checks that make the move sound (``evaluate(source, *frame)``
    reads a source's value in the capture frame)."""
    # Bases of other sources, in the order the guards first reach them (shallow first).
    interior: dict[Source, None] = {}
    for g in guards:
        if g.source is not None:
            for s in _chain(g.source)[:-1]:
                interior.setdefault(s, None)
    if not interior:
        return list(guards), []
    canon: dict[Source, Source] = {}
    first_path: dict[int, Source] = {}
    alive: list[Any] = []  # keeps every value's id unique while the map is built
    aliases: list[Alias] = []

    def rebase(source: Source) -> Source:
        if source in canon:
            return canon[source]
        base = getattr(source, "base", None)
        if base is None:
            return source
        new_base = rebase(base)
        return source if new_base is base else replace(source, base=new_base)  # type: ignore[arg-type]

    for source in sorted(interior, key=lambda s: len(_chain(s))):
        moved = rebase(source)
        try:
            value = evaluate(source, *frame)
        except Exception:
            canon[source] = moved
            continue
        if isinstance(value, _NO_IDENTITY):
            canon[source] = moved
            continue
        alive.append(value)
        earlier = first_path.get(id(value))
        if earlier is None:
            first_path[id(value)] = moved
            canon[source] = moved
        elif earlier == moved:
            canon[source] = moved
        else:
            aliases.append(Alias(moved, earlier, source))
            canon[source] = earlier

    out: list[Guard] = []
    seen: set[Guard] = set()
    for g in guards:
        if g.source is not None:
            moved = rebase(g.source)
            if moved is not g.source:
                g = replace(g, source=moved)
        if g not in seen:
            seen.add(g)
            out.append(g)
    return out, aliases


def drop_implied(guards: Sequence[Guard]) -> list[Guard]:
    """``guards`` without the TYPE_MATCH that a same-source identity check implies:
    ``v is None`` / ``v is True`` / ``v is False`` (a CONSTANT_MATCH on a singleton)
    already pins ``type(v)``."""
    singleton_types: dict[Source, int] = {}
    for g in guards:
        if g.kind is GuardKind.CONSTANT_MATCH and g.source is not None:
            value = decode_value(g.payload["value"], field="payload.value")
            if value is None or isinstance(value, bool):
                singleton_types[g.source] = id(type(value))
    if not singleton_types:
        return list(guards)
    return [
        g
        for g in guards
        if not (
            g.kind is GuardKind.TYPE_MATCH
            and g.source is not None
            and singleton_types.get(g.source) == g.payload["type_id"]
        )
    ]
