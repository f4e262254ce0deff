"""One method per ``GuardKind``: a guard becomes a :class:`Part`.

A part is a Python boolean expression over local variable names (one local
per source, assigned by the code generator before the first part that reads
it) and constants (bound by name in the generated function's globals), plus
an explanation function that turns the values it read into plain words
("L['x'].size()[0] was 8, the graph assumed 4") and a cost used to sort
parts cheapest first.

Object identities (classes, modules, functions) are resolved from the frame
the guards were captured from when it is given: classes are then compared
with ``is`` and other objects are held by weak reference (a dead referent
makes the whole check fail), so a recycled ``id`` never matches. Without the
frame, payload ids are compared with ``id()`` and the caller keeps the
objects alive.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ember.guards.errors import GuardCompileError
from ember.guards.reads import fast_read, instance_dict_op, plain_op, plain_read
from ember.ir import (
    Attr,
    DictEntry,
    DictItem,
    Global,
    Guard,
    GuardKind,
    Item,
    Local,
    Size,
    Source,
    decode_value,
    parse_device,
    parse_dtype,
    parse_source,
    parse_sym_expr,
)

if TYPE_CHECKING:
    import sympy

Explain = Callable[[Sequence[Any]], str]


@dataclass(frozen=True, slots=True)
class Term:
    """One conjunct of a part: its Python text and the same test as a native op
    (``native.py`` turns ops into C; ``None`` keeps the part a Python leaf there)."""

    py: str
    op: tuple[Any, ...] | None


@dataclass(frozen=True, slots=True)
class Part:
    """One compiled guard: ``expr`` over the locals of ``reads``; ``explain(values)`` on failure.

    ``terms`` are ``expr``'s conjuncts with their native ops; ``None`` where the part has
    no native form (it runs as a Python predicate inside the native check)."""

    guard: Guard
    reads: tuple[Source, ...]
    expr: str
    explain: Explain
    cost: int
    terms: tuple[Term, ...] | None = None
    #: a TENSOR_MATCH's fields for the native check's direct read (``native.py``):
    #: ``terms[tensor["first"]:]`` are what it covers
    tensor: dict[str, Any] | None = None


def joined(terms: Sequence[Term]) -> tuple[str, tuple[Term, ...] | None]:
    """The part's Python text (``a and b``) and its terms (``None`` if any has no op)."""
    expr = " and ".join(t.py for t in terms)
    return expr, (tuple(terms) if all(t.op is not None for t in terms) else None)


def eval_source(source: Source, f_locals: Mapping[str, Any], f_globals: Mapping[str, Any]) -> Any:
    """The value at ``source`` in the frame (used by explanations; may raise)."""
    if isinstance(source, Local):
        return f_locals[source.name]
    if isinstance(source, Global):
        return f_globals[source.name]
    base = eval_source(source.base, f_locals, f_globals)
    if isinstance(source, Attr):
        return getattr(base, source.member)
    if isinstance(source, Item):
        return base[source.index]
    if isinstance(source, DictItem):
        return dict.__getitem__(base, source.index)
    if isinstance(source, DictEntry):
        return list(dict.keys(base) if source.part == "keys" else dict.values(base))[source.position]
    if isinstance(source, Size):
        return base.size()[source.dim]
    return base.stride()[source.dim]


