"""The guard IR: what a compiled graph assumed about the frame it came from.

A :class:`GuardSet` is a tuple of :class:`Guard` (``source``, ``kind``,
``payload``) plus shape relations (sympy relation text over size symbols).
``kind`` is a closed enum versioned with the format; each kind has a payload
schema (``PAYLOAD_SCHEMA``) that :meth:`Guard.verify` checks. Object ids in
payloads (``cls_id``, ``type_id``, ``id``) are only meaningful inside the
process that wrote them; the qualified names beside them are for people and
for explanations.

``ember.guards`` turns a GuardSet into a check function; ``ember.dynamo``
builds GuardSets. The helpers :func:`tensor_payload` and
:func:`global_state_payload` compute payloads the same way for both.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from ember.ir.errors import FormatError
from ember.ir.source import Local, Source, format_needed, needs_format_2, parse_source, root_of
from ember.ir.symbolic import is_relation, parse_sym_expr
from ember.ir.values import JSON, decode_value, dtype_name, parse_device, parse_dtype
from ember.ir.versioning import (
    GUARDS_FORMAT,
    GUARDS_OLDER_MAJORS,
    GUARDS_VERSION,
    check_header,
    parse_json,
)


class GuardKind(enum.StrEnum):
    """The closed set of guard kinds. Adding one is a MAJOR format change: a reader must never skip a guard it cannot check."""

    TYPE_MATCH = "TYPE_MATCH"
    ID_MATCH = "ID_MATCH"
    CONSTANT_MATCH = "CONSTANT_MATCH"
    EQUALS_MATCH = "EQUALS_MATCH"
    TENSOR_MATCH = "TENSOR_MATCH"
    LENGTH_MATCH = "LENGTH_MATCH"
    DICT_KEYS = "DICT_KEYS"
    NN_MODULE = "NN_MODULE"
    FUNCTION_MATCH = "FUNCTION_MATCH"
    NOT_NONE = "NOT_NONE"
    SHAPE_EXPR = "SHAPE_EXPR"
    GLOBAL_STATE = "GLOBAL_STATE"
    #: no tensor a graph writes in place shares memory with another of its inputs
    #: (``payload.sources``; ``payload.written``: positions in it); new in 3.0 (ADR 0062)
    NO_ALIASING = "NO_ALIASING"


# --- payload schema -------------------------------------------------------

Check = Callable[[JSON, str], None]


def _is_int(v: JSON) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _want(ok: bool, what: str, v: JSON, where: str) -> None:
    if not ok:
        raise FormatError(f"expected {what}, got {v!r}", field=where)


def _str(v: JSON, where: str) -> None:
    _want(isinstance(v, str), "a string", v, where)


def _int(v: JSON, where: str) -> None:
    _want(_is_int(v), "an int", v, where)


def _bool(v: JSON, where: str) -> None:
    _want(isinstance(v, bool), "true or false", v, where)


def _plain_json(v: object, where: str) -> None:
    """Payloads are JSON as ``json.dumps(allow_nan=False)`` writes it: no tuples, no NaN, str keys."""
    if v is None or isinstance(v, (bool, int, str)):
        return
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise FormatError(f"{v!r} is not valid JSON (encode it with encode_value)", field=where)
        return
    if isinstance(v, list):
        for item in v:
            _plain_json(item, where)
        return
    if isinstance(v, dict) and all(isinstance(k, str) for k in v):
        for item in v.values():
            _plain_json(item, where)
        return
    raise FormatError(f"a {type(v).__name__} is not plain JSON (encode it with encode_value)", field=where)


def _dims(v: JSON, where: str) -> None:
    _want(isinstance(v, list) and all(_is_int(d) or d is None for d in v), "a list of ints or nulls", v, where)


def _dtype(v: JSON, where: str) -> None:
    _str(v, where)
    parse_dtype(str(v), field=where)


def _device(v: JSON, where: str) -> None:
    _str(v, where)
    parse_device(str(v), field=where)


def _encoded(v: JSON, where: str) -> None:
    decode_value(v, field=where)


def _encoded_list(v: JSON, where: str) -> None:
    _want(isinstance(v, list), "a list of encoded values", v, where)
    assert isinstance(v, list)
    for item in v:
        decode_value(item, field=where)


def _sources(v: JSON, where: str) -> None:
    _want(isinstance(v, list) and len(v) >= 2 and all(isinstance(x, str) for x in v),
          "a list of at least two source texts", v, where)
    assert isinstance(v, list)
    for x in v:
        parse_source(str(x))


def _positions(v: JSON, where: str) -> None:
    _want(isinstance(v, list) and len(v) >= 1 and all(_is_int(x) and x >= 0 for x in v),  # type: ignore[operator]
          "a non-empty list of positions", v, where)


def _relation(v: JSON, where: str) -> None:
    _str(v, where)
    expr = parse_sym_expr(str(v), field=where)
    if not is_relation(expr):
        raise FormatError(f"expected a relation such as 'Eq(s0, 4)', got {v!r}", field=where)


PAYLOAD_SCHEMA: dict[GuardKind, dict[str, Check]] = {
    GuardKind.TENSOR_MATCH: {
        "cls": _str,
        "cls_id": _int,
        "dtype": _dtype,
        "device": _device,
        "requires_grad": _bool,
        "dispatch_keys": _str,
        "ndim": _int,
        "sizes": _dims,
        "strides": _dims,
    },
    GuardKind.TYPE_MATCH: {"type": _str, "type_id": _int},
    GuardKind.ID_MATCH: {"id": _int, "repr": _str},
    GuardKind.CONSTANT_MATCH: {"value": _encoded},
    GuardKind.EQUALS_MATCH: {"value": _encoded},
    GuardKind.LENGTH_MATCH: {"length": _int},
    GuardKind.DICT_KEYS: {"keys": _encoded_list},
    GuardKind.NN_MODULE: {"id": _int, "type": _str},
    GuardKind.FUNCTION_MATCH: {"id": _int, "qualname": _str},
    GuardKind.NOT_NONE: {},
    GuardKind.SHAPE_EXPR: {"expr": _relation},
    GuardKind.GLOBAL_STATE: {
        "grad_enabled": _bool,
        "default_dtype": _dtype,
        "autocast_cpu": _bool,
        "autocast_cuda": _bool,
        "deterministic": _bool,
    },
    GuardKind.NO_ALIASING: {"sources": _sources, "written": _positions},
}
"""Required payload fields per kind. Extra fields are allowed (a later MINOR may add optional ones)."""

SOURCELESS_KINDS = frozenset({GuardKind.SHAPE_EXPR, GuardKind.GLOBAL_STATE, GuardKind.NO_ALIASING})


@dataclass(frozen=True, slots=True)
class Guard:
    """One assumption: ``kind`` holds for the value at ``source``.

    ``source`` is ``None`` exactly for ``SHAPE_EXPR`` and ``GLOBAL_STATE``.
    ``payload`` is plain JSON following ``PAYLOAD_SCHEMA[kind]``.
    """

    source: Source | None
    kind: GuardKind
    payload: Mapping[str, JSON] = field(default_factory=dict)
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.kind, GuardKind):
            try:
                object.__setattr__(self, "kind", GuardKind(self.kind))
            except ValueError:
                known = ", ".join(k.value for k in GuardKind)
                raise FormatError(f"unknown guard kind {self.kind!r} (known: {known})", field="kind") from None
        object.__setattr__(self, "payload", dict(self.payload))

    def __hash__(self) -> int:
        # computed once (the payload as sorted JSON): compiling a warm start's ~900 guards
        # hashes each several times (sets, dicts, ``share_aliases``); the payload is a copy
        # the guard owns and nothing changes it
        h = self._hash
        if not h:
            h = hash((self.source, self.kind, json.dumps(self.payload, sort_keys=True))) or 1
            object.__setattr__(self, "_hash", h)
        return h

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return Guard, (self.source, self.kind, dict(self.payload))  # the cached hash is per process

    def verify(self) -> None:
        """Check the source rule and the payload schema; raise FormatError."""
        where = self.source.expr() if self.source is not None else self.kind.value
        if self.kind in SOURCELESS_KINDS and self.source is not None:
            raise FormatError(f"{self.kind.value} guards take no source (source must be null)", node=where, field="source")
        if self.kind not in SOURCELESS_KINDS and self.source is None:
            raise FormatError(f"{self.kind.value} guards need a source", node=where, field="source")
        for name, value in self.payload.items():
            try:
                _plain_json(value, f"payload.{name}")
            except FormatError as e:
                raise e.with_context(node=where) from None
        for name, check in PAYLOAD_SCHEMA[self.kind].items():
            if name not in self.payload:
                raise FormatError(f"{self.kind.value} payload is missing {name!r}", node=where, field=f"payload.{name}")
            try:
                check(self.payload[name], f"payload.{name}")
            except FormatError as e:
                raise e.with_context(node=where) from None
        if self.kind is GuardKind.NO_ALIASING:
            n = len(self.payload["sources"])  # type: ignore[arg-type]
            written = self.payload["written"]
            if any(i >= n for i in written) or len(set(written)) != len(written):  # type: ignore[union-attr, operator, arg-type]
                raise FormatError(f"written positions {written} are not distinct positions of the {n} sources",
                                  node=where, field="payload.written")
        if self.kind is GuardKind.TENSOR_MATCH:
            ndim = self.payload["ndim"]
            for key in ("sizes", "strides"):
                dims = self.payload[key]
                if isinstance(dims, list) and len(dims) != ndim:
                    raise FormatError(f"{key} has {len(dims)} entries but ndim is {ndim}", node=where, field=f"payload.{key}")

    def to_json(self) -> dict[str, JSON]:
        return {
            "source": self.source.expr() if self.source is not None else None,
            "kind": self.kind.value,
            "payload": dict(self.payload),
        }

    @staticmethod
    def from_json(data: JSON, *, where: str) -> Guard:
        if not isinstance(data, dict):
            raise FormatError(f"a guard must be an object, got {type(data).__name__}", node=where)
        for key in ("source", "kind", "payload"):
            if key not in data:
                raise FormatError(f"guard is missing {key!r}", node=where, field=key)
        raw_kind, raw_source, payload = data["kind"], data["source"], data["payload"]
        try:
            kind = GuardKind(raw_kind) if isinstance(raw_kind, str) else GuardKind("")
        except ValueError:
            known = ", ".join(k.value for k in GuardKind)
            raise FormatError(f"unknown guard kind {raw_kind!r} (known: {known})", node=where, field="kind") from None
        if raw_source is None:
            source = None
        elif isinstance(raw_source, str):
            try:
                source = parse_source(raw_source)
            except FormatError as e:
                raise e.with_context(node=where, field="source") from None
            where = raw_source
        else:
            raise FormatError(f"source must be a string or null, got {raw_source!r}", node=where, field="source")
        if not isinstance(payload, dict):
            raise FormatError(f"payload must be an object, got {payload!r}", node=where, field="payload")
        guard = Guard(source, kind, payload)
        guard.verify()
        return guard

    def describe(self) -> str:
        """One line in the style of TorchDynamo's ``GUARDS:`` log."""
        if self.source is None:
            head = self.kind.value
        else:
            root = root_of(self.source)
            scope = "local" if isinstance(root, Local) else "global"
            text = repr(root.name) if self.source == root else self.source.expr()
            head = f"{scope} {text} {self.kind.value}"
        detail = _payload_text(self.kind, self.payload)
        return f"{head}: {detail}" if detail else head


