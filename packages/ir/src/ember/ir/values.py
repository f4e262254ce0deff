"""Tagged JSON encoding of the Python constants found in graphs and guards.

Plain JSON carries ``None``, ``bool``, ``int``, finite ``float``, ``str`` and
``list`` as themselves. Everything else is a JSON object with exactly one key,
the tag, which starts with ``$``::

    (1, 2)                 {"$tuple": [1, 2]}
    {"a": 1}               {"$dict": {"a": 1}}
    {1: "a"}               {"$dict_items": [[1, "a"]]}
    float("inf")           {"$float": "inf"}          (also "-inf", "nan")
    torch.float32          {"$dtype": "float32"}
    torch.device("cuda:0") {"$device": "cuda:0"}
    torch.strided          {"$layout": "strided"}
    torch.channels_last    {"$memory_format": "channels_last"}
    torch.Size([2, 3])     {"$size": [2, 3]}
    slice(1, None, 2)      {"$slice": [1, null, 2]}
    ...                    {"$ellipsis": null}
    1+2j                   {"$complex": [1.0, 2.0]}
    {"b", "a"}             {"$set": ["a", "b"]}       (items sorted by their JSON text)
    frozenset({1})         {"$frozenset": [1]}
    NodeRef("add")         {"$node": "add"}           (graph IR only)

``$set`` and ``$frozenset`` are new in guard format 2.1 (a module-level set of names
guarded by value): only :func:`encode_guard_value` writes them (graph IR does not), every
reader reads them; a reader older than 2.1 rejects them as an unknown tag.

Because every JSON object is a tag, a user dict can never be mistaken for a
tag. Decoding never evaluates text: dtypes, layouts and memory formats are
looked up in tables built from the ``torch`` namespace.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

import torch

from ember.ir.errors import FormatError

JSON: TypeAlias = None | bool | int | float | str | list["JSON"] | dict[str, "JSON"]
"""A value that ``json.dumps`` writes without help."""


@dataclass(frozen=True, slots=True)
class NodeRef:
    """A reference to an earlier node of a graph, by name (``{"$node": name}``)."""

    name: str

    def __str__(self) -> str:
        return f"%{self.name}"


def _named(kind: type[object]) -> dict[str, object]:
    table: dict[str, object] = {}
    for name in sorted(dir(torch)):
        obj = getattr(torch, name, None)
        if isinstance(obj, kind) and not name.startswith("_"):
            canonical = str(obj).removeprefix("torch.")
            table.setdefault(canonical, obj)
            table.setdefault(name, obj)
    return table


_DTYPES: dict[str, object] = _named(torch.dtype)
_LAYOUTS: dict[str, object] = _named(torch.layout)
_MEMORY_FORMATS: dict[str, object] = _named(torch.memory_format)


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"`` (the canonical name, never an alias)."""
    return str(dtype).removeprefix("torch.")


def parse_dtype(text: str, *, field: str | None = None) -> torch.dtype:
    """``"float32"`` -> ``torch.float32``; unknown names raise :class:`FormatError`."""
    found = _DTYPES.get(text) if isinstance(text, str) else None
    if not isinstance(found, torch.dtype):
        raise FormatError(f"unknown dtype {text!r} (expected a name like 'float32')", field=field)
    return found


def parse_device(text: str, *, field: str | None = None) -> torch.device:
    """``"cuda:0"`` -> ``torch.device("cuda:0")``; malformed text raises FormatError."""
    if not isinstance(text, str):
        raise FormatError(f"expected a device string like 'cpu', got {text!r}", field=field)
    try:
        return torch.device(text)
    except (RuntimeError, ValueError) as e:
        raise FormatError(f"bad device {text!r}: {e}", field=field) from None


def _check_float(value: float) -> JSON:
    if math.isfinite(value):
        return value
    return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}


Hook = Callable[[object], JSON | None]