def _type_name(cls: type) -> str:
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class GuardBuilder:
    """Turns guards into parts; holds the constants and local names they share."""

    def __init__(
        self,
        f_locals: Mapping[str, Any] | None = None,
        f_globals: Mapping[str, Any] | None = None,
    ) -> None:
        self.frame = None if f_locals is None else (f_locals, f_globals or {})
        self.consts: dict[str, Any] = {"_dead": False}
        self._const_ids: dict[int, str] = {}
        self.names: dict[Source, str] = {}
        self.weakrefs: list[weakref.ref[Any]] = []
        #: the native op of each read the generated code makes (``read``)
        self.read_ops: dict[Source, tuple[Any, ...]] = {}
        #: what the generated code does, in order: ``("read", var, op)``, ``("part", index)``
        self.program: list[tuple[Any, ...]] = []

    # -- shared state ----------------------------------------------------------
    def var(self, source: Source) -> str:
        """The local variable holding ``source``'s value in the generated code."""
        name = self.names.get(source)
        if name is None:
            name = f"v{len(self.names)}"
            self.names[source] = name
        return name

    def const(self, value: Any) -> str:
        """A global name bound to ``value`` in the generated function."""
        name = self._const_ids.get(id(value))
        if name is None or self.consts[name] is not value:
            name = f"c{len(self.consts)}"
            self.consts[name] = value
            self._const_ids[id(value)] = name
        return name

    def read(self, source: Source) -> str:
        """Python text reading ``source`` from its base's local (``reads.py``)."""
        base = getattr(source, "base", None)
        if base is not None and self.frame is not None:
            try:
                base_value = eval_source(base, *self.frame)
            except Exception:
                base_value = None
            fast = fast_read(source, self.names[base], base_value)
            if fast is not None:
                self.read_ops[source] = fast[1]
                return fast[0]
            op = plain_op(source, self.names)
            self.read_ops[source] = instance_dict_op(op, source, base_value)
            return plain_read(source, self.names)
        self.read_ops[source] = plain_op(source, self.names)
        return plain_read(source, self.names)

    def _frame_value(self, guard: Guard) -> tuple[bool, Any]:
        if self.frame is None or guard.source is None:
            return False, None
        try:
            return True, eval_source(guard.source, *self.frame)
        except Exception as exc:
            raise GuardCompileError(
                f"cannot compile {guard.kind.value} guard on {guard.source.expr()}: the frame "
                f"it was captured from has no such value ({type(exc).__name__}: {exc})"
            ) from None

    def _resolve_type(self, guard: Guard, type_id: int, of_value: bool) -> Term:
        """Test for ``type(v)`` matching the class with ``type_id``."""
        v = self.var(guard.source)  # type: ignore[arg-type]
        found, value = self._frame_value(guard)
        if found:
            cls = type(value) if of_value else value
            if id(cls) == type_id:
                return Term(f"type({v}) is {self.const(cls)}", ("type_is", v, cls))
        return Term(f"id(type({v})) == {type_id}", ("type_id", v, type_id))

    def _resolve_object(self, guard: Guard, object_id: int) -> Term:
        """Test for ``v`` being the object with ``object_id`` (weakly held)."""
        v = self.var(guard.source)  # type: ignore[arg-type]
        found, value = self._frame_value(guard)
        if not found or id(value) != object_id:
            return Term(f"id({v}) == {object_id}", ("id", v, object_id))
        try:
            ref = weakref.ref(value, self._on_death)
        except TypeError:  # not weak-referenceable: hold it, so its id stays unique
            return Term(f"{v} is {self.const(value)}", ("is", v, value))
        self.weakrefs.append(ref)
        return Term(f"id({v}) == {object_id}", ("id", v, object_id))

    def _on_death(self, _ref: weakref.ref[Any]) -> None:
        self.consts["_dead"] = True

    def _part(self, guard: Guard, terms: Sequence[Term], explain: Explain, cost: int) -> Part:
        reads = (guard.source,) if guard.source is not None else ()
        expr, native = joined(terms)
        return Part(guard, reads, expr, explain, cost, native)

    def build(self, guard: Guard) -> Part:
        method: Callable[[Guard], Part] = getattr(self, guard.kind.value)
        return method(guard)

    # -- one method per GuardKind ------------------------------------------------
    def TYPE_MATCH(self, g: Guard) -> Part:
        e, want = g.source.expr(), str(g.payload["type"])  # type: ignore[union-attr]
        term = self._resolve_type(g, int(g.payload["type_id"]), of_value=True)  # type: ignore[arg-type]

        def explain(values: Sequence[Any]) -> str:
            return f"type({e}) was {_type_name(type(values[0]))}, the graph assumed {want}"

        return self._part(g, [term], explain, 1)

    def ID_MATCH(self, g: Guard) -> Part:
        e, want = g.source.expr(), str(g.payload["repr"])  # type: ignore[union-attr]
        term = self._resolve_object(g, int(g.payload["id"]))  # type: ignore[arg-type]

        def explain(values: Sequence[Any]) -> str:
            return f"{e} was a different object ({_short(values[0])}), the graph assumed {want}"

        return self._part(g, [term], explain, 1)

    def FUNCTION_MATCH(self, g: Guard) -> Part:
        e, want = g.source.expr(), str(g.payload["qualname"])  # type: ignore[union-attr]
        term = self._resolve_object(g, int(g.payload["id"]))  # type: ignore[arg-type]

        def explain(values: Sequence[Any]) -> str:
            return f"{e} was a different function ({_short(values[0])}), the graph assumed {want}"

        return self._part(g, [term], explain, 1)

    def NN_MODULE(self, g: Guard) -> Part:
        e, want = g.source.expr(), str(g.payload["type"])  # type: ignore[union-attr]
        term = self._resolve_object(g, int(g.payload["id"]))  # type: ignore[arg-type]

        def explain(values: Sequence[Any]) -> str:
            got = _type_name(type(values[0]))
            return f"{e} was a different module object ({got}), the graph assumed the {want} it was captured with"

        return self._part(g, [term], explain, 1)

    def NOT_NONE(self, g: Guard) -> Part:
        e = g.source.expr()  # type: ignore[union-attr]

        def explain(values: Sequence[Any]) -> str:
            return f"{e} was None, the graph assumed it is not None"

        v = self.var(g.source)  # type: ignore[arg-type]
        return self._part(g, [Term(f"{v} is not None", ("not_none", v))], explain, 1)

    def _constant(self, g: Guard, cost: int) -> Part:
        e = g.source.expr()  # type: ignore[union-attr]
        value = decode_value(g.payload["value"], field="payload.value")
        v = self.var(g.source)  # type: ignore[arg-type]
        if value is None or isinstance(value, bool) or value is Ellipsis:
            term = Term(f"{v} is {self.const(value)}", ("is", v, value))
        elif isinstance(value, float) and value != value:  # nan equals nothing, itself included
            term = Term(f"type({v}) is float and {v} != {v}", ("nan", v))
        else:
            term = Term(
                f"type({v}) is {self.const(type(value))} and {v} == {self.const(value)}",
                ("eq_typed", v, type(value), value),
            )

        reason = g.payload.get("reason")
        why = f" ({reason})" if isinstance(reason, str) and reason else ""

        def explain(values: Sequence[Any]) -> str:
            got = values[0]
            if type(got) is not type(value) and not (value is None or isinstance(value, bool)):
                return (
                    f"{e} was {_short(got)} ({_type_name(type(got))}), "
                    f"the graph assumed {value!r} ({_type_name(type(value))}){why}"
                )
            return f"{e} was {_short(got)}, the graph assumed {value!r}{why}"

        return self._part(g, [term], explain, cost)

    def CONSTANT_MATCH(self, g: Guard) -> Part:
        return self._constant(g, 2)

    def EQUALS_MATCH(self, g: Guard) -> Part:
        return self._constant(g, 3)

    def LENGTH_MATCH(self, g: Guard) -> Part:
        e, n = g.source.expr(), int(g.payload["length"])  # type: ignore[union-attr, arg-type]

        def explain(values: Sequence[Any]) -> str:
            return f"len({e}) was {len(values[0])}, the graph assumed {n}"

        v = self.var(g.source)  # type: ignore[arg-type]
        return self._part(g, [Term(f"len({v}) == {n}", ("len", v, n))], explain, 2)

    def DICT_KEYS(self, g: Guard) -> Part:
        e = g.source.expr()  # type: ignore[union-attr]
        raw = g.payload["keys"]
        keys = [decode_value(k, field="payload.keys") for k in raw]  # type: ignore[union-attr]
        want = self.const(keys)
        v = self.var(g.source)  # type: ignore[arg-type]
        term = Term(f"list({v}.keys()) == {want}", ("keys", v, keys))

        def explain(values: Sequence[Any]) -> str:
            return f"{e} had keys {list(values[0].keys())!r}, the graph assumed {keys!r}"

        return self._part(g, [term], explain, 4)

    def TENSOR_MATCH(self, g: Guard) -> Part:
        return tensor_part(self, g)

    def GLOBAL_STATE(self, g: Guard) -> Part:
        return global_state_part(self, g)

    def SHAPE_EXPR(self, g: Guard) -> Part:
        return shape_expr_part(self, g)

    def NO_ALIASING(self, g: Guard) -> Part:
        return no_aliasing_part(self, g)