def _payload_text(kind: GuardKind, p: Mapping[str, JSON]) -> str:
    if kind is GuardKind.TENSOR_MATCH:
        grad = ", requires_grad" if p.get("requires_grad") else ""
        return f"{p.get('cls')} {p.get('dtype')} {p.get('device')} sizes={p.get('sizes')} strides={p.get('strides')}{grad}"
    if kind is GuardKind.SHAPE_EXPR:
        return str(p.get("expr"))
    if kind is GuardKind.NO_ALIASING:
        sources, written = list(p.get("sources") or []), list(p.get("written") or [])  # type: ignore[arg-type]
        names = ", ".join(str(sources[i]) for i in written if isinstance(i, int) and i < len(sources))
        return f"{names} share memory with no other of {len(sources)} inputs"
    if kind in (GuardKind.CONSTANT_MATCH, GuardKind.EQUALS_MATCH):
        try:
            return f"== {decode_value(p.get('value'))!r}"
        except FormatError:
            return f"== {p.get('value')!r}"
    return " ".join(f"{k}={p[k]!r}" if isinstance(p[k], str) else f"{k}={p[k]}" for k in sorted(p))


def _holds_set(value: object) -> bool:
    """Whether encoded JSON holds a ``$set``/``$frozenset`` value (new in guard format 2.1)."""
    if isinstance(value, dict):
        return "$set" in value or "$frozenset" in value or any(_holds_set(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_set(v) for v in value)
    return False


@dataclass(frozen=True, slots=True)
class GuardSet:
    """All guards of one compiled graph, plus shape relations between size symbols."""

    guards: tuple[Guard, ...]
    shape_relations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "guards", tuple(self.guards))
        object.__setattr__(self, "shape_relations", tuple(self.shape_relations))

    def verify(self) -> None:
        """Check every guard and every shape relation; raise FormatError on the first problem."""
        for g in self.guards:
            if not isinstance(g, Guard):
                raise FormatError(f"expected a Guard, got {type(g).__name__}", field="guards")
            g.verify()
        for i, rel in enumerate(self.shape_relations):
            _relation(rel, f"shape_relations[{i}]")

    def format_version(self) -> tuple[int, int]:
        """The oldest guard format that holds this set: 1.0 unless a source reads
        through ``dict.__getitem__`` (2.0), a dict entry by position or a payload holds a
        set (2.1), or a ``NO_ALIASING`` guard is in it (3.0), so older readers keep reading
        what they can."""
        if any(g.kind is GuardKind.NO_ALIASING for g in self.guards):
            return (3, 0)
        need = max((format_needed(g.source) for g in self.guards if g.source is not None), default=(1, 0))
        if any(_holds_set(g.payload) for g in self.guards):
            need = max(need, (2, 1))  # a ``$set``/``$frozenset`` value
        return need

    def to_json(self) -> dict[str, JSON]:
        return {
            "format": GUARDS_FORMAT,
            "version": list(self.format_version()),
            "guards": [g.to_json() for g in self.guards],
            "shape_relations": list(self.shape_relations),
        }

    def dumps(self) -> str:
        """Stable JSON text (sorted keys, one guard per line); verifies first."""
        self.verify()
        data = self.to_json()

        def compact(value: JSON) -> str:
            return json.dumps(value, sort_keys=True, allow_nan=False, separators=(", ", ": "))

        guards = ",\n".join(f"  {compact(g.to_json())}" for g in self.guards)
        guards_text = f"[\n{guards}\n ]" if guards else "[]"
        return (
            "{\n"
            f' "format": {compact(data["format"])},\n'
            f' "guards": {guards_text},\n'
            f' "shape_relations": {compact(data["shape_relations"])},\n'
            f' "version": {compact(data["version"])}\n'
            "}\n"
        )

    @staticmethod
    def loads(text: str | bytes, *, file: str | None = None) -> GuardSet:
        """Read guard IR text; any problem is a FormatError naming file, guard and field."""
        data = parse_json(text, file=file, what="guard IR")
        major, minor = check_header(
            data, format_name=GUARDS_FORMAT, version=GUARDS_VERSION, file=file, older_majors=GUARDS_OLDER_MAJORS
        )
        raw_guards = data.get("guards")
        if not isinstance(raw_guards, list):
            raise FormatError(f"'guards' must be a list, got {raw_guards!r}", file=file, field="guards")
        relations = data.get("shape_relations", [])
        if not isinstance(relations, list) or not all(isinstance(r, str) for r in relations):
            raise FormatError("'shape_relations' must be a list of strings", file=file, field="shape_relations")
        try:
            guards = tuple(Guard.from_json(g, where=f"guards[{i}]") for i, g in enumerate(raw_guards))
            result = GuardSet(guards, tuple(str(r) for r in relations))
            result.verify()
        except FormatError as e:
            raise e.with_context(file=file) from None
        if major < 2:
            for g in result.guards:
                if g.source is not None and needs_format_2(g.source):
                    raise FormatError(
                        f"source {g.source.expr()} reads through a dict's own methods, which guard "
                        f"format {major}.{minor} does not have (new in 2.0)",
                        file=file,
                        field="source",
                    )
        if major < 3 and any(g.kind is GuardKind.NO_ALIASING for g in result.guards):
            raise FormatError(
                f"guard format {major}.{minor} has no NO_ALIASING guards (new in 3.0)", file=file, field="kind"
            )
        return result

    def __str__(self) -> str:
        lines = ["GUARDS:"]
        lines += [f"- {g.describe()}" for g in self.guards]
        lines += [f"- shape relation: {r}" for r in self.shape_relations]
        return "\n".join(lines)


