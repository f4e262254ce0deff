"""The native check (ADR 0051) against the Python reference: every guard kind both ways on
passing and failing values, every test of ``test_check_fn.py`` run with the native check,
and random guard IR over random frames (a fuzz test). The verdicts must be the same: a
native check that passes where the Python one fails is a silent wrong result."""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import inspect
import os
import random
import shutil
import types
from pathlib import Path
from typing import Any

import pytest
import torch

import ember.guards
from ember.guards.check_fn import CheckFn
from ember.ir import (
    Attr,
    DictEntry,
    DictItem,
    Global,
    Guard,
    GuardKind,
    GuardSet,
    Item,
    Local,
    Size,
    Source,
    Stride,
    encode_guard_value,
    encode_value,
    global_state_payload,
    qualname,
    tensor_payload,
)

pytestmark = pytest.mark.skipif(
    shutil.which(os.environ.get("CC", "gcc")) is None, reason="no C compiler for native guards"
)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # one cache for the module: equal checks share a library, as in a real process
    root = tmp_path_factory.getbasetemp() / "native-guards-cache"
    monkeypatch.setenv("EMBER_CACHE_DIR", str(root))
    monkeypatch.setenv("EMBER_NATIVE_GUARDS", "1")


def compiled(guards: list[Guard], L: dict[str, Any], G: dict[str, Any] | None = None,
             relations: tuple[str, ...] = ()) -> CheckFn:
    fn = ember.guards.compile(GuardSet(guards, relations), L, G or {})
    native = fn.compile_native()
    assert native is not None, fn.native_error
    assert fn.fn is native
    return fn


def verdict(fn: CheckFn, L: dict[str, Any], G: dict[str, Any] | None = None) -> bool:
    """Both checks' verdict on one frame; they must agree, and ``explain`` with them."""
    G = G or {}
    py = fn.py_fn(L, G)
    assert fn.native_fn is not None
    nat = fn.native_fn(L, G)
    assert nat is py, f"native {nat}, Python {py}\n{fn.code}"
    assert (fn.explain(L, G) is None) is py
    return py


def tguard(name: str, t: torch.Tensor, dynamic: tuple[int, ...] = ()) -> Guard:
    return Guard(Local(name), GuardKind.TENSOR_MATCH, tensor_payload(t, dynamic))


# -- each kind, passing and failing ------------------------------------------------------


def test_tensor_match_both_ways() -> None:
    x = torch.randn(4, 3)
    fn = compiled([tguard("x", x)], {"x": x})
    assert verdict(fn, {"x": x}) is True
    assert verdict(fn, {"x": torch.randn(4, 3)}) is True
    for bad in (torch.randn(3, 4), torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 3).t().contiguous().t(),
                torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, device="meta"), torch.randn(12)[:12].view(4, 3).t(),
                torch.nn.Parameter(torch.randn(4, 3)), 3, None, "x", [1, 2]):
        assert verdict(fn, {"x": bad}) is False
    assert verdict(fn, {}) is False  # a missing local: the read raises


def test_tensor_match_dynamic_dims_and_dispatch_keys() -> None:
    z = torch.randn(4, 3, dtype=torch.complex64)
    fn = compiled([tguard("z", z, dynamic=(0,))], {"z": z})
    assert verdict(fn, {"z": torch.randn(9, 3, dtype=torch.complex64)}) is True
    assert verdict(fn, {"z": z.conj()}) is False  # the Conjugate dispatch key
    assert verdict(fn, {"z": torch.randn(9, 4, dtype=torch.complex64)}) is False
    with torch.inference_mode():
        inf = torch.randn(4, 3, dtype=torch.complex64)
    assert verdict(fn, {"z": inf}) is False


def test_weight_tensor_match_both_ways() -> None:
    w = torch.nn.Parameter(torch.randn(5, 2))
    payload = {**tensor_payload(w), "weight": True}
    fn = compiled([Guard(Local("w"), GuardKind.TENSOR_MATCH, payload)], {"w": w})
    assert verdict(fn, {"w": w}) is True
    w2 = torch.nn.Parameter(torch.randn(5, 2))
    assert verdict(fn, {"w": w2}) is True
    w2.data = torch.randn(2, 5)
    assert verdict(fn, {"w": w2}) is False
    assert verdict(fn, {"w": torch.randn(5, 2)}) is False  # requires_grad