# -- NO_ALIASING ---------------------------------------------------------------------


def _storages(values: Sequence[Any]) -> list[int | None]:
    return [v.untyped_storage().data_ptr() if isinstance(v, torch.Tensor) else None for v in values]


def written_aliases(written: Sequence[int], *values: Any) -> list[tuple[int, int]]:
    """Pairs ``(w, other)`` of positions where the tensor at written position ``w`` shares its
    storage (``untyped_storage().data_ptr()``, not 0) with the tensor at ``other``."""
    ptrs = _storages(values)
    out = []
    for w in written:
        p = ptrs[w]
        if p is None or p == 0:
            continue
        out += [(w, j) for j, q in enumerate(ptrs) if j != w and q == p]
    return out


def no_written_alias(written: tuple[int, ...], *values: Any) -> bool:
    """No tensor at a ``written`` position shares a (non-null) storage with another of
    ``values``: exactly where ember.dynamo's ``AliasChecked`` ran the compiled graph."""
    ptrs = _storages(values)
    seen: dict[int, int] = {}
    for p in ptrs:
        if p is not None:
            seen[p] = seen.get(p, 0) + 1
    for w in written:
        p = ptrs[w]
        if p is not None and p != 0 and seen[p] > 1:
            return False
    return True


def no_aliasing_part(b: GuardBuilder, g: Guard) -> Part:
    """The tensors a graph writes in place share memory with no other of its inputs."""
    sources = tuple(parse_source(str(s)) for s in g.payload["sources"])  # type: ignore[union-attr]
    written = tuple(int(i) for i in g.payload["written"])  # type: ignore[union-attr, arg-type]
    names = [b.var(s) for s in sources]
    fn = b.const(no_written_alias)
    expr = f"{fn}({written!r}, {', '.join(names)})"
    term = Term(expr, ("no_alias", names, written, torch.Tensor))

    def explain(values: Sequence[Any]) -> str:
        pairs = written_aliases(written, *values)
        if not pairs:
            return "the graph's inputs shared memory, which it assumed they do not"
        w, other = pairs[0]
        return (f"{sources[w].expr()} shared memory with {sources[other].expr()}; the graph writes "
                f"{sources[w].expr()} in place and assumed its inputs do not share memory")

    return Part(g, sources, expr, explain, 30, (term,))


