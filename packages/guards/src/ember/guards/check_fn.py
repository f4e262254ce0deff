"""Parts -> one generated function, compiled with one ``exec``.

The generated function reads each source once into a local (right before
the first part that needs it, so a cheap failing part skips the reads of
later ones), tests the parts cheapest first and returns ``False`` at the
first that fails. Any exception while reading a source (a missing key, an
attribute that is gone) means the guards do not hold. Example for
``f(x, y)``::

    def check(L, G):
        try:
            if _dead: return False
            v0 = L['x']
            if not (type(v0) is c1 and v0.dtype is c2 and ...): return False
            ...
            return True
        except Exception:
            return False
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ember.guards import native
from ember.guards.alias import Alias, drop_implied, share_aliases
from ember.guards.builder import GuardBuilder, Part, Term, eval_source, parts_for
from ember.guards.errors import GuardCompileError
from ember.ir import Guard, GuardKind, GuardSet, Source
from ember.ir.logs import get_logger

log = get_logger("guards")

CheckFunction = Callable[[dict[str, Any], dict[str, Any]], bool]


def native_after() -> int | None:
    """After how many calls a check is compiled to C (``EMBER_NATIVE_GUARDS``): ``0`` never,
    ``1`` (the default) after ``EMBER_NATIVE_GUARDS_AFTER`` calls (default 16), ``eager``
    from the first call."""
    mode = os.environ.get("EMBER_NATIVE_GUARDS", "1").strip().lower()
    if mode in ("0", "false", "off", "no"):
        return None
    if mode == "eager":
        return 0
    try:
        return max(0, int(os.environ.get("EMBER_NATIVE_GUARDS_AFTER", "16")))
    except ValueError:
        return 16


_unavailable_logged = False
_build_lock = threading.Lock()  # one build at a time (the machine is shared)


def _emit_reads(source: Source, b: GuardBuilder, done: set[Source], lines: list[str]) -> None:
    if source in done:
        return
    base = getattr(source, "base", None)
    if base is not None:
        _emit_reads(base, b, done, lines)
    name = b.var(source)
    lines.append(f"        {name} = {b.read(source)}")
    b.program.append(("read", name, b.read_ops[source]))
    done.add(source)


def generate(parts: Sequence[Part], b: GuardBuilder) -> str:
    """The check function's source text."""
    lines = ["def check(L, G):", "    try:"]
    if b.weakrefs:
        lines.append("        if _dead: return False")
    done: set[Source] = set()
    b.program.clear()
    for i, part in enumerate(parts):
        for source in part.reads:
            _emit_reads(source, b, done, lines)
        lines.append(f"        if not ({part.expr}): return False")
        b.program.append(("part", i))
    lines += ["        return True", "    except Exception:", "        return False", ""]
    return "\n".join(lines)


