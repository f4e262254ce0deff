"""Guards that survive the process: identity guards written as stable names, bound again to live objects.

Five guard kinds name an object by its address (``id``): ``TYPE_MATCH``
and ``TENSOR_MATCH`` (the class), ``ID_MATCH``, ``FUNCTION_MATCH`` and
``NN_MODULE``. An address
means nothing in another process, nor for another instance of the same
module. :func:`make_portable` adds to each such guard a ``portable`` payload
field naming what the object *is* in a way every process agrees on:

* a module by its import name (``module:torch.nn.functional``);
* a class by module and qualified name (``class:torch.nn.modules.linear.Linear``);
* a builtin or torch function by module and name, a Python function by name
  and the digest of its bytecode (so an edited global function is another
  function);
* a code object by the digest of its content (``code:3fa9...``): how ember
  guards a user function or a module's ``forward``;
* an ``nn.Module`` by its class: the module's attributes are guarded where
  capture read them, its parameters by metadata (the frame cache adds a
  ``TENSOR_MATCH`` per parameter), and a leaf module's configuration is
  compared with the graph IR's module record when the entry is bound.

Anything else (a user object pinned by identity, a class defined inside a
function) has no such name: :func:`make_portable` says why, and the entry
stays in its process. :func:`bind` evaluates each portable guard's source
on a live frame, checks the stable name, and writes the live object's id
into the payload, giving an ordinary guard set that ``ember.guards``
compiles (identity checks, weakly held, for as long as the entry lives).
"""

from __future__ import annotations

import enum
import hashlib
import sys
import types
from typing import Any

from ember import guards
from ember.ir import Guard, GuardKind, GuardSet, Source
from ember.ir.cache_entry import hash_code

#: The payload field holding an address, per kind that has one.
IDENTITY_FIELDS: dict[GuardKind, str] = {
    GuardKind.TYPE_MATCH: "type_id",
    GuardKind.ID_MATCH: "id",
    GuardKind.FUNCTION_MATCH: "id",
    GuardKind.NN_MODULE: "id",
    GuardKind.TENSOR_MATCH: "cls_id",
}

#: Kinds whose address is the value's class.
_OF_CLASS = (GuardKind.TYPE_MATCH, GuardKind.NN_MODULE, GuardKind.TENSOR_MATCH)

_DESCRIPTORS = (
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.ClassMethodDescriptorType,
    types.MethodWrapperType,
)


def code_digest(code: types.CodeType) -> str:
    """A digest of everything that makes ``code`` the program it is (same in every process)."""
    h = hashlib.sha256()
    hash_code(code, h)
    return h.hexdigest()[:24]


def _class_name(cls: type) -> str | None:
    qual = getattr(cls, "__qualname__", "")
    module = getattr(cls, "__module__", None)
    if not module or not qual or "<locals>" in qual:
        return None  # a class made inside a function: many classes share the name
    return f"{module}.{qual}"


def identity_of(value: Any) -> str | None:
    """A name for ``value`` that every process agrees on, or None if it has none."""
    if isinstance(value, types.ModuleType):
        return f"module:{value.__name__}"
    if isinstance(value, types.CodeType):
        return f"code:{code_digest(value)}"
    if isinstance(value, type):
        name = _class_name(value)
        return None if name is None else f"class:{name}"
    if isinstance(value, enum.Enum):
        cls = _class_name(type(value))
        return None if cls is None else f"enum:{cls}.{value.name}"
    if isinstance(value, types.FunctionType):
        module, qual = value.__module__, value.__qualname__
        if not module or "<locals>" in qual:
            return None
        return f"function:{module}.{qual}:{code_digest(value.__code__)}"
    if isinstance(value, types.BuiltinFunctionType):
        owner = value.__self__
        if owner is not None and not isinstance(owner, (types.ModuleType, type)):
            return None  # a method bound to some object
        where = getattr(value, "__module__", None) or getattr(owner, "__name__", None)
        return f"builtin:{where}.{value.__qualname__}"
    if isinstance(value, _DESCRIPTORS):
        owner_cls = getattr(value, "__objclass__", None)
        cls = _class_name(owner_cls) if isinstance(owner_cls, type) else None
        return None if cls is None else f"descriptor:{cls}.{value.__name__}"
    return None


def resolve(name: str) -> Any | None:
    """The object :func:`identity_of` calls ``name`` in this process, or None.

    Only modules already imported are searched (resolving never imports, so
    it never runs a module's code); the object found must give ``name`` back.
    """
    kind, _, rest = name.partition(":")
    if kind == "module":
        found: Any = sys.modules.get(rest)
    elif kind in ("class", "builtin", "function", "descriptor"):
        dotted = rest.rpartition(":")[0] if kind == "function" else rest
        found = _lookup_dotted(dotted)
    else:
        return None
    return found if found is not None and identity_of(found) == name else None


def _lookup_dotted(dotted: str) -> Any | None:
    """``a.b.C.f`` as the longest imported module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        value: Any = module
        for attr in parts[cut:]:
            value = getattr(value, attr, None)
            if value is None:
                return None
        return value
    return None


def fingerprint(kind: GuardKind, value: Any) -> str | None:
    """The stable name a guard of ``kind`` on ``value`` stands for."""
    if kind in _OF_CLASS:
        return identity_of(type(value))
    return identity_of(value)


def _source_text(source: Source | None) -> str:
    return source.expr() if source is not None else "(no source)"


def make_portable(
    guard_set: GuardSet, f_locals: dict[str, Any], f_globals: dict[str, Any]
) -> tuple[GuardSet | None, str]:
    """``guard_set`` with a stable name beside every address; ``(None, why)`` when one has none."""
    out: list[Guard] = []
    for g in guard_set.guards:
        if g.kind not in IDENTITY_FIELDS or g.source is None:
            out.append(g)
            continue
        try:
            value = guards.eval_source(g.source, f_locals, f_globals)
        except Exception as exc:
            return None, f"{g.kind.value} guard on {_source_text(g.source)} cannot be read ({exc})"
        name = fingerprint(g.kind, value)
        if name is None:
            return None, (
                f"{g.kind.value} guard on {_source_text(g.source)} names a "
                f"`{type(value).__qualname__}` object by identity"
            )
        out.append(Guard(g.source, g.kind, {**g.payload, "portable": name}))
    return GuardSet(tuple(out)), ""


def bind(
    guard_set: GuardSet, f_locals: dict[str, Any], f_globals: dict[str, Any]
) -> tuple[GuardSet | None, str]:
    """The guard set with the live frame's ids, or ``(None, why)`` if a stable name does not match."""
    out: list[Guard] = []
    for g in guard_set.guards:
        name = g.payload.get("portable")
        field = IDENTITY_FIELDS.get(g.kind)
        if field is None or g.source is None:
            out.append(g)
            continue
        where = f"{g.kind.value} on {g.source.expr()}"
        if name is None:
            return None, f"{where} holds an address from another process"  # never trusted
        try:
            value = guards.eval_source(g.source, f_locals, f_globals)
        except Exception as exc:
            return None, f"{where}: the value cannot be read ({type(exc).__name__})"
        got = fingerprint(g.kind, value)
        if got != name:
            return None, f"{where} was {got}, the stored frame assumed {name}"
        live = (
            id(type(value))
            if g.kind in (GuardKind.TYPE_MATCH, GuardKind.TENSOR_MATCH)
            else id(value)
        )
        out.append(Guard(g.source, g.kind, {**g.payload, field: live}))
    return GuardSet(tuple(out)), ""
