"""One object reached by several paths is guarded once (``ember.guards.alias``):
the merged check is never looser than the guards it replaces."""

from __future__ import annotations

import copy
import types
from typing import Any

import ember.guards
from ember.ir import Attr, Guard, GuardKind, GuardSet, Local, encode_value, qualname


def _type(source: Any, value: Any) -> Guard:
    return Guard(source, GuardKind.TYPE_MATCH, {"type": qualname(type(value)), "type_id": id(type(value))})


def _const(source: Any, value: Any) -> Guard:
    return Guard(source, GuardKind.CONSTANT_MATCH, {"value": encode_value(value)})


def _config_guards(frame: dict[str, Any]) -> list[Guard]:
    """What capture writes for ``a.config.x + b.config.x`` (both paths, each guarded)."""
    guards = []
    for name in ("a", "b"):
        cfg = Attr(Attr(Local(name), "config"), "x")
        guards += [_type(Attr(Local(name), "config"), frame[name].config), _const(cfg, 3)]
    return guards


def _frame() -> dict[str, Any]:
    shared = types.SimpleNamespace(x=3)
    return {"a": types.SimpleNamespace(config=shared), "b": types.SimpleNamespace(config=shared)}


def test_shared_object_is_read_once_and_its_guards_merge() -> None:
    L = _frame()
    fn = ember.guards.compile(GuardSet(tuple(_config_guards(L))), L, {})
    assert fn(L, {}) and fn.explain(L, {}) is None
    # b.config's type and .x guards became one identity check against a.config
    assert len(fn.parts) == 3
    assert fn.code.count(".x") == 1


def test_a_change_seen_through_either_path_fails() -> None:
    L = _frame()
    fn = ember.guards.compile(GuardSet(tuple(_config_guards(L))), L, {})
    L["b"].config.x = 4  # the one shared object: a.config.x changed too
    assert fn(L, {}) is False
    assert fn.explain(L, {}) == "L['a'].config.x was 4, the graph assumed 3"


def test_paths_no_longer_sharing_an_object_fail_even_with_equal_values() -> None:
    L = _frame()
    fn = ember.guards.compile(GuardSet(tuple(_config_guards(L))), L, {})
    L["b"].config = copy.copy(L["b"].config)  # equal values, another object: stricter, recompiles
    assert fn(L, {}) is False
    reason = fn.explain(L, {})
    assert reason is not None and reason.startswith(
        "L['b'].config was no longer the same object as L['a'].config"
    )
    L["b"].config.x = 5  # what the unmerged guards would have caught is caught as well
    assert fn(L, {}) is False


def test_values_with_accidental_identity_are_not_merged() -> None:
    # Small ints are one cached object; two paths holding 3 are not "the same" value.
    L = {"a": types.SimpleNamespace(n=3), "b": types.SimpleNamespace(n=3)}
    guards = [
        Guard(Attr(Attr(Local("a"), "n"), "real"), GuardKind.CONSTANT_MATCH, {"value": encode_value(3)}),
        Guard(Attr(Attr(Local("b"), "n"), "real"), GuardKind.CONSTANT_MATCH, {"value": encode_value(3)}),
    ]
    fn = ember.guards.compile(GuardSet(tuple(guards)), L, {})
    assert len(fn.parts) == 2 and " is v" not in fn.code
    L["b"].n = 4
    assert fn.explain(L, {}) == "L['b'].n.real was 4, the graph assumed 3"


def test_without_the_frame_nothing_is_merged() -> None:
    L = _frame()
    fn = ember.guards.compile(GuardSet(tuple(_config_guards(L))))
    assert len(fn.parts) == 4 and fn(L, {})


def test_identity_with_a_singleton_makes_the_type_guard_redundant() -> None:
    L: dict[str, Any] = {"flag": True, "n": None}
    guards = [
        _type(Local("flag"), True), _const(Local("flag"), True),
        _type(Local("n"), None), _const(Local("n"), None),
    ]
    fn = ember.guards.compile(GuardSet(tuple(guards)), L, {})
    assert len(fn.parts) == 2 and fn(L, {})
    assert fn.explain({"flag": 1, "n": None}, {}) == "L['flag'] was 1, the graph assumed True"
    assert fn({"flag": 1, "n": None}, {}) is False
    assert fn({"flag": True, "n": 0}, {}) is False