class CheckFn:
    """A compiled guard set: ``check_fn(f_locals, f_globals) -> bool``.

    ``fn`` is the check to call on hot paths (read it on every call: it changes once):
    the generated Python function (``py_fn``, the reference, which ``explain`` follows)
    for the first calls, then the same check compiled to C (``native_fn``, ADR 0051) once
    it has run ``native_after()`` times, or at once where its library is in the disk
    cache already. ``code`` is the Python source; ``parts`` the sorted parts.
    """

    def __init__(
        self, guard_set: GuardSet, parts: list[Part], builder: GuardBuilder, code: str
    ) -> None:
        self.guard_set = guard_set
        self.parts = parts
        self.code = code
        self._builder = builder  # keeps the weakrefs (and their callbacks) alive
        namespace: dict[str, Any] = builder.consts
        exec(compile(self.code, "<ember guards>", "exec"), namespace)
        self.py_fn: CheckFunction = namespace["check"]
        self.native_fn: CheckFunction | None = None
        #: why the check stays Python (``None`` while it may still be compiled)
        self.native_error: str | None = None
        self._predicates: list[Callable[..., bool]] | None = None
        after = native_after()
        self._calls_left = after if after is not None else -1
        self.fn: CheckFunction = self._counting if after is not None else self.py_fn
        self._pending: CheckFunction | None = None
        self._builder_thread: threading.Thread | None = None
        if after is None:
            self.native_error = "EMBER_NATIVE_GUARDS=0"

    def __call__(self, f_locals: dict[str, Any], f_globals: dict[str, Any]) -> bool:
        return self.fn(f_locals, f_globals)

    def _counting(self, f_locals: dict[str, Any], f_globals: dict[str, Any]) -> bool:
        """The Python check, counting calls until the check is worth compiling; the build
        runs in a thread (the compiler is a subprocess), and the first call after it is
        done runs both checks and switches only if they agree."""
        result = self.py_fn(f_locals, f_globals)
        pending = self._pending
        if pending is not None:
            self._pending = None
            self._adopt(pending, f_locals, f_globals, result)
            return result
        self._calls_left -= 1
        if self._calls_left < 0 and self._builder_thread is None and self.native_error is None:
            if os.environ.get("EMBER_NATIVE_GUARDS", "").strip().lower() == "eager":
                self.compile_native(f_locals, f_globals, result)
            else:
                self._builder_thread = threading.Thread(
                    target=self._build_in_background, name="ember-native-guards", daemon=True
                )
                self._builder_thread.start()
        return result

    def _build_in_background(self) -> None:
        try:
            fn = self._build()
        except Exception as exc:
            self._give_up(exc)
            return
        self._pending = fn

    def _build(self) -> CheckFunction:
        helper = native.tensor_helper(wait=True)  # built once per torch build and cache
        with _build_lock:
            fn: CheckFunction = native.build(
                self.native_source(helper), self._builder.consts if self._builder.weakrefs else None,
                helper[1] if helper is not None else None,
            )
        return fn

    def _adopt(
        self, fn: CheckFunction, f_locals: Mapping[str, Any] | None, f_globals: Mapping[str, Any] | None,
        expected: bool | None,
    ) -> CheckFunction | None:
        if f_locals is not None and expected is not None:
            try:
                got = fn(f_locals, f_globals)  # type: ignore[arg-type]
                if got is not expected:
                    raise AssertionError(
                        f"the native check said {got}, the Python check {expected} on the same call"
                    )
            except Exception as exc:
                self._give_up(exc)
                return None
        self.native_fn = fn
        self.fn = fn
        return fn

    def _give_up(self, exc: Exception) -> None:
        global _unavailable_logged
        self.native_error = f"{type(exc).__name__}: {str(exc)[:500]}"
        self.fn = self.py_fn
        if os.environ.get("EMBER_STRICT") == "1" and not isinstance(exc, native.NativeBuildError):
            raise exc
        if not _unavailable_logged:
            _unavailable_logged = True
            log.warning("ember.guards: guards stay Python checks (%s)", self.native_error)
        else:
            log.debug("ember.guards: guards stay Python checks (%s)", self.native_error)

    def native_source(self, helper: Any = None) -> native.NativeSource:
        """The C source of this check and the values it is bound to (``native.py``)."""
        leaves = any(part.terms is None for part in self.parts)
        codes = helper[0] if helper is not None else None
        return native.generate_c(self.parts, self._builder, self._part_predicates() if leaves else None, codes)

    def compile_native(
        self,
        f_locals: Mapping[str, Any] | None = None,
        f_globals: Mapping[str, Any] | None = None,
        expected: bool | None = None,
    ) -> CheckFunction | None:
        """Compile this check to C now and use it from now on; returns it, or ``None`` (the
        Python check stays, ``native_error`` says why, logged once per process).

        Given a call's ``f_locals``/``f_globals`` and the Python check's verdict on them,
        the native check must agree before it is used."""
        if self.native_fn is not None:
            return self.native_fn
        try:
            fn = self._build()
        except Exception as exc:
            self._give_up(exc)
            return None
        return self._adopt(fn, f_locals, f_globals, expected)

    def _part_predicates(self) -> list[Callable[..., bool]]:
        """One small function per part, ``(values of its reads) -> bool`` (built on first explain)."""
        if self._predicates is None:
            names = self._builder.names
            lines = []
            for i, part in enumerate(self.parts):
                args = ", ".join(names[s] for s in part.reads)
                lines.append(f"def p{i}({args}):\n    return bool({part.expr})\n")
            namespace = dict(self._builder.consts)
            exec(compile("\n".join(lines), "<ember guard parts>", "exec"), namespace)
            self._predicates = [namespace[f"p{i}"] for i in range(len(self.parts))]
        return self._predicates

    def explain(self, f_locals: Mapping[str, Any], f_globals: Mapping[str, Any]) -> str | None:
        """The first failing guard in plain words, or ``None`` when every guard holds."""
        if self._builder.consts.get("_dead"):
            return "an object the graph was captured with (a module or function) no longer exists"
        for part, predicate in zip(self.parts, self._part_predicates(), strict=True):
            values = []
            for source in part.reads:
                try:
                    values.append(eval_source(source, f_locals, f_globals))
                except Exception as exc:
                    return f"{source.expr()} could not be read ({type(exc).__name__}: {exc})"
            try:
                ok = predicate(*values)
            except Exception as exc:
                return f"checking {part.guard.kind.value} on {_where(part.guard)} raised {type(exc).__name__}: {exc}"
            if not ok:
                return part.explain(values)
        return None

    def __repr__(self) -> str:
        return f"<ember CheckFn: {len(self.parts)} guards>"


