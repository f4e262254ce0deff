"""A module's attribute reads served while the module is unchanged (ADR 0062).

The native check reads a module's parameters, buffers and submodules through its dicts
(``module_attr``/``module_item``) and its other attributes from its instance dict
(``module_dict_attr``: ``training``, hook dicts); after a call that passed, it records what
they gave and the state they gave it in (class and dict version tags), and serves the reads
from that record while the state is the same. Each test changes a module between calls in one way and
requires the native verdict to be the Python check's (the reference) and the record to be
used while nothing changed: a record that outlived a change is a silent wrong result.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch

import ember.guards
from ember.guards.check_fn import CheckFn
from ember.ir import Attr, Guard, GuardKind, GuardSet, Item, Local, Source, tensor_payload

pytestmark = pytest.mark.skipif(
    shutil.which(os.environ.get("CC", "gcc")) is None, reason="no C compiler for native guards"
)

#: where the record is used (``EMBER_MODULE_CACHE`` in ``native_prelude.c``)
RECORDS = sys.version_info < (3, 13)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "native-guards-cache"))
    monkeypatch.setenv("EMBER_NATIVE_GUARDS", "1")


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("scale", torch.ones(3))
        self.layers = torch.nn.ModuleList([torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)])


def weight_guards(source: Source, t: torch.Tensor, name: str) -> list[Guard]:
    """ember.dynamo's two guards on a weight (``weight_guards.py``)."""
    return [
        Guard(source, GuardKind.ID_MATCH, {"id": id(t), "repr": f"the tensor {name}", "weight": True}),
        Guard(source, GuardKind.TENSOR_MATCH, {**tensor_payload(t), "weight": True}),
    ]


def block_check(m: Block) -> CheckFn:
    root = Local("m")
    lin, layer1 = Attr(root, "lin"), Item(Attr(root, "layers"), 1)
    guards = [
        Guard(root, GuardKind.NN_MODULE, {"id": id(m), "type": "Block"}),
        Guard(lin, GuardKind.NN_MODULE, {"id": id(m.lin), "type": "Linear"}),
        Guard(layer1, GuardKind.NN_MODULE, {"id": id(m.layers[1]), "type": "Linear"}),
        Guard(Attr(lin, "training"), GuardKind.CONSTANT_MATCH, {"value": False}),
        *weight_guards(Attr(lin, "weight"), m.lin.weight, "lin.weight"),
        *weight_guards(Attr(lin, "bias"), m.lin.bias, "lin.bias"),
        *weight_guards(Attr(root, "scale"), m.scale, "scale"),
        *weight_guards(Attr(layer1, "weight"), m.layers[1].weight, "layers.1.weight"),
    ]
    fn = ember.guards.compile(GuardSet(guards), {"m": m}, {})
    assert fn.compile_native() is not None, fn.native_error
    return fn


def verdict(fn: CheckFn, m: Block, explained: bool = True) -> bool:
    L = {"m": m}
    py = fn.py_fn(L, {})
    assert fn.native_fn is not None
    nat = fn.native_fn(L, {})
    assert nat is py, f"native {nat}, Python {py}"
    if explained:
        assert (fn.explain(L, {}) is None) is py
    return bool(py)


def records(fn: CheckFn) -> list[tuple[int, int, int]]:
    assert fn.native_fn is not None
    return list(fn.native_fn.module_reads())


KEEP: list[Any] = []  # the replaced objects stay alive (a dead one fails every check at once)


def keep(x: Any) -> Any:
    KEEP.append(x)
    return x


def _shadow(m: Block) -> None:
    object.__setattr__(m.lin, "bias", torch.zeros(3))  # the instance dict now shadows _parameters


class Doubled(torch.nn.Linear):
    pass


class Redirected(torch.nn.Linear):
    """Reads its parameters from elsewhere: ``v._parameters`` is not the instance dict's."""

    @property  # type: ignore[override]
    def _parameters(self) -> dict[str, Any]:
        return {"weight": OTHER, "bias": OTHER}


OTHER = torch.nn.Parameter(torch.ones(3, 3))


