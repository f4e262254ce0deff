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

An attribute of an object whose class's ``__getattribute__`` chain is transformers'
config one (``PretrainedConfig``'s ``attribute_map`` translation, 5.x's
``HeterogeneousConfigMixin``'s, then ``object.__getattribute__``; each recognised by its
code, :func:`config_layers`) keeps its Python text; only the native check reads it
differently (``config_attr`` in ``native_prelude.c``, ADR 0058): the same lookups in C,
while the class still resolves to those functions (checked per class version tag),
instead of Python calls that make their ``super()`` lookups (~1 us a read and a level).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ember.ir import (
    DICT_ENTRY_PREFIXES,
    DICT_ITEM_PREFIX,
    Attr,
    DictEntry,
    DictItem,
    Global,
    Item,
    Local,
    Size,
    Source,
    Stride,
)

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
    if isinstance(source, DictEntry):  # ``list(dict.values(<base>))[i]``: the base inside
        prefix = DICT_ENTRY_PREFIXES[source.part]
        return prefix + names[base] + text[len(prefix) + len(base_text) :]
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
    if isinstance(source, DictEntry):
        return ("dict_entry", base, source.position, source.part)
    if isinstance(source, Size):
        return ("size", base, source.dim)
    if isinstance(source, Stride):
        return ("stride", base, source.dim)
    raise TypeError(f"no native read for {type(source).__name__}")


class _MapLayer:
    """transformers' ``PretrainedConfig.__getattribute__`` as written there (4.x, 5.x): the
    ``attribute_map`` translation. A class's ``__getattribute__`` with this code is a
    ``map`` layer of ``config_attr`` (``native_prelude.c``)."""

    def __getattribute__(self, key: str) -> Any:
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


AmbiguousGlobalPerLayerAttributeError: Any = None  # names the reference below reads (never runs)
logger: Any = None


class _HeterogeneousLayer:
    """transformers 5.x's ``HeterogeneousConfigMixin.__getattribute__`` as written there: a
    class's ``__getattribute__`` with this code is a ``heterogeneous`` layer of
    ``config_attr``, read natively only while the instance has no ``_heterogeneity_spec``
    (else ``config_attr`` calls the function itself)."""

    def __getattribute__(self, key: str) -> Any:
        # In heterogeneous configs, per-layer attributes are ambiguous on the global config.
        # Callers must read them from a concrete layer unless they explicitly opt into the global value.
        heterogeneity_spec = super().__getattribute__("__dict__").get("_heterogeneity_spec")
        if heterogeneity_spec is not None:  # noqa: SIM102 (transformers' code, as written there)
            if key in heterogeneity_spec.per_layer_attributes:
                if not super().__getattribute__("allow_global_per_layer_attribute_access"):
                    raise AmbiguousGlobalPerLayerAttributeError(
                        f"'{key}' is a per-layer attribute and may vary across layers. Access it via the individual layer "
                        f"configs instead (e.g. config.per_layer_config[i].{key}). To read the global config value from "
                        f"config.{key} anyway, set `allow_global_per_layer_attribute_access` to `True` on the config. "
                        f"Warning: only do this if the caller can safely handle heterogeneous configs; code that assumes "
                        f"a homogeneous model may use the global value incorrectly."
                    )

                logger.warning_once(
                    f"Reading global config value for per-layer attribute `{key}` on a heterogeneous config. "
                    "Only do this if the caller can safely handle heterogeneous configs; code that assumes a homogeneous "
                    "model may use the global value incorrectly."
                )

        return super().__getattribute__(key)


#: ``config_attr``'s layer kinds (``native_prelude.c``): 0 map, 1 heterogeneous
_LAYERS = ((0, _MapLayer.__dict__["__getattribute__"]), (1, _HeterogeneousLayer.__dict__["__getattribute__"]))
_CODE_FIELDS = ("co_code", "co_consts", "co_names", "co_varnames", "co_freevars", "co_cellvars", "co_argcount",
                "co_kwonlyargcount", "co_flags")


def _layer_kind(fn: Any) -> int | None:
    code = getattr(fn, "__code__", None)
    if code is None or getattr(fn, "__defaults__", None) or getattr(fn, "__kwdefaults__", None):
        return None
    for kind, ref in _LAYERS:
        if all(getattr(code, f) == getattr(ref.__code__, f) for f in _CODE_FIELDS):
            return kind
    return None


def config_layers(cls: type) -> tuple[tuple[Any, ...], ...] | None:
    """The ``__getattribute__`` chain of ``cls`` as ``config_attr`` layers ``(kind, function,
    its code, the class defining it)``, in MRO order, where every class in the MRO that
    defines ``__getattribute__`` (``object`` apart, which ends the chain) has one of the
    reference codes above, each function's ``super()`` cell names its class, no class has
    ``__getattr__`` and ``super`` is the builtin in each function's globals; else ``None``."""
    if getattr(cls, "__getattr__", None) is not None:
        return None
    layers = []
    for k in cls.__mro__:
        fn = k.__dict__.get("__getattribute__")
        if fn is None or k is object:
            continue
        kind = _layer_kind(fn)
        closure: tuple[Any, ...] = getattr(fn, "__closure__", None) or ()
        if kind is None or len(closure) != 1 or closure[0].cell_contents is not k:
            return None
        if "super" in getattr(fn, "__globals__", {}):
            return None
        layers.append((kind, fn, fn.__code__, k))
    return tuple(layers) or None


def fast_read(source: Source, base_name: str, base_value: Any) -> Read | None:
    """A cheaper read of ``source`` with the same value, or ``None`` (use the plain one)."""
    if isinstance(source, Attr) and not isinstance(base_value, torch.nn.Module):
        layers = config_layers(type(base_value))
        if layers is None:
            return None
        return f"{base_name}.{source.member}", ("config_attr", base_name, source.member, layers)
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


def instance_dict_op(op: tuple[Any, ...], source: Source, base_value: Any) -> tuple[Any, ...]:
    """``op`` (a plain read), as ``("module_dict_attr", base, name)`` where it reads an
    ``nn.Module``'s attribute held in its instance ``__dict__`` and named by no class of its
    MRO (``training``, the hook dicts, plain attributes): still ``PyObject_GetAttr`` in C, but
    one a module's unchanged state lets the native check serve from its record (ADR 0062)."""
    if op[0] != "attr" or not isinstance(base_value, torch.nn.Module) or not isinstance(source, Attr):
        return op
    member = source.member
    try:
        found = member in base_value.__dict__
    except Exception:
        return op
    if not found or any(member in k.__dict__ for k in type(base_value).__mro__):
        return op
    return ("module_dict_attr", op[1], member)


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