def test_type_id_function_module_match() -> None:
    class A:
        pass

    def f() -> None:
        pass

    lin = torch.nn.Linear(2, 2)
    a = A()
    L = {"a": a, "f": f, "m": lin}
    fn = compiled([
        Guard(Local("a"), GuardKind.TYPE_MATCH, {"type": qualname(A), "type_id": id(A)}),
        Guard(Local("a"), GuardKind.ID_MATCH, {"id": id(a), "repr": "a"}),
        Guard(Local("f"), GuardKind.FUNCTION_MATCH, {"id": id(f), "qualname": "f"}),
        Guard(Local("m"), GuardKind.NN_MODULE, {"id": id(lin), "type": qualname(type(lin))}),
    ], L)
    assert verdict(fn, L) is True
    assert verdict(fn, {**L, "a": A()}) is False
    assert verdict(fn, {**L, "f": lambda: None}) is False
    assert verdict(fn, {**L, "m": torch.nn.Linear(2, 2)}) is False


def test_ids_compared_without_the_frame() -> None:
    class A:
        pass

    a = A()
    fn = compiled([
        Guard(Local("a"), GuardKind.TYPE_MATCH, {"type": qualname(A), "type_id": id(A)}),
        Guard(Local("a"), GuardKind.ID_MATCH, {"id": id(a), "repr": "a"}),
    ], None)  # type: ignore[arg-type]
    assert verdict(fn, {"a": a}) is True
    assert verdict(fn, {"a": A()}) is False
    assert verdict(fn, {"a": 1}) is False


def test_dead_object_fails_both() -> None:
    class A:
        pass

    a = A()
    fn = compiled([Guard(Local("a"), GuardKind.ID_MATCH, {"id": id(a), "repr": "a"})], {"a": a})
    b = A()
    assert verdict(fn, {"a": b}) is False
    del a
    import gc

    gc.collect()
    assert verdict(fn, {"a": b}) is False


@pytest.mark.parametrize("value", [None, True, False, 0, 1, -7, 2**70, 1.5, float("nan"), float("inf"), "s", "",
                                   (1, "a"), (), (1.0, (2, None)), torch.float32, Ellipsis])
def test_constant_and_equals_match(value: Any) -> None:
    for kind in (GuardKind.CONSTANT_MATCH, GuardKind.EQUALS_MATCH):
        fn = compiled([Guard(Local("v"), kind, {"value": encode_value(value)})], {"v": value})
        assert verdict(fn, {"v": value}) is True
        others = [None, True, False, 0, 1, 1.0, True, 2**70 + 1, float("nan"), "s", "t", (1, "a"), (1, "b"),
                  torch.float64, [1, "a"], object()]
        for other in others:
            verdict(fn, {"v": other})  # same verdict both ways, whatever it is
        assert verdict(fn, {}) is False


def test_equals_match_user_eq_and_raising_eq() -> None:
    class Eq:
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = object.__hash__

    class Boom(tuple):  # type(v) is tuple fails first: a subclass never reaches __eq__
        def __eq__(self, other: object) -> bool:
            raise ValueError("boom")

    fn = compiled([Guard(Local("v"), GuardKind.EQUALS_MATCH, {"value": encode_value((1, 2))})], {"v": (1, 2)})
    assert verdict(fn, {"v": Eq()}) is False
    assert verdict(fn, {"v": Boom((1, 2))}) is False
    assert verdict(fn, {"v": (1, Eq())}) is True  # tuple == compares items with their __eq__