def encode_value(value: object, *, hook: Hook | None = None, field: str | None = None) -> JSON:
    """Encode a Python constant as tagged JSON (see the module docstring).

    ``hook`` lets a caller encode extra types (it returns ``None`` to decline).
    Unknown types raise :class:`FormatError` naming the type.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _check_float(float(value))
    if isinstance(value, NodeRef):
        return {"$node": value.name}
    if isinstance(value, torch.Size):
        return {"$size": [int(s) for s in value]}
    if isinstance(value, tuple):
        return {"$tuple": [encode_value(v, hook=hook, field=field) for v in value]}
    if isinstance(value, list):
        return [encode_value(v, hook=hook, field=field) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {"$dict": {k: encode_value(v, hook=hook, field=field) for k, v in value.items()}}
        return {
            "$dict_items": [
                [encode_value(k, hook=hook, field=field), encode_value(v, hook=hook, field=field)]
                for k, v in value.items()
            ]
        }
    if isinstance(value, torch.dtype):
        return {"$dtype": dtype_name(value)}
    if isinstance(value, torch.device):
        return {"$device": str(value)}
    if isinstance(value, torch.layout):
        return {"$layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"$memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, slice):
        parts = (value.start, value.stop, value.step)
        return {"$slice": [encode_value(p, hook=hook, field=field) for p in parts]}
    if value is Ellipsis:
        return {"$ellipsis": None}
    if isinstance(value, complex):
        return {"$complex": [_check_float(value.real), _check_float(value.imag)]}
    if hook is not None:
        encoded = hook(value)
        if encoded is not None:
            return encoded
    raise FormatError(
        f"cannot encode a value of type {type(value).__module__}.{type(value).__qualname__}: "
        f"{_short_repr(value)} (supported: None, bool, int, float, str, tuple, list, dict, "
        "torch.dtype/device/layout/memory_format/Size, slice, Ellipsis, complex)",
        field=field,
    )


def encode_guard_value(value: object, *, field: str | None = None) -> JSON:
    """:func:`encode_value` for a guard's payload, which may also hold sets and frozensets
    (``$set``/``$frozenset``, guard format 2.1: a module-level set of names pinned by
    value). Graph IR does not write them (its readers before 2.1 would not read them)."""
    return encode_value(value, hook=_encode_set, field=field)


def _encode_set(value: object) -> JSON | None:
    if not isinstance(value, (set, frozenset)):
        return None
    items = [encode_value(v, hook=_encode_set) for v in value]
    items.sort(key=lambda j: json.dumps(j, sort_keys=True))  # one text for one set
    return {"$frozenset" if isinstance(value, frozenset) else "$set": items}


def _short_repr(value: object) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not hide the real problem
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def _decode_float(j: JSON, field: str | None) -> float:
    if isinstance(j, bool) or not isinstance(j, (int, float, dict)):
        raise FormatError(f"expected a number, got {j!r}", field=field)
    if isinstance(j, dict):
        tag = j.get("$float")
        if len(j) != 1 or tag not in ("inf", "-inf", "nan"):
            raise FormatError(f"expected a number or {{'$float': 'inf'}}, got {j!r}", field=field)
        return float(str(tag))
    return float(j)


def _lookup(table: dict[str, object], text: JSON, kind: type[object], what: str, field: str | None) -> object:
    found = table.get(text) if isinstance(text, str) else None
    if not isinstance(found, kind):
        raise FormatError(f"unknown {what} {text!r}", field=field)
    return found


def decode_value(j: JSON, *, field: str | None = None) -> object:
    """Inverse of :func:`encode_value`. Unknown tags raise :class:`FormatError`."""
    if j is None or isinstance(j, (bool, int, float, str)):
        return j
    if isinstance(j, list):
        return [decode_value(v, field=field) for v in j]
    if not isinstance(j, dict):
        raise FormatError(f"not a JSON value: {type(j).__name__}", field=field)
    if len(j) != 1:
        raise FormatError(
            f"a JSON object must be a one-key tag like {{'$tuple': [...]}}, got keys {sorted(j)}",
            field=field,
        )
    ((tag, body),) = j.items()
    decoder = _DECODERS.get(tag)
    if decoder is None:
        raise FormatError(f"unknown value tag {tag!r} (known: {', '.join(sorted(_DECODERS))})", field=field)
    return decoder(body, field)


def _expect_list(body: JSON, n: int | None, tag: str, field: str | None) -> list[JSON]:
    if not isinstance(body, list) or (n is not None and len(body) != n):
        want = "a list" if n is None else f"a list of {n}"
        raise FormatError(f"tag {tag!r} needs {want}, got {body!r}", field=field)
    return body


def _dec_tuple(body: JSON, field: str | None) -> object:
    return tuple(decode_value(v, field=field) for v in _expect_list(body, None, "$tuple", field))


def _dec_dict(body: JSON, field: str | None) -> object:
    if not isinstance(body, dict):
        raise FormatError(f"tag '$dict' needs an object, got {body!r}", field=field)
    return {k: decode_value(v, field=field) for k, v in body.items()}


def _dec_dict_items(body: JSON, field: str | None) -> object:
    out: dict[object, object] = {}
    for pair in _expect_list(body, None, "$dict_items", field):
        k, v = _expect_list(pair, 2, "$dict_items", field)
        key = decode_value(k, field=field)
        try:
            out[key] = decode_value(v, field=field)
        except TypeError:
            raise FormatError(f"dict key {key!r} is not hashable", field=field) from None
    return out


def _dec_set(tag: str) -> Callable[[JSON, str | None], object]:
    def decode(body: JSON, field: str | None) -> object:
        items = [decode_value(v, field=field) for v in _expect_list(body, None, tag, field)]
        try:
            return frozenset(items) if tag == "$frozenset" else set(items)
        except TypeError:
            raise FormatError(f"tag {tag!r} holds an item that is not hashable", field=field) from None

    return decode


def _dec_float(body: JSON, field: str | None) -> object:
    return _decode_float({"$float": body}, field)


def _dec_size(body: JSON, field: str | None) -> object:
    items = _expect_list(body, None, "$size", field)
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in items):
        raise FormatError(f"tag '$size' needs a list of ints, got {body!r}", field=field)
    return torch.Size([int(str(s)) for s in items])


def _dec_slice(body: JSON, field: str | None) -> object:
    start, stop, step = (decode_value(v, field=field) for v in _expect_list(body, 3, "$slice", field))
    return slice(start, stop, step)


def _dec_complex(body: JSON, field: str | None) -> object:
    re, im = _expect_list(body, 2, "$complex", field)
    return complex(_decode_float(re, field), _decode_float(im, field))


def _dec_node(body: JSON, field: str | None) -> object:
    if not isinstance(body, str) or not body:
        raise FormatError(f"tag '$node' needs a node name, got {body!r}", field=field)
    return NodeRef(body)


def _dec_device(body: JSON, field: str | None) -> object:
    if not isinstance(body, str):
        raise FormatError(f"tag '$device' needs a string, got {body!r}", field=field)
    return parse_device(body, field=field)


_DECODERS: dict[str, Callable[[JSON, str | None], object]] = {
    "$tuple": _dec_tuple,
    "$dict": _dec_dict,
    "$dict_items": _dec_dict_items,
    "$float": _dec_float,
    "$dtype": lambda b, f: _lookup(_DTYPES, b, torch.dtype, "dtype", f),
    "$device": _dec_device,
    "$layout": lambda b, f: _lookup(_LAYOUTS, b, torch.layout, "layout", f),
    "$memory_format": lambda b, f: _lookup(_MEMORY_FORMATS, b, torch.memory_format, "memory format", f),
    "$size": _dec_size,
    "$slice": _dec_slice,
    "$ellipsis": lambda b, f: Ellipsis,
    "$complex": _dec_complex,
    "$node": _dec_node,
    "$set": _dec_set("$set"),
    "$frozenset": _dec_set("$frozenset"),
}