# --- payload helpers shared by the guard writer and the guard checker -------


def qualname(obj: object) -> str:
    """``module.QualName`` of a class or function (``torch.Tensor``, ``torch.nn.modules.linear.Linear``)."""
    module = getattr(obj, "__module__", None) or "builtins"
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__qualname__
    return f"{module}.{name}"


def dispatch_keys_text(t: torch.Tensor) -> str:
    """The ``dispatch_keys`` payload text for a tensor (its dispatch key set, printed)."""
    return str(torch._C._dispatch_keys(t))


def tensor_payload(
    t: torch.Tensor, dynamic_dims: Sequence[int] = (), dynamic_strides: Sequence[int] | None = None
) -> dict[str, JSON]:
    """The TENSOR_MATCH payload for ``t``; dims in ``dynamic_dims`` get ``None`` size, dims in
    ``dynamic_strides`` (default: ``dynamic_dims``) ``None`` stride."""
    dynamic = set(dynamic_dims)
    dyn_strides = dynamic if dynamic_strides is None else set(dynamic_strides)
    return {
        "cls": qualname(type(t)),
        "cls_id": id(type(t)),
        "dtype": dtype_name(t.dtype),
        "device": str(t.device),
        "requires_grad": bool(t.requires_grad),
        "dispatch_keys": dispatch_keys_text(t),
        "ndim": t.dim(),
        "sizes": [None if d in dynamic else int(s) for d, s in enumerate(t.size())],
        "strides": [None if d in dyn_strides else int(s) for d, s in enumerate(t.stride())],
    }


def global_state_payload() -> dict[str, JSON]:
    """The GLOBAL_STATE payload for the current thread's torch state."""
    return {
        "grad_enabled": torch.is_grad_enabled(),
        "default_dtype": dtype_name(torch.get_default_dtype()),
        "autocast_cpu": torch.is_autocast_enabled("cpu"),
        "autocast_cuda": torch.is_autocast_enabled("cuda"),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
    }


__all__ = [
    "PAYLOAD_SCHEMA",
    "SOURCELESS_KINDS",
    "Guard",
    "GuardKind",
    "GuardSet",
    "dispatch_keys_text",
    "global_state_payload",
    "qualname",
    "tensor_payload",
]