def test_length_keys_not_none() -> None:
    d = {"a": 1, "b": 2}
    od = collections.OrderedDict(d)
    L = {"d": d, "od": od, "l": [1, 2, 3], "n": 0}
    fn = compiled([
        Guard(Local("d"), GuardKind.DICT_KEYS, {"keys": [encode_value(k) for k in d]}),
        Guard(Local("od"), GuardKind.DICT_KEYS, {"keys": [encode_value(k) for k in od]}),
        Guard(Local("l"), GuardKind.LENGTH_MATCH, {"length": 3}),
        Guard(Local("n"), GuardKind.NOT_NONE, {}),
    ], L)
    assert verdict(fn, L) is True
    assert verdict(fn, {**L, "d": {"b": 2, "a": 1}}) is False  # order matters
    assert verdict(fn, {**L, "d": {"a": 1}}) is False
    assert verdict(fn, {**L, "d": {"a": 1, "b": 2, "c": 3}}) is False
    assert verdict(fn, {**L, "d": collections.OrderedDict(d)}) is True
    assert verdict(fn, {**L, "d": [("a", 1)]}) is False  # no keys(): raises
    assert verdict(fn, {**L, "l": (1, 2, 3)}) is True
    assert verdict(fn, {**L, "l": [1]}) is False
    assert verdict(fn, {**L, "l": 5}) is False  # len() raises
    assert verdict(fn, {**L, "n": None}) is False

    class Key(str):
        def __eq__(self, other: object) -> bool:
            return str.__eq__(self, other)

        __hash__ = str.__hash__

    assert verdict(fn, {**L, "d": {Key("a"): 1, "b": 2}}) is True


def test_global_state_both_ways() -> None:
    fn = compiled([Guard(None, GuardKind.GLOBAL_STATE, global_state_payload())], {})
    assert verdict(fn, {}) is True
    with torch.no_grad():
        assert verdict(fn, {}) is False
    torch.use_deterministic_algorithms(True)
    try:
        assert verdict(fn, {}) is False
    finally:
        torch.use_deterministic_algorithms(False)
    with torch.autocast("cpu"):
        assert verdict(fn, {}) is False


def test_shape_expr_is_a_python_leaf() -> None:
    x = torch.randn(4, 6)
    fn = compiled([
        tguard("x", x, dynamic=(0, 1)),
        Guard(None, GuardKind.SHAPE_EXPR, {
            "expr": "Eq(Mod(s0*s1, 8), 0)",
            "symbols": {"s0": "L['x'].size()[0]", "s1": "L['x'].size()[1]"},
        }),
    ], {"x": x}, relations=("Le(s0, 16)",))
    assert any(p.terms is None for p in fn.parts)
    assert verdict(fn, {"x": torch.randn(2, 4)}) is True
    assert verdict(fn, {"x": torch.randn(3, 3)}) is False
    assert verdict(fn, {"x": torch.randn(32, 4)}) is False


def test_reads_attr_item_dictitem_size_stride_global() -> None:
    class Missing(dict):  # type: ignore[type-arg]
        def __missing__(self, key: object) -> int:
            return 7

        def __getitem__(self, key: object) -> int:
            return 99

    ns = types.SimpleNamespace(t=(1, [2, 3]), d=Missing(a=1))
    x = torch.randn(2, 5)
    L = {"ns": ns, "x": x}
    G = {"g": 3}
    fn = compiled([
        Guard(Item(Item(Attr(Local("ns"), "t"), 1), -1), GuardKind.CONSTANT_MATCH, {"value": 3}),
        Guard(DictItem(Attr(Local("ns"), "d"), "a"), GuardKind.CONSTANT_MATCH, {"value": 1}),
        Guard(DictItem(Attr(Local("ns"), "d"), "zz"), GuardKind.CONSTANT_MATCH, {"value": 7}),
        Guard(Size(Local("x"), 1), GuardKind.CONSTANT_MATCH, {"value": 5}),
        Guard(Stride(Local("x"), 0), GuardKind.CONSTANT_MATCH, {"value": 5}),
        Guard(Global("g"), GuardKind.CONSTANT_MATCH, {"value": 3}),
    ], L, G)
    assert verdict(fn, L, G) is True
    assert verdict(fn, L, {"g": 4}) is False
    assert verdict(fn, L, {}) is False
    assert verdict(fn, {**L, "x": torch.randn(5, 2).t()}) is False
    assert verdict(fn, {**L, "ns": types.SimpleNamespace(t=(1, [2, 3]), d={"a": 1, "zz": 7})}, G) is True
    assert verdict(fn, {**L, "ns": types.SimpleNamespace(t=(1, [2, 3]), d={"a": 1})}, G) is False
    assert verdict(fn, {**L, "ns": types.SimpleNamespace(t=(1, []), d=Missing(a=1))}, G) is False
    assert verdict(fn, {**L, "ns": types.SimpleNamespace(d=Missing(a=1))}, G) is False


