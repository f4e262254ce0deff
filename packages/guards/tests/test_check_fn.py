"""ember.guards: every GuardKind compiles, passes on the frame it describes,
fails on a changed frame, and explains the failure in plain words."""

from __future__ import annotations

import gc
import types
from typing import Any

import pytest
import torch

import ember.guards
from ember.guards import GuardBuilder, GuardCompileError
from ember.ir import (
    Attr,
    DictItem,
    Global,
    Guard,
    GuardKind,
    GuardSet,
    Item,
    Local,
    encode_value,
    global_state_payload,
    qualname,
    tensor_payload,
)


def check(guards: list[Guard], L: dict[str, Any], G: dict[str, Any] | None = None) -> ember.guards.CheckFn:
    gs = GuardSet(guards)
    gs.verify()
    fn = ember.guards.compile(gs, L, G or {})
    assert fn(L, G or {}) is True
    assert fn.explain(L, G or {}) is None
    return fn


def fails(fn: ember.guards.CheckFn, L: dict[str, Any], G: dict[str, Any] | None = None) -> str:
    assert fn(L, G or {}) is False
    reason = fn.explain(L, G or {})
    assert reason is not None
    return reason


def tensor_guard(name: str, t: torch.Tensor, dynamic: tuple[int, ...] = ()) -> Guard:
    return Guard(Local(name), GuardKind.TENSOR_MATCH, tensor_payload(t, dynamic))


def test_every_guard_kind_has_a_builder_method() -> None:
    for kind in GuardKind:
        assert callable(getattr(GuardBuilder, kind.value, None)), kind


# -- TENSOR_MATCH -------------------------------------------------------------------


def test_tensor_match_sizes() -> None:
    fn = check([tensor_guard("x", torch.randn(4))], {"x": torch.randn(4)})
    assert fails(fn, {"x": torch.randn(8)}) == "L['x'].size()[0] was 8, the graph assumed 4"


def test_tensor_match_dtype() -> None:
    fn = check([tensor_guard("b", torch.randn(3))], {"b": torch.randn(3)})
    reason = fails(fn, {"b": torch.randn(3, dtype=torch.float64)})
    assert reason == "L['b'].dtype was torch.float64, the graph assumed torch.float32"


def test_tensor_match_requires_grad() -> None:
    fn = check([tensor_guard("x", torch.randn(3))], {"x": torch.randn(3)})
    reason = fails(fn, {"x": torch.randn(3, requires_grad=True)})
    assert reason == "L['x'].requires_grad was True, the graph assumed False"


def test_tensor_match_device_meta() -> None:
    fn = check([tensor_guard("x", torch.randn(3))], {"x": torch.randn(3)})
    reason = fails(fn, {"x": torch.randn(3, device="meta")})
    assert reason == "L['x'].device was meta, the graph assumed cpu"


def test_tensor_match_ndim_and_strides() -> None:
    fn = check([tensor_guard("x", torch.randn(2, 3))], {"x": torch.randn(2, 3)})
    assert fails(fn, {"x": torch.randn(6)}) == "L['x'].dim() was 1, the graph assumed 2"
    reason = fails(fn, {"x": torch.randn(3, 2).t()})
    assert reason == "L['x'].stride()[0] was 1, the graph assumed 3"


def test_tensor_match_class() -> None:
    fn = check([tensor_guard("x", torch.randn(3))], {"x": torch.randn(3)})
    reason = fails(fn, {"x": torch.nn.Parameter(torch.randn(3))})
    assert reason == "L['x'] was a torch.nn.parameter.Parameter, the graph assumed torch.Tensor"
    assert fails(fn, {"x": 3}) == "L['x'] was a int, the graph assumed a tensor (torch.Tensor)"


def test_tensor_match_dispatch_keys() -> None:
    fn = check([tensor_guard("x", torch.randn(3))], {"x": torch.randn(3)})
    with torch.inference_mode():
        inf = torch.randn(3)
    reason = fails(fn, {"x": inf})
    assert reason.startswith("L['x'] dispatch keys were DispatchKeySet(CPU")
    assert "the graph assumed DispatchKeySet(CPU, ADInplaceOrView, AutogradCPU" in reason