# -- TENSOR_MATCH ----------------------------------------------------------------


def _dispatch_keys_of(text: str) -> torch.DispatchKeySet | None:
    """``"DispatchKeySet(CPU, AutogradCPU)"`` back into a key set (None if unreadable)."""
    if not (text.startswith("DispatchKeySet(") and text.endswith(")")):
        return None
    names = [n.strip() for n in text[len("DispatchKeySet(") : -1].split(",") if n.strip()]
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.Undefined)
    for name in names:
        key = getattr(torch._C.DispatchKey, name, None)
        if key is None:
            return None
        keys = keys.add(key)
    return keys if str(keys) == text else None


def tensor_part(b: GuardBuilder, g: Guard) -> Part:
    """class, dtype, device, requires_grad, dispatch keys, ndim, sizes and strides."""
    p = g.payload
    e = g.source.expr()  # type: ignore[union-attr]
    v = b.var(g.source)  # type: ignore[arg-type]
    dtype = parse_dtype(str(p["dtype"]))
    device = parse_device(str(p["device"]))
    requires_grad = bool(p["requires_grad"])
    ndim = int(p["ndim"])  # type: ignore[arg-type]
    sizes: list[int | None] = list(p["sizes"])  # type: ignore[arg-type]
    strides: list[int | None] = list(p["strides"])  # type: ignore[arg-type]
    keys_text = str(p["dispatch_keys"])
    keys = _dispatch_keys_of(keys_text)
    dk = b.const(torch._C._dispatch_keys)

    # A module's weight (``"weight": True``, ember.dynamo's ``weight_guards.py``) is also
    # guarded by identity, which pins its class and subclass dispatch keys: what
    # ``weight.data = other`` can change is dtype, device, sizes and strides, checked at
    # about half the cost (a frame reading 100 weights checks them on every call).
    weight = p.get("weight") is True
    terms: list[Term] = [] if weight else [b._resolve_type(g, int(p["cls_id"]), of_value=True)]  # type: ignore[arg-type]
    terms.append(Term(f"{v}.dtype is {b.const(dtype)}", ("attr_is", v, "dtype", dtype)))
    if weight and device.type in ("cpu", "cuda") and device.index is None:
        terms.append(Term(f"{v}.is_{device.type} is True", ("attr_is", v, f"is_{device.type}", True)))
    elif weight or device.index is not None or keys is None:
        # The backend dispatch key already pins the device type; only an index needs a compare.
        terms.append(Term(f"{v}.device == {b.const(device)}", ("attr_eq", v, "device", device)))
    terms.append(Term(f"{v}.requires_grad is {requires_grad}", ("attr_is", v, "requires_grad", requires_grad)))
    if None not in sizes:
        terms.append(Term(f"{v}.shape == {tuple(sizes)!r}", ("attr_eq", v, "shape", tuple(sizes))))
    else:
        terms.append(Term(f"{v}.dim() == {ndim}", ("method_eq", v, "dim", (), ndim)))
        terms += [Term(f"{v}.size({d}) == {s}", ("method_eq", v, "size", (d,), s))
                  for d, s in enumerate(sizes) if s is not None]
    if None not in strides:
        terms.append(Term(f"{v}.stride() == {tuple(strides)!r}", ("method_eq", v, "stride", (), tuple(strides))))
    else:
        terms += [Term(f"{v}.stride({d}) == {s}", ("method_eq", v, "stride", (d,), s))
                  for d, s in enumerate(strides) if s is not None]
    device_mode = 0  # the device term below, for the native check's direct read
    if weight and device.type in ("cpu", "cuda") and device.index is None:
        device_mode = 2
    elif weight or device.index is not None or keys is None:
        device_mode = 1
    fast: dict[str, Any] | None = {
        "first": 0 if weight else 1, "dtype": dtype, "device": device, "requires_grad": requires_grad,
        "ndim": ndim, "sizes": sizes, "strides": strides, "keys": None if weight else keys,
        "device_mode": device_mode,
    }
    if weight:
        pass
    elif keys is not None:
        terms.append(Term(f"{dk}({v}) == {b.const(keys)}", ("fn_eq", torch._C._dispatch_keys, v, keys)))
    else:
        terms.append(Term(f"str({dk}({v})) == {keys_text!r}", ("fn_str_eq", torch._C._dispatch_keys, v, keys_text)))
        fast = None
    want_cls = str(p["cls"])

    def explain(values: Sequence[Any]) -> str:
        t = values[0]
        if not isinstance(t, torch.Tensor):
            return f"{e} was a {_type_name(type(t))}, the graph assumed a tensor ({want_cls})"
        if _type_name(type(t)) != want_cls and id(type(t)) != p["cls_id"]:
            return f"{e} was a {_type_name(type(t))}, the graph assumed {want_cls}"
        checks: list[tuple[str, Any, Any]] = [
            (f"{e}.dtype", t.dtype, dtype),
            (f"{e}.device", t.device, device),
            (f"{e}.requires_grad", t.requires_grad, requires_grad),
            (f"{e}.dim()", t.dim(), ndim),
        ]
        for what, got, want in checks:
            if got != want:
                return f"{what} was {got}, the graph assumed {want}"
        for d, s in enumerate(sizes):
            if s is not None and t.size(d) != s:
                return f"{e}.size()[{d}] was {t.size(d)}, the graph assumed {s}"
        for d, s in enumerate(strides):
            if s is not None and t.stride(d) != s:
                return f"{e}.stride()[{d}] was {t.stride(d)}, the graph assumed {s}"
        got_keys = str(torch._C._dispatch_keys(t))
        if got_keys != keys_text:
            return f"{e} dispatch keys were {got_keys}, the graph assumed {keys_text}"
        return f"{e} was a different class object of the same name {want_cls}"

    part = b._part(g, terms, explain, 10)
    return part if fast is None or part.terms is None else dataclasses.replace(part, tensor=fast)


