"""How the generated check function reads a source from its base's local.

The plain read is the source's own expression (``v0.transformer``, ``v3[0]``,
``dict.__getitem__(v2, 'silu')``).
Reads that would run Python code on every check get a cheaper spelling with
the same value, chosen from the value the frame held when the guards were
built:

- a submodule, parameter or buffer of an ``nn.Module``: plain attribute lookup
  misses (they are not in the instance ``__dict__``), raises ``AttributeError``
  inside CPython and calls ``Module.__getattr__`` in Python, which searches
  ``_parameters``, ``_buffers`` and ``_modules``. The check reads the dict that
  held it, ``v0._modules['transformer']``, unless the name is in the instance
  ``__dict__`` now (then it reads the attribute as Python would). A name that
  moved to another of the three dicts raises ``KeyError``: the guards fail.
- ``nn.ModuleList[i]`` (``i >= 0``) and ``nn.ModuleDict[key]`` read
  ``_modules[str(i)]`` / ``_modules[key]``, which is what their Python
  ``__getitem__`` returns; an index past the end raises ``KeyError``.

These spellings assume the class itself was not changed after capture (a
class attribute of the same name added later would shadow the dict entry for
Python but not for the check), as TorchDynamo's guards on ``_modules`` do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ember.ir import Attr, DictItem, Global, Item, Local, Size, Source, Stride
from ember.ir.source import DICT_ITEM_PREFIX

_MODULE_DICTS = ("_parameters", "_buffers", "_modules")


def plain_read(source: Source, names: Mapping[Source, str]) -> str:
    """Python text reading ``source`` from its base's local (or from L / G)."""
    if isinstance(source, Local) or not hasattr(source, "base"):
        return source.expr()
    base = source.base
    text, base_text = source.expr(), base.expr()
    if isinstance(source, DictItem):  # ``dict.__getitem__(<base>, key)``: the base inside
        head = len(DICT_ITEM_PREFIX)
        return DICT_ITEM_PREFIX + names[base] + text[head + len(base_text) :]
    return names[base] + text[len(base_text) :]


Read = tuple[str, tuple[Any, ...]]
"""A read's Python text and the same read as a native op (``native.py``)."""


def plain_op(source: Source, names: Mapping[Source, str]) -> tuple[Any, ...]:
    """The native op of :func:`plain_read` (``("attr", base, "x")``, ``("local", "x")``...)."""
    if isinstance(source, Local):
        return ("local", source.name)
    if isinstance(source, Global):
        return ("global", source.name)
    base = names[source.base]
    if isinstance(source, Attr):
        return ("attr", base, source.member)
    if isinstance(source, Item):
        return ("item", base, source.index)
    if isinstance(source, DictItem):
        return ("dict_item", base, source.index)
    if isinstance(source, Size):
        return ("size", base, source.dim)
    if isinstance(source, Stride):
        return ("stride", base, source.dim)
    raise TypeError(f"no native read for {type(source).__name__}")


def fast_read(source: Source, base_name: str, base_value: Any) -> Read | None:
    """A cheaper read of ``source`` with the same value, or ``None`` (use the plain one)."""
    if not isinstance(base_value, torch.nn.Module):
        return None
    cls = type(base_value)
    if cls.__getattribute__ is not object.__getattribute__:
        return None
    if isinstance(source, Attr):
        return _module_attr(source.member, base_name, base_value, cls)
    if isinstance(source, Item):
        index = source.index
        if cls is torch.nn.ModuleList and type(index) is int and 0 <= index < len(base_value._modules):
            return f"{base_name}._modules[{str(index)!r}]", ("module_item", base_name, str(index))
        if cls is torch.nn.ModuleDict and type(index) is str and index in base_value._modules:
            return f"{base_name}._modules[{index!r}]", ("module_item", base_name, index)
    return None


def _module_attr(member: str, base_name: str, value: torch.nn.Module, cls: type) -> Read | None:
    if getattr(cls, "__getattr__", None) is not torch.nn.Module.__getattr__:
        return None
    if member in value.__dict__ or any(member in k.__dict__ for k in cls.__mro__):
        return None  # found by plain lookup: no __getattr__ call to save
    for dict_name in _MODULE_DICTS:
        if member in value.__dict__.get(dict_name, ()):
            text = (
                f"({base_name}.{dict_name}[{member!r}] if {member!r} not in "
                f"{base_name}.__dict__ else {base_name}.{member})"
            )
            return text, ("module_attr", base_name, dict_name, member)
    return None