def test_tensor_match_dynamic_dim_accepts_any_size() -> None:
    t = torch.randn(4, 3)
    fn = check([tensor_guard("x", t, dynamic=(0,))], {"x": t})
    assert fn({"x": torch.randn(9, 3)}, {}) is True
    assert fails(fn, {"x": torch.randn(9, 2)}) == "L['x'].size()[1] was 2, the graph assumed 3"


def test_missing_local_fails_without_raising() -> None:
    fn = check([tensor_guard("x", torch.randn(3))], {"x": torch.randn(3)})
    assert fails(fn, {}) == "L['x'] could not be read (KeyError: 'x')"


# -- Python values ------------------------------------------------------------------


def test_constant_match() -> None:
    g = Guard(Local("n"), GuardKind.CONSTANT_MATCH, {"value": encode_value(4)})
    fn = check([g], {"n": 4})
    assert fails(fn, {"n": 5}) == "L['n'] was 5, the graph assumed 4"
    assert fails(fn, {"n": 4.0}) == "L['n'] was 4.0 (float), the graph assumed 4 (int)"
    assert fails(fn, {"n": True}) == "L['n'] was True (bool), the graph assumed 4 (int)"


def test_constant_match_none_bool_tuple() -> None:
    g = [
        Guard(Local("a"), GuardKind.CONSTANT_MATCH, {"value": encode_value(None)}),
        Guard(Local("b"), GuardKind.CONSTANT_MATCH, {"value": encode_value(True)}),
        Guard(Local("c"), GuardKind.CONSTANT_MATCH, {"value": encode_value((1, "x"))}),
    ]
    fn = check(g, {"a": None, "b": True, "c": (1, "x")})
    assert fails(fn, {"a": 0, "b": True, "c": (1, "x")}) == "L['a'] was 0, the graph assumed None"
    assert fails(fn, {"a": None, "b": 1, "c": (1, "x")}) == "L['b'] was 1, the graph assumed True"
    assert fails(fn, {"a": None, "b": True, "c": (1, "y")}) == (
        "L['c'] was (1, 'y'), the graph assumed (1, 'x')"
    )


def test_equals_match_on_global_and_attribute() -> None:
    cfg = types.SimpleNamespace(scale=2.0)
    g = [
        Guard(Global("EPS"), GuardKind.EQUALS_MATCH, {"value": encode_value(1e-5)}),
        Guard(Attr(Local("cfg"), "scale"), GuardKind.EQUALS_MATCH, {"value": encode_value(2.0)}),
    ]
    fn = check(g, {"cfg": cfg}, {"EPS": 1e-5})
    assert fails(fn, {"cfg": cfg}, {"EPS": 1e-6}) == "G['EPS'] was 1e-06, the graph assumed 1e-05"
    cfg.scale = 3.0
    assert fails(fn, {"cfg": cfg}, {"EPS": 1e-5}) == "L['cfg'].scale was 3.0, the graph assumed 2.0"


def test_type_match() -> None:
    g = Guard(Local("n"), GuardKind.TYPE_MATCH, {"type": "int", "type_id": id(int)})
    fn = check([g], {"n": 3})
    assert fn({"n": 7}, {}) is True
    assert fails(fn, {"n": 3.0}) == "type(L['n']) was float, the graph assumed int"


def test_length_match_and_item() -> None:
    g = [
        Guard(Local("xs"), GuardKind.LENGTH_MATCH, {"length": 2}),
        Guard(Item(Local("xs"), 0), GuardKind.CONSTANT_MATCH, {"value": encode_value(1)}),
    ]
    fn = check(g, {"xs": [1, 2]})
    assert fails(fn, {"xs": [1, 2, 3]}) == "len(L['xs']) was 3, the graph assumed 2"
    assert fails(fn, {"xs": [5, 2]}) == "L['xs'][0] was 5, the graph assumed 1"


def test_dict_keys() -> None:
    g = Guard(Local("d"), GuardKind.DICT_KEYS, {"keys": [encode_value("a"), encode_value("b")]})
    fn = check([g], {"d": {"a": 1, "b": 2}})
    assert fails(fn, {"d": {"b": 2, "a": 1}}) == (
        "L['d'] had keys ['b', 'a'], the graph assumed ['a', 'b']"
    )