def test_dict_entries_read_by_position() -> None:
    """``list(dict.keys(d))[i]`` / ``list(dict.values(d))[i]``: a registry keyed by
    classes, its keys by identity and its values at the same positions."""

    def handle_int() -> None: ...

    def handle_str() -> None: ...

    table = {int: handle_int, str: handle_str}
    L = {"ns": types.SimpleNamespace(table=table)}
    base = Attr(Local("ns"), "table")
    fn = compiled([
        Guard(base, GuardKind.LENGTH_MATCH, {"length": 2}),
        Guard(DictEntry(base, 0, "keys"), GuardKind.ID_MATCH, {"id": id(int), "repr": "int"}),
        Guard(DictEntry(base, 1, "keys"), GuardKind.ID_MATCH, {"id": id(str), "repr": "str"}),
        Guard(DictEntry(base, 1, "values"), GuardKind.FUNCTION_MATCH,
              {"id": id(handle_str), "qualname": "handle_str"}),
    ], L)
    assert verdict(fn, L) is True
    again = {"ns": types.SimpleNamespace(table={int: None, str: handle_str})}
    assert verdict(fn, again) is True  # the value at 0 is not guarded
    assert verdict(fn, {"ns": types.SimpleNamespace(table={str: handle_str, int: handle_int})}) is False
    assert verdict(fn, {"ns": types.SimpleNamespace(table={int: handle_int, str: handle_int})}) is False
    assert verdict(fn, {"ns": types.SimpleNamespace(table={int: handle_int})}) is False
    assert verdict(fn, {"ns": types.SimpleNamespace(table=[int, str])}) is False


def test_a_set_pinned_by_value() -> None:
    names = {"relu", "gelu"}
    G = {"NAMES": names}
    fn = compiled([
        Guard(Global("NAMES"), GuardKind.TYPE_MATCH, {"type": qualname(set), "type_id": id(set)}),
        Guard(Global("NAMES"), GuardKind.EQUALS_MATCH, {"value": encode_guard_value(names)}),
    ], {}, G)
    assert verdict(fn, {}, G) is True
    assert verdict(fn, {}, {"NAMES": {"gelu", "relu"}}) is True
    assert verdict(fn, {}, {"NAMES": {"gelu"}}) is False
    assert verdict(fn, {}, {"NAMES": frozenset(names)}) is False


def test_module_fast_reads() -> None:
    m = torch.nn.Module()
    m.lin = torch.nn.Linear(2, 3)
    m.blocks = torch.nn.ModuleList([torch.nn.ReLU()])
    w = m.lin.weight
    sources = [
        Attr(Attr(Local("m"), "lin"), "weight"),
        Item(Attr(Local("m"), "blocks"), 0),
    ]
    L = {"m": m}
    fn = compiled([
        Guard(sources[0], GuardKind.ID_MATCH, {"id": id(w), "repr": "w"}),
        Guard(sources[1], GuardKind.TYPE_MATCH, {"type": qualname(torch.nn.ReLU), "type_id": id(torch.nn.ReLU)}),
    ], L)
    assert "_modules" in fn.code and "_parameters" in fn.code
    assert verdict(fn, L) is True
    m.lin.weight = torch.nn.Parameter(torch.randn(3, 2))
    assert verdict(fn, L) is False
    m.lin.weight = w
    assert verdict(fn, L) is True
    m.lin.__dict__["weight"] = torch.randn(3, 2)  # an instance attribute wins over _parameters
    assert verdict(fn, L) is False
    del m.lin.__dict__["weight"]
    assert verdict(fn, L) is True
    m.blocks[0] = torch.nn.GELU()
    assert verdict(fn, L) is False
    del m.blocks._modules["0"]
    assert verdict(fn, L) is False