# -- GLOBAL_STATE ------------------------------------------------------------------


def global_state_part(b: GuardBuilder, g: Guard) -> Part:
    """Grad mode, default dtype, autocast (cpu, cuda) and deterministic algorithms."""
    p = g.payload
    grad = bool(p["grad_enabled"])
    dtype = parse_dtype(str(p["default_dtype"]))
    ac_cpu, ac_cuda = bool(p["autocast_cpu"]), bool(p["autocast_cuda"])
    deterministic = bool(p["deterministic"])
    terms = [
        Term(f"{b.const(torch.is_grad_enabled)}() is {grad}", ("call_is", torch.is_grad_enabled, (), grad)),
        Term(f"{b.const(torch.get_default_dtype)}() is {b.const(dtype)}",
             ("call_is", torch.get_default_dtype, (), dtype)),
    ]
    autocast = b.const(torch.is_autocast_enabled)
    if not ac_cpu and not ac_cuda:
        terms.append(Term(f"not {b.const(torch._C._is_any_autocast_enabled)}()",
                          ("call_not", torch._C._is_any_autocast_enabled)))
    else:
        terms.append(Term(f"{autocast}('cpu') is {ac_cpu}", ("call_is", torch.is_autocast_enabled, ("cpu",), ac_cpu)))
        terms.append(Term(f"{autocast}('cuda') is {ac_cuda}",
                          ("call_is", torch.is_autocast_enabled, ("cuda",), ac_cuda)))
    terms.append(Term(f"{b.const(torch._C._get_deterministic_algorithms)}() is {deterministic}",
                      ("call_is", torch._C._get_deterministic_algorithms, (), deterministic)))

    def explain(values: Sequence[Any]) -> str:
        def mode(on: bool) -> str:
            return "enabled" if on else "disabled"

        now = [
            ("grad mode", torch.is_grad_enabled(), grad, mode),
            ("the default dtype", torch.get_default_dtype(), dtype, str),
            ("autocast on cpu", torch.is_autocast_enabled("cpu"), ac_cpu, mode),
            ("autocast on cuda", torch.is_autocast_enabled("cuda"), ac_cuda, mode),
            (
                "deterministic algorithms",
                torch.are_deterministic_algorithms_enabled(),
                deterministic,
                mode,
            ),
        ]
        for what, got, want, show in now:
            if got != want:
                return f"{what} was {show(got)}, the graph assumed {show(want)}"  # type: ignore[operator]
        return "the global torch state changed"

    return b._part(g, terms, explain, 8)