def test_not_none() -> None:
    fn = check([Guard(Local("m"), GuardKind.NOT_NONE, {})], {"m": 1})
    assert fails(fn, {"m": None}) == "L['m'] was None, the graph assumed it is not None"


# -- identities ---------------------------------------------------------------------


def test_id_match_and_function_match() -> None:
    g = [
        Guard(Global("torch"), GuardKind.ID_MATCH, {"id": id(torch), "repr": "<module 'torch'>"}),
        Guard(
            Attr(Global("torch"), "cos"),
            GuardKind.FUNCTION_MATCH,
            {"id": id(torch.cos), "qualname": "torch.cos"},
        ),
    ]
    fn = check(g, {}, {"torch": torch})
    fake = types.SimpleNamespace(cos=torch.sin)
    assert fails(fn, {}, {"torch": fake}).startswith("G['torch'] was a different object (namespace(")
    fake_torch = types.ModuleType("torch")
    fake_torch.cos = torch.sin  # type: ignore[attr-defined]
    assert fails(fn, {}, {"torch": fake_torch}).startswith("G['torch'] was a different object")


def test_nn_module_guard_and_attribute_change() -> None:
    mod = torch.nn.Linear(2, 2)
    g = [
        Guard(Local("self"), GuardKind.NN_MODULE, {"id": id(mod), "type": qualname(type(mod))}),
        Guard(Attr(Local("self"), "training"), GuardKind.CONSTANT_MATCH, {"value": True}),
    ]
    fn = check(g, {"self": mod})
    other = torch.nn.Linear(2, 2)
    assert fails(fn, {"self": other}) == (
        "L['self'] was a different module object (torch.nn.modules.linear.Linear), the graph "
        "assumed the torch.nn.modules.linear.Linear it was captured with"
    )
    mod.eval()
    assert fails(fn, {"self": mod}) == "L['self'].training was False, the graph assumed True"


def test_dead_object_never_matches_a_recycled_id() -> None:
    class Box:
        pass

    box = Box()
    g = Guard(Local("b"), GuardKind.ID_MATCH, {"id": id(box), "repr": "Box"})
    fn = check([g], {"b": box})
    del box
    gc.collect()
    replacement = Box()
    assert fn({"b": replacement}, {}) is False
    assert "no longer exists" in (fn.explain({"b": replacement}, {}) or "")


def test_ids_without_frame_compare_ids() -> None:
    g = Guard(Local("n"), GuardKind.TYPE_MATCH, {"type": "int", "type_id": id(int)})
    fn = ember.guards.compile(GuardSet([g]))
    assert "id(type(" in fn.code
    assert fn({"n": 1}, {}) is True and fn({"n": "1"}, {}) is False


# -- global state and shapes --------------------------------------------------------------


def test_global_state_grad_mode() -> None:
    fn = check([Guard(None, GuardKind.GLOBAL_STATE, global_state_payload())], {})
    with torch.no_grad():
        assert fails(fn, {}) == "grad mode was disabled, the graph assumed enabled"


def test_global_state_default_dtype() -> None:
    fn = check([Guard(None, GuardKind.GLOBAL_STATE, global_state_payload())], {})
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert fails(fn, {}) == "the default dtype was torch.float64, the graph assumed torch.float32"
    finally:
        torch.set_default_dtype(old)


def test_global_state_autocast_and_deterministic() -> None:
    fn = check([Guard(None, GuardKind.GLOBAL_STATE, global_state_payload())], {})
    with torch.autocast("cpu"):
        assert fails(fn, {}) == "autocast on cpu was enabled, the graph assumed disabled"
    # Toggling the real flag imports half of torch's compiler stack (seconds): describe
    # a graph captured with it on instead.
    payload = global_state_payload() | {"deterministic": True}
    assert not torch.are_deterministic_algorithms_enabled()
    det = ember.guards.compile(GuardSet([Guard(None, GuardKind.GLOBAL_STATE, payload)]))
    assert fails(det, {}) == "deterministic algorithms was disabled, the graph assumed enabled"


