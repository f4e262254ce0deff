"""Functions the generated code calls to rebuild objects created while tracing.

An instance of a user class made inside a captured frame (a ``ModelOutput``,
a ``DynamicCache``, a dataclass) exists only as a tracker while the frame is
traced. When it leaves the frame (returned, stored, live across a graph
break), the transformed code makes the real object from what tracing
recorded: its class, its dict items (for ``dict``/``OrderedDict``
subclasses) and its instance attributes, without running ``__init__``
again (its effects are already in those values). Imports nothing from
ember.dynamo.
"""

from __future__ import annotations

from typing import Any


def rebuild_object(
    cls: type,
    dict_base: Any,
    items: tuple[tuple[Any, Any], ...],
    attrs: dict[str, Any],
) -> Any:
    """An instance of ``cls`` holding ``items`` (through ``dict_base``'s own
    ``__setitem__``, bypassing overrides) and ``attrs`` (through
    ``object.__setattr__``, which also fills ``__slots__``)."""
    obj: Any
    if dict_base is None:
        obj = object.__new__(cls)
    else:
        obj = dict_base.__new__(cls)
        setitem = dict_base.__setitem__
        for key, value in items:
            setitem(obj, key, value)
    for name, value in attrs.items():
        object.__setattr__(obj, name, value)
    return obj


def rebuild_module(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any], training: bool) -> Any:
    """A stateless ``nn.Module`` made inside the frame, made again the same way."""
    module = cls(*args, **kwargs)
    module.train(training)
    return module


def dict_entry(d: dict[Any, Any], position: int, part: str) -> Any:
    """The key (``part == "keys"``) or value at ``position`` of ``d``'s own order:
    what an ``ember.ir.DictEntry`` source names."""
    return list(dict.keys(d) if part == "keys" else dict.values(d))[position]