# -- SHAPE_EXPR ---------------------------------------------------------------------


def shape_expr_part(b: GuardBuilder, g: Guard) -> Part:
    """A sympy relation over size symbols, each bound to a source by the payload's ``symbols``."""
    import sympy  # only symbolic sizes need it (ember.ir.symbolic)
    from sympy.printing.pycode import pycode

    text = str(g.payload["expr"])
    relation = parse_sym_expr(text, field="payload.expr")
    raw = g.payload.get("symbols")
    bindings: dict[str, Source] = {}
    if isinstance(raw, dict):
        for name, src in raw.items():
            bindings[name] = parse_source(str(src))
    free = sorted(relation.free_symbols, key=lambda s: s.name)
    missing = [s.name for s in free if s.name not in bindings]
    if missing:
        raise GuardCompileError(
            f"cannot compile SHAPE_EXPR guard {text}: symbol {missing[0]!r} is not bound to a "
            "source; give the payload a \"symbols\" map such as "
            f"{{\"{missing[0]}\": \"L['x'].size()[0]\"}}"
        )
    reads = tuple(bindings[s.name] for s in free)
    local = {s: sympy.Symbol(b.var(bindings[s.name])) for s in free}
    code = pycode(_integer_floors(relation).xreplace(local), fully_qualified_modules=True)
    if "math." in code:
        b.consts["math"] = __import__("math")

    readable = _relation_text(relation, {s: bindings[s.name].expr() for s in free})
    reason = g.payload.get("reason")

    def explain(values: Sequence[Any]) -> str:
        got = ", ".join(f"{bindings[s.name].expr()} was {val}" for s, val in zip(free, values, strict=True))
        why = f" ({reason})" if isinstance(reason, str) and reason else ""
        return f"{got}; the graph assumed {readable}{why}"

    return Part(g, reads, f"({code})", explain, 20)