def test_shape_expr() -> None:
    x = torch.randn(4, 6)
    g = [
        tensor_guard("x", x, dynamic=(0, 1)),
        Guard(
            None,
            GuardKind.SHAPE_EXPR,
            {
                "expr": "Eq(Mod(s0*s1, 8), 0)",
                "symbols": {"s0": "L['x'].size()[0]", "s1": "L['x'].size()[1]"},
            },
        ),
    ]
    fn = check(g, {"x": x})
    assert fn({"x": torch.randn(2, 4)}, {}) is True
    reason = fails(fn, {"x": torch.randn(3, 3)})
    assert reason == (
        "L['x'].size()[0] was 3, L['x'].size()[1] was 3; "
        "the graph assumed Mod(L['x'].size()[0]*L['x'].size()[1], 8) == 0"
    )


def test_shape_relations_use_symbols_bound_by_shape_guards() -> None:
    x = torch.randn(4)
    bind = {"expr": "s0 >= 2", "symbols": {"s0": "L['x'].size()[0]"}}
    gs = GuardSet([Guard(None, GuardKind.SHAPE_EXPR, bind)], shape_relations=("Le(s0, 16)",))
    fn = ember.guards.compile(gs, {"x": x}, {})
    assert fn({"x": torch.randn(16)}, {}) is True
    assert fn({"x": torch.randn(17)}, {}) is False


def test_unbound_symbol_is_a_clear_error() -> None:
    gs = GuardSet([Guard(None, GuardKind.SHAPE_EXPR, {"expr": "Eq(s0, 4)"})])
    with pytest.raises(GuardCompileError, match="symbol 's0' is not bound to a source"):
        ember.guards.compile(gs)


def test_not_a_guard_set() -> None:
    with pytest.raises(GuardCompileError, match="expects an ember.ir.GuardSet, got list"):
        ember.guards.compile([])  # type: ignore[arg-type]


# -- generated code ----------------------------------------------------------------------


def test_cheapest_first_and_each_source_read_once() -> None:
    x = torch.randn(2)
    g = [
        tensor_guard("x", x),
        Guard(Local("n"), GuardKind.CONSTANT_MATCH, {"value": 3}),
        Guard(Local("x"), GuardKind.NOT_NONE, {}),
    ]
    fn = check(g, {"x": x, "n": 3})
    body = fn.code
    assert body.count("L['x']") == 1
    assert body.index("L['n']") < body.index("c1(") or "is not None" in body
    kinds = [p.guard.kind for p in fn.parts]
    assert kinds == [GuardKind.NOT_NONE, GuardKind.CONSTANT_MATCH, GuardKind.TENSOR_MATCH]


def test_explain_reports_first_failure_in_sorted_order() -> None:
    g = [
        tensor_guard("x", torch.randn(2)),
        Guard(Local("n"), GuardKind.CONSTANT_MATCH, {"value": 3}),
    ]
    fn = check(g, {"x": torch.randn(2), "n": 3})
    assert fails(fn, {"x": torch.randn(5), "n": 4}) == "L['n'] was 4, the graph assumed 3"


def test_nested_sources_share_reads() -> None:
    mod = torch.nn.Sequential(torch.nn.Linear(2, 2))
    fc = Item(Attr(Local("self"), "_modules"), "0")
    g = [
        Guard(fc, GuardKind.NN_MODULE, {"id": id(mod[0]), "type": qualname(type(mod[0]))}),
        Guard(Attr(fc, "weight"), GuardKind.TENSOR_MATCH, tensor_payload(mod[0].weight)),
        Guard(Attr(fc, "bias"), GuardKind.TENSOR_MATCH, tensor_payload(mod[0].bias)),
    ]
    fn = check(g, {"self": mod})
    assert fn.code.count("L['self']") == 1
    assert fn.code.count("['0']") == 1
    with torch.no_grad():
        mod[0].bias.requires_grad_(False)
    assert fails(fn, {"self": mod}) == "L['self']._modules['0'].bias.requires_grad was False, the graph assumed True"
    old = mod[0]
    mod[0] = torch.nn.Linear(2, 2)
    assert fails(fn, {"self": mod}).startswith("L['self']._modules['0'] was a different module object")
    del old
    gc.collect()
    assert fails(fn, {"self": mod}) == (
        "an object the graph was captured with (a module or function) no longer exists"
    )