def _where(guard: Guard) -> str:
    return guard.source.expr() if guard.source is not None else "the frame"


def _relation_guards(guard_set: GuardSet) -> list[Guard]:
    """``shape_relations`` as SHAPE_EXPR guards, with symbols bound by the set's SHAPE_EXPR guards."""
    if not guard_set.shape_relations:
        return []
    symbols: dict[str, Any] = {}
    for g in guard_set.guards:
        if g.kind is GuardKind.SHAPE_EXPR and isinstance(g.payload.get("symbols"), dict):
            symbols.update(g.payload["symbols"])  # type: ignore[arg-type]
    return [
        Guard(None, GuardKind.SHAPE_EXPR, {"expr": rel, "symbols": symbols})
        for rel in guard_set.shape_relations
    ]


def _alias_part(b: GuardBuilder, alias: Alias) -> Part:
    """``later is earlier``: one object reached by two paths (``alias.py``)."""
    later, earlier = alias.later, alias.earlier
    text, first = alias.original.expr(), earlier.expr()

    def explain(values: Sequence[Any]) -> str:
        return (
            f"{text} was no longer the same object as {first} (the graph was captured "
            "with one object reached by both paths)"
        )

    guard = Guard(later, GuardKind.ID_MATCH, {"id": 0, "repr": f"the object at {first}"})
    a, c = b.var(later), b.var(earlier)
    term = Term(f"{a} is {c}", ("is_var", a, c))
    return Part(guard, (later, earlier), term.py, explain, 1, (term,))


def compile_guards(
    guard_set: GuardSet,
    f_locals: Mapping[str, Any] | None = None,
    f_globals: Mapping[str, Any] | None = None,
) -> CheckFn:
    """Compile ``guard_set`` into one check function.

    Pass the frame the guards were captured from (``f_locals``/``f_globals``)
    so classes, modules and functions are matched by identity and held
    safely (see :mod:`ember.guards.builder`); without it, payload ids are
    compared and the caller must keep those objects alive.
    """
    if not isinstance(guard_set, GuardSet):
        raise GuardCompileError(
            f"ember.guards.compile expects an ember.ir.GuardSet, got {type(guard_set).__name__}"
        )
    builder = GuardBuilder(f_locals, f_globals)
    guards = list(guard_set.guards) + _relation_guards(guard_set)
    aliases: list[Alias] = []
    if builder.frame is not None:
        guards, aliases = share_aliases(guards, builder.frame, eval_source)
    guards = drop_implied(guards)
    parts = parts_for(builder, guards, [_alias_part(builder, a) for a in aliases])
    code = generate(parts, builder)  # reads the frame's values to pick cheaper reads
    builder.frame = None  # the check must not keep the captured frame's objects alive
    return CheckFn(guard_set, parts, builder, code)