CHANGES: dict[str, tuple[Callable[[Block], Any], bool]] = {
    # name: (the change, whether the guards still hold after it)
    "nothing": (lambda m: None, True),
    "weight replaced": (lambda m: setattr(m.lin, "weight", torch.nn.Parameter(keep(m.lin.weight).detach() * 1)), False),
    "_parameters written directly": (lambda m: m.lin._parameters.__setitem__(
        "weight", torch.nn.Parameter(keep(m.lin.weight).detach() * 1)), False),
    "register_parameter": (lambda m: (keep(m.lin._parameters.pop("bias")),
                                      m.lin.register_parameter("bias", torch.nn.Parameter(torch.zeros(3)))), False),
    "bias set to None": (lambda m: (keep(m.lin.bias), setattr(m.lin, "bias", None)), False),
    "weight .data, same layout": (lambda m: setattr(m.lin.weight, "data", torch.randn(3, 3)), True),
    "weight .data, transposed": (lambda m: setattr(m.lin.weight, "data", torch.randn(3, 3).t()), False),
    "weight .data, float64": (lambda m: setattr(m.lin.weight, "data", torch.randn(3, 3, dtype=torch.float64)), False),
    "requires_grad_": (lambda m: m.lin.weight.requires_grad_(False), False),
    "buffer re-registered": (lambda m: m.register_buffer("scale", torch.ones(3) + keep(m.scale) * 0), False),
    "buffer written in place": (lambda m: m.scale.add_(1), True),
    "submodule swapped": (lambda m: (keep(m.lin), setattr(m, "lin", torch.nn.Linear(3, 3))), False),
    "ModuleList item swapped": (lambda m: (keep(m.layers[1]), m.layers.__setitem__(1, torch.nn.Linear(3, 3))), False),
    "train mode": (lambda m: m.lin.train(), False),
    "eval again": (lambda m: m.lin.eval(), True),
    "instance attribute shadows a parameter": (lambda m: (keep(m.lin.bias), _shadow(m)), False),
    "unrelated attribute added": (lambda m: setattr(m.lin, "note", "x"), True),
    "unrelated parameter added": (lambda m: m.lin.register_parameter("extra", torch.nn.Parameter(torch.ones(1))), True),
    "class changed": (lambda m: setattr(m.lin, "__class__", Doubled), True),
    "class whose _parameters is a property": (lambda m: setattr(m.lin, "__class__", Redirected), False),
    "class attribute added": (lambda m: setattr(torch.nn.Linear, "_ember_test_attr", 1), True),
    "class property shadows an instance attribute": (
        lambda m: setattr(torch.nn.Linear, "training", property(lambda self: True)), False),
    "training flag written around __setattr__": (lambda m: m.lin.__dict__.__setitem__("training", True), False),
    "forward hook": (lambda m: m.lin.register_forward_hook(lambda *a: None), True),
    "module __dict__ replaced by a copy": (lambda m: setattr(m.lin, "__dict__", dict(m.lin.__dict__)), True),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_each_change_against_the_reference(change: str) -> None:
    torch.manual_seed(0)
    m = Block().eval()
    fn = block_check(m)
    for _ in range(3):
        assert verdict(fn, m)
    if RECORDS:
        # the first call records, the next ones are served from the record
        assert [r[0] for r in records(fn)] == [1, 1, 1, 1]  # m, m.lin, m.layers, m.layers[1]
        assert all(r[1] >= 1 for r in records(fn))
    apply, holds = CHANGES[change]
    try:
        apply(m)
        for _ in range(3):
            # explanations read ``m.lin.weight`` as Python does (``Module.__getattr__`` reads
            # ``__dict__['_parameters']``, not the property): they see no change there
            explained = change != "class whose _parameters is a property"
            assert verdict(fn, m, explained) is holds
    finally:
        for name in ("_ember_test_attr", "training"):
            if name in torch.nn.Linear.__dict__:
                delattr(torch.nn.Linear, name)


def test_record_after_a_change_that_holds() -> None:
    """A change the guards allow (``.data =`` of the same layout, an unrelated attribute)
    is recorded again, and the reads then give the objects of the new state."""
    m = Block().eval()
    fn = block_check(m)
    for _ in range(3):
        assert verdict(fn, m)
    m.lin.note = 1
    for _ in range(3):
        assert verdict(fn, m)
    if RECORDS:
        rows = records(fn)  # one module changed (m.lin): one miss, then recorded again
        assert [r[0] for r in rows] == [1] * 4 and sum(r[2] for r in rows) == 1
        assert min(r[1] for r in rows) >= 4
    old = m.lin.weight
    m.lin.weight = torch.nn.Parameter(old.detach().clone())
    assert not verdict(fn, m)
    m.lin.weight = old  # back: the guards hold again, and the record follows
    for _ in range(3):
        assert verdict(fn, m)


def test_python_code_between_reads_is_seen() -> None:
    """A part that runs Python code (a user ``__len__``) between two reads of one module and
    changes the module: the later read is not served from the record."""
    m = Block().eval()
    armed = [False]

    class Sneaky:
        def __len__(self) -> int:
            if armed[0]:
                m.lin.bias = torch.nn.Parameter(torch.zeros(4))
            return 1

    m.marker = Sneaky()
    root, lin = Local("m"), Attr(Local("m"), "lin")
    bias = m.lin.bias
    guards = [  # in cost order: the weight's identity, len(marker), the bias's layout
        weight_guards(Attr(lin, "weight"), m.lin.weight, "lin.weight")[0],
        Guard(Attr(root, "marker"), GuardKind.LENGTH_MATCH, {"length": 1}),
        weight_guards(Attr(lin, "bias"), bias, "lin.bias")[1],
    ]
    fn = ember.guards.compile(GuardSet(guards), {"m": m}, {})
    assert fn.compile_native() is not None, fn.native_error
    native = fn.native_fn
    assert native is not None
    for _ in range(3):
        assert native({"m": m}, {}) is True
    if RECORDS:
        assert records(fn)[0][0] == 1
    armed[0] = True
    assert native({"m": m}, {}) is False  # the bias read after __len__ ran is the new one
    assert m.lin.bias is not bias
    armed[0] = False
    assert fn.py_fn({"m": m}, {}) is False