def test_module_members_are_read_from_the_module_dicts() -> None:
    # submodules, parameters and ModuleList/ModuleDict items are read from the dict that
    # holds them (no Module.__getattr__ call per check), with the same value Python reads
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.ReLU()])
            self.heads = torch.nn.ModuleDict({"0": torch.nn.Linear(2, 3)})
            self.scale = torch.nn.Parameter(torch.ones(2))

    mod = Block()
    layer0 = Attr(Item(Attr(Local("self"), "layers"), 0), "training")
    head = Attr(Item(Attr(Local("self"), "heads"), "0"), "out_features")
    scale = Attr(Local("self"), "scale")
    g = [
        Guard(layer0, GuardKind.CONSTANT_MATCH, {"value": True}),
        Guard(head, GuardKind.CONSTANT_MATCH, {"value": 3}),
        Guard(
            scale, GuardKind.TYPE_MATCH,
            {"type": qualname(torch.nn.Parameter), "type_id": id(torch.nn.Parameter)},
        ),
    ]
    fn = check(g, {"self": mod})
    assert "._modules['layers']" in fn.code and "._modules['0']" in fn.code
    assert "._parameters['scale']" in fn.code
    mod.layers[0].eval()
    assert fails(fn, {"self": mod}) == "L['self'].layers[0].training was False, the graph assumed True"
    mod.layers[0].train()
    mod.layers.insert(0, torch.nn.Identity().eval())  # ModuleList renumbers: item 0 changed
    assert fn({"self": mod}, {}) is False
    del mod.layers[0]
    assert fn({"self": mod}, {}) is True
    # an instance attribute shadowing the submodule is what Python reads: so does the check
    object.__setattr__(mod, "layers", [types.SimpleNamespace(training=False)])
    assert fn({"self": mod}, {}) is False
    del mod.__dict__["layers"]
    assert fn({"self": mod}, {}) is True
    mod.heads["0"] = torch.nn.Linear(2, 4)
    assert fails(fn, {"self": mod}) == "L['self'].heads['0'].out_features was 4, the graph assumed 3"
    mod.heads["0"] = torch.nn.Linear(2, 3)
    del mod.scale
    mod.register_buffer("scale", torch.ones(2))  # moved to _buffers (and not a Parameter)
    assert fn({"self": mod}, {}) is False


def test_dict_item_reads_past_an_overridden_getitem() -> None:
    """``dict.__getitem__(G['acts'], 'silu')`` reads the object the dict holds; the class's
    own ``__getitem__`` (which makes a new module each call, as transformers' ACT2FN
    does) never runs in the check."""
    made: list[object] = []

    class Instantiating(dict):  # type: ignore[type-arg]
        def __getitem__(self, key: object) -> object:
            made.append(key)
            return dict.__getitem__(self, key)()

    acts = Instantiating(silu=torch.nn.SiLU, gelu=(torch.nn.GELU, {"approximate": "tanh"}))
    silu = DictItem(Global("acts"), "silu")
    approx = Item(Item(DictItem(Global("acts"), "gelu"), 1), "approximate")
    g = [
        Guard(silu, GuardKind.ID_MATCH, {"id": id(torch.nn.SiLU), "repr": "SiLU"}),
        Guard(approx, GuardKind.CONSTANT_MATCH, {"value": encode_value("tanh")}),
    ]
    fn = check(g, {}, {"acts": acts})
    assert "dict.__getitem__(" in fn.code and not made
    acts["silu"] = torch.nn.ReLU  # dict.__setitem__: the subclass does not override it
    assert fails(fn, {}, {"acts": acts}).startswith("dict.__getitem__(G['acts'], 'silu') was a different")
    acts["silu"] = torch.nn.SiLU
    dict.__getitem__(acts, "gelu")[1]["approximate"] = "none"
    assert fails(fn, {}, {"acts": acts}) == (
        "dict.__getitem__(G['acts'], 'gelu')[1]['approximate'] was 'none', the graph assumed 'tanh'"
    )
    assert not made