def test_base_exception_propagates_both_ways() -> None:
    class Stop:
        @property
        def x(self) -> int:
            raise KeyboardInterrupt

    class Err:
        @property
        def x(self) -> int:
            raise ValueError("no x")

    fn = compiled([Guard(Attr(Local("o"), "x"), GuardKind.CONSTANT_MATCH, {"value": 1})],
                  {"o": types.SimpleNamespace(x=1)})
    assert verdict(fn, {"o": types.SimpleNamespace(x=1)}) is True
    assert verdict(fn, {"o": Err()}) is False
    with pytest.raises(KeyboardInterrupt):
        fn.py_fn({"o": Stop()}, {})
    with pytest.raises(KeyboardInterrupt):
        fn.native_fn({"o": Stop()}, {})  # type: ignore[misc]


def test_aliases_both_ways() -> None:
    cfg = types.SimpleNamespace(k=1)
    a = types.SimpleNamespace(cfg=cfg)
    b = types.SimpleNamespace(cfg=cfg)
    L = {"a": a, "b": b}
    fn = compiled([
        Guard(Attr(Attr(Local("a"), "cfg"), "k"), GuardKind.CONSTANT_MATCH, {"value": 1}),
        Guard(Attr(Attr(Local("b"), "cfg"), "k"), GuardKind.CONSTANT_MATCH, {"value": 1}),
    ], L)
    assert " is v" in fn.code
    assert verdict(fn, L) is True
    assert verdict(fn, {"a": a, "b": types.SimpleNamespace(cfg=types.SimpleNamespace(k=1))}) is False


def test_tiering_compiles_after_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_NATIVE_GUARDS_AFTER", "3")
    x = torch.randn(3)
    fn = ember.guards.compile(GuardSet([tguard("x", x)]), {"x": x}, {})
    for _ in range(3):
        assert fn({"x": x}, {}) is True
        assert fn.native_fn is None
    assert fn({"x": x}, {}) is True  # the 4th call starts the build, in a thread
    assert fn._builder_thread is not None
    fn._builder_thread.join()
    assert fn.native_fn is None  # built, not used before a call compares it with Python
    assert fn({"x": x}, {}) is True
    assert fn.native_fn is not None and fn.fn is fn.native_fn
    assert fn({"x": torch.randn(4)}, {}) is False


def test_off_and_no_compiler_keep_python(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(3)
    monkeypatch.setenv("EMBER_NATIVE_GUARDS", "0")
    fn = ember.guards.compile(GuardSet([tguard("x", x)]), {"x": x}, {})
    for _ in range(40):
        assert fn({"x": x}, {}) is True
    assert fn.fn is fn.py_fn and fn.native_fn is None
    monkeypatch.setenv("EMBER_NATIVE_GUARDS", "eager")
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(Path(os.environ["EMBER_CACHE_DIR"]) / "empty"))
    fn = ember.guards.compile(GuardSet([tguard("x", x, dynamic=(0,))]), {"x": x}, {})
    assert fn({"x": x}, {}) is True
    assert fn.fn is fn.py_fn and fn.native_error is not None
    assert fn({"x": torch.randn(3, 1)}, {}) is False


# -- test_check_fn.py, with the native check ---------------------------------------------