def _integer_floors(expr: sympy.Basic) -> sympy.Basic:
    """``expr`` with each ``floor(a)`` of a rational function of sizes written as the integer
    division ``num // den`` (``sympy.floor`` prints as ``math.floor`` of a float quotient:
    ``floor(W/7 + Mod(6*W, 7)/7)`` at ``W = 12`` is ``math.floor(1.714... + 0.285...)``,
    1 instead of 2, so a true guard failed and every size recompiled)."""
    import sympy

    if not expr.has(sympy.floor):
        return expr

    def rewrite(e: sympy.Basic) -> sympy.Basic:
        if isinstance(e, sympy.floor):
            arg = rewrite(e.args[0])
            num, den = sympy.fraction(sympy.together(arg))
            if den != 1 and (num.is_integer and den.is_integer):
                return _FloorDiv(num, den)
            return sympy.floor(arg)
        if not e.args:
            return e
        return e.func(*[rewrite(a) for a in e.args])

    return rewrite(expr)


def _floordiv_class() -> Any:
    import sympy

    class FloorDiv(sympy.Function):  # type: ignore[misc]
        """``a // b`` of integers, printed so (``_print_FloorDiv`` below)."""

        is_integer = True

        def _pythoncode(self, printer: Any) -> str:
            a, b = self.args
            return f"(({printer._print(a)}) // ({printer._print(b)}))"

    return FloorDiv


class _LazyFloorDiv:
    cls: Any = None

    def __call__(self, a: Any, b: Any) -> Any:
        if self.cls is None:
            self.cls = _floordiv_class()
        return self.cls(a, b)


_FloorDiv = _LazyFloorDiv()


_REL_OPS = {"Equality": "==", "Unequality": "!=", "StrictLessThan": "<", "LessThan": "<=",
            "StrictGreaterThan": ">", "GreaterThan": ">="}


def _relation_text(relation: sympy.Basic, names: Mapping[sympy.Symbol, str]) -> str:
    """``s0 >= 2`` as ``L['x'].size()[0] >= 2``: the relation with sources for symbols."""
    import sympy

    def text(e: sympy.Basic) -> str:
        if isinstance(e, sympy.Float):  # a float compared with a dynamic float: 0.5, not 0.500000000000000
            return repr(float(e))
        return str(e.xreplace({s: sympy.Symbol(n) for s, n in names.items()}))

    op = _REL_OPS.get(type(relation).__name__)
    if op is not None:
        return f"{text(relation.lhs)} {op} {text(relation.rhs)}"
    return text(relation)


def parts_for(
    builder: GuardBuilder, guards: Sequence[Guard], extra: Sequence[Part] = ()
) -> list[Part]:
    """Every guard's part (and ``extra`` ones, first), sorted cheapest first (stable:
    equal costs keep their order)."""
    if not all(isinstance(g.kind, GuardKind) for g in guards):
        raise GuardCompileError("guards must have an ember.ir.GuardKind kind")
    parts = list(extra) + [builder.build(g) for g in guards]
    return sorted(parts, key=lambda part: part.cost)