def _check_fn_tests() -> types.ModuleType:
    path = Path(__file__).with_name("test_check_fn.py")
    spec = importlib.util.spec_from_file_location("_native_test_check_fn", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_REFERENCE = _check_fn_tests()
_NAMES = [n for n, f in vars(_REFERENCE).items()
          if n.startswith("test_") and callable(f) and not inspect.signature(f).parameters]


@pytest.mark.parametrize("name", _NAMES)
def test_check_fn_suite_with_native_checks(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every check the reference suite makes runs native from its first call (which
    compares the native verdict with the Python one before using it)."""
    monkeypatch.setenv("EMBER_NATIVE_GUARDS", "eager")
    made: list[CheckFn] = []
    real = ember.guards.compile

    def spy(*args: Any, **kwargs: Any) -> CheckFn:
        fn = real(*args, **kwargs)
        made.append(fn)
        return fn

    monkeypatch.setattr(_REFERENCE.ember.guards, "compile", spy)
    monkeypatch.setenv("EMBER_STRICT", "1")
    getattr(_REFERENCE, name)()
    for fn in made:
        assert fn.native_error is None or fn.native_fn is None


# -- random guard IR over random frames --------------------------------------------------


class Obj:
    """A plain object with attributes (what capture reads configs and user objects as)."""


class Raises:
    @property
    def boom(self) -> int:
        raise RuntimeError("boom")

    def __eq__(self, other: object) -> bool:
        raise ValueError("no ==")

    def __len__(self) -> int:
        raise TypeError("no len")

    __hash__ = object.__hash__


def _leaf(rng: random.Random) -> Any:
    pick = rng.randrange(12)
    if pick == 0:
        return None
    if pick == 1:
        return rng.choice([True, False])
    if pick == 2:
        return rng.choice([0, 1, -3, 2**65, 7])
    if pick == 3:
        return rng.choice([0.0, -0.0, 1.5, float("nan"), float("inf")])
    if pick == 4:
        return rng.choice(["a", "b", "", "long string"])
    if pick == 5:
        return tuple(rng.choice([1, "a", None, 2.5]) for _ in range(rng.randrange(3)))
    if pick == 6:
        return Raises()
    if pick == 7:
        return rng.choice([torch.float32, torch.int64])
    return _tensor(rng)


def _tensor(rng: random.Random) -> torch.Tensor:
    shape = [rng.choice([1, 2, 3]) for _ in range(rng.randrange(4))]
    dtype = rng.choice([torch.float32, torch.float64, torch.complex64, torch.int64])
    t = torch.zeros(shape, dtype=dtype)
    if t.dim() >= 2 and rng.random() < 0.3:
        t = t.transpose(0, 1)
    if dtype.is_complex and rng.random() < 0.3:
        t = t.conj()
    if dtype.is_floating_point and rng.random() < 0.3:
        t.requires_grad_(True)
    if rng.random() < 0.1:
        t = torch.nn.Parameter(t.detach()) if (t.dtype.is_floating_point or t.dtype.is_complex) else t
    return t


def _value(rng: random.Random, depth: int) -> Any:
    if depth <= 0 or rng.random() < 0.35:
        return _leaf(rng)
    pick = rng.randrange(5)
    if pick == 0:
        return [_value(rng, depth - 1) for _ in range(rng.randrange(4))]
    if pick == 1:
        return tuple(_value(rng, depth - 1) for _ in range(rng.randrange(3)))
    if pick == 2:
        return {k: _value(rng, depth - 1) for k in rng.sample(["a", "b", "c", "d"], rng.randrange(4))}
    if pick == 3:
        o = Obj()
        for k in rng.sample(["p", "q", "r"], rng.randrange(1, 4)):
            setattr(o, k, _value(rng, depth - 1))
        return o
    m = torch.nn.Module()
    m.lin = torch.nn.Linear(2, 2)
    m.extra = _value(rng, depth - 1)
    if rng.random() < 0.5:
        m.blocks = torch.nn.ModuleList([torch.nn.Linear(1, 1) for _ in range(2)])
    return m


def _walk(source: Source, value: Any, out: list[tuple[Source, Any]], depth: int = 0) -> None:
    out.append((source, value))
    if depth > 5:
        return
    if isinstance(value, torch.nn.Module):
        for name, sub in list(value._modules.items()) + list(value._parameters.items()):
            if name.isidentifier():
                _walk(Attr(source, name), sub, out, depth + 1)
        if isinstance(value, torch.nn.ModuleList):
            for i, sub in enumerate(value):
                _walk(Item(source, i), sub, out, depth + 1)
        if "extra" in value.__dict__:
            _walk(Attr(source, "extra"), value.extra, out, depth + 1)
        _walk(Attr(source, "training"), value.training, out, depth + 1)
    elif isinstance(value, Obj):
        for name, sub in vars(value).items():
            _walk(Attr(source, name), sub, out, depth + 1)
    elif isinstance(value, dict):
        for k, sub in value.items():
            _walk(Item(source, k) if len(k) % 2 else DictItem(source, k), sub, out, depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, sub in enumerate(value):
            _walk(Item(source, i if i % 2 else i - len(value)), sub, out, depth + 1)
    elif isinstance(value, torch.Tensor):
        for d in range(value.dim()):
            out.append((Size(source, d), value.size(d)))
            out.append((Stride(source, d), value.stride(d)))


def _guards_for(rng: random.Random, source: Source, value: Any) -> list[Guard]:
    out: list[Guard] = []
    t = type(value)
    if rng.random() < 0.5:
        out.append(Guard(source, GuardKind.TYPE_MATCH, {"type": qualname(t), "type_id": id(t)}))
    if isinstance(value, torch.Tensor):
        dyn = tuple(d for d in range(value.dim()) if rng.random() < 0.3)
        payload = tensor_payload(value, dyn)
        if isinstance(value, torch.nn.Parameter) and rng.random() < 0.5:
            payload["weight"] = True
        out.append(Guard(source, GuardKind.TENSOR_MATCH, payload))
    elif isinstance(value, torch.nn.Module):
        out.append(Guard(source, GuardKind.NN_MODULE, {"id": id(value), "type": qualname(t)}))
    elif isinstance(value, (Obj, Raises)):
        out.append(Guard(source, GuardKind.ID_MATCH, {"id": id(value), "repr": "obj"}))
    else:
        try:
            encoded = encode_value(value)
        except Exception:
            encoded = None
        if encoded is not None or value is None:
            kind = GuardKind.CONSTANT_MATCH if rng.random() < 0.5 else GuardKind.EQUALS_MATCH
            out.append(Guard(source, kind, {"value": encoded}))
    if isinstance(value, (list, tuple, dict)):
        out.append(Guard(source, GuardKind.LENGTH_MATCH, {"length": len(value)}))
    if isinstance(value, dict):
        out.append(Guard(source, GuardKind.DICT_KEYS, {"keys": [encode_value(k) for k in value]}))
    if value is not None and rng.random() < 0.2:
        out.append(Guard(source, GuardKind.NOT_NONE, {}))
    return out


def _mutate(rng: random.Random, L: dict[str, Any]) -> None:
    """Change one thing somewhere in the frame, in place (or do nothing)."""
    spots: list[tuple[Any, Any]] = [(L, k) for k in L]
    stack = list(L.values())
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, dict):
            spots += [(v, k) for k in v]
            stack += list(v.values())
        elif isinstance(v, list):
            spots += [(v, i) for i in range(len(v))]
            stack += v
        elif isinstance(v, Obj):
            spots += [(v, ("attr", k)) for k in vars(v)]
            stack += list(vars(v).values())
        elif isinstance(v, torch.nn.Module):
            spots += [(v, ("attr", "extra")), (v, ("attr", "lin")), (v, ("train", None))]
            stack += [v.__dict__.get("extra")]
    holder, key = rng.choice(spots)
    action = rng.randrange(6)
    if isinstance(key, tuple) and key[0] == "train":
        holder.train(not holder.training)
        return
    if isinstance(key, tuple):
        name = key[1]
        if action == 0 and not isinstance(holder, torch.nn.Module):
            delattr(holder, name)
        elif action == 1:
            setattr(holder, name, _value(rng, 1) if name != "lin" else torch.nn.Linear(2, 2))
        else:
            old = getattr(holder, name)
            if isinstance(old, torch.Tensor) and rng.random() < 0.5:
                with torch.no_grad():
                    old.data = torch.zeros(3, 1) if rng.random() < 0.5 else old.data.clone()
            else:
                setattr(holder, name, _value(rng, 1) if name != "lin" else torch.nn.Linear(2, 2))
        return
    if action == 0 and isinstance(holder, dict) and holder is not L:
        del holder[key]
    elif action == 1 and isinstance(holder, dict):
        holder["z" if rng.random() < 0.5 else key] = _leaf(rng)
    elif action == 2 and isinstance(holder, list):
        holder.append(_leaf(rng))
    else:
        holder[key] = _value(rng, 1)


@pytest.mark.parametrize("seed", range(int(os.environ.get("EMBER_GUARD_FUZZ", "40"))))
def test_random_guard_ir(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random frames, random guards on what they hold, then random changes: after each,
    the native and the Python check say the same."""
    monkeypatch.setenv("EMBER_STRICT", "1")
    rng = random.Random(seed)
    L = {name: _value(rng, 3) for name in ("a", "b", "c")}
    L["shared"] = L["a"]
    G = {"g": _leaf(rng)}
    found: list[tuple[Source, Any]] = []
    for name, value in L.items():
        _walk(Local(name), value, found)
    _walk(Global("g"), G["g"], found)
    picked = rng.sample(found, min(len(found), 25))
    guards = [g for source, value in picked for g in _guards_for(rng, source, value)]
    sizes = [(s, v) for s, v in found if isinstance(s, Size)]
    if sizes:
        s, v = rng.choice(sizes)
        guards.append(Guard(None, GuardKind.SHAPE_EXPR, {"expr": f"Eq(s0, {v})", "symbols": {"s0": s.expr()}}))
    if rng.random() < 0.5:
        guards.append(Guard(None, GuardKind.GLOBAL_STATE, global_state_payload()))
    fn = ember.guards.compile(GuardSet(guards), L, G)
    assert fn.compile_native(L, G, fn.py_fn(L, G)) is not None, fn.native_error
    # a frame passes its own guards (but a nan inside a list is equal to no decoded copy)
    nested_nan = any(isinstance(v, (list, tuple, dict)) and "nan" in repr(v) for _, v in picked)
    assert verdict(fn, L, G) is True or nested_nan, fn.explain(L, G)
    for _ in range(12):
        # a change the container refuses (a module attribute that must be a module) is skipped
        with contextlib.suppress(TypeError, KeyError, AttributeError, RuntimeError):
            _mutate(rng, L)
        verdict(fn, L, G)


# -- the tensor helper (native_tensor.cpp) against the getters ------------------------------


def test_tensor_helper_is_used_and_agrees() -> None:
    from ember.guards import native

    assert native.tensor_helper(wait=True) is not None, native.tensor_helper_error()
    x = torch.randn(3, 2)
    w = torch.nn.Parameter(torch.randn(3, 2))
    payload = {**tensor_payload(w), "weight": True}
    fn = compiled([tguard("x", x), Guard(Local("w"), GuardKind.TENSOR_MATCH, payload)], {"x": x, "w": w})
    assert "TENSOR(" in fn.native_source(native.tensor_helper()).source
    cases = [x, torch.randn(3, 2), torch.randn(2, 3).t(), torch.randn(3, 2, dtype=torch.float64),
             torch.randn(3, 2, requires_grad=True), torch.randn(3, 2, device="meta"), torch.randn(3, 2)[:, :1],
             torch.randn(3, 2, dtype=torch.complex64).conj(), torch.randn(3, 2).to_sparse(),
             torch.nn.Parameter(torch.randn(3, 2)), torch.randn(6).view(3, 2)]
    with torch.inference_mode():
        cases.append(torch.randn(3, 2))
    for value in cases:
        verdict(fn, {"x": value, "w": w})
        verdict(fn, {"x": x, "w": value})
    assert verdict(fn, {"x": x, "w": w}) is True


def test_tensor_helper_steps_aside_for_modes_and_changed_classes() -> None:
    from torch.overrides import TorchFunctionMode

    class Float64Everywhere(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if getattr(func, "__self__", None) is torch.Tensor.dtype:  # the dtype getter
                return torch.float64
            return func(*args, **(kwargs or {}))

    x = torch.randn(3)
    fn = compiled([tguard("x", x)], {"x": x})
    assert verdict(fn, {"x": x}) is True
    with Float64Everywhere():
        assert verdict(fn, {"x": x}) is False  # the mode answers dtype: the getter path
    torch.Tensor._ember_probe = property(lambda self: 1)  # type: ignore[attr-defined]
    try:
        assert verdict(fn, {"x": x}) is True  # a changed class: the getter path, same verdict
        assert verdict(fn, {"x": torch.randn(4)}) is False
    finally:
        del torch.Tensor._ember_probe  # type: ignore[attr-defined]
    assert verdict(fn, {"x": x}) is True


class _Sub(torch.Tensor):
    pass


def test_tensor_helper_and_subclasses() -> None:
    x = torch.randn(3)
    s = x.as_subclass(_Sub)
    fn = compiled([tguard("s", s)], {"s": s})
    assert verdict(fn, {"s": s}) is True
    assert verdict(fn, {"s": torch.randn(3).as_subclass(_Sub)}) is True
    assert verdict(fn, {"s": torch.randn(4).as_subclass(_Sub)}) is False
    assert verdict(fn, {"s": x}) is False
