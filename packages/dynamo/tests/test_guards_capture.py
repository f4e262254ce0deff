"""Guard invalidation at the capture level: every assumption a graph made is
checked on the next call, and a changed assumption recompiles instead of
reusing a stale graph."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounter

FACTOR = 2.0


def use_global(x):
    return x * FACTOR


def helper(x, s=2.0):
    return x * s


def use_helper(x):
    return helper(x)


def with_default(x, k=3):
    return x * k


def make_closure(s):
    def inner(x):
        return x * s

    return inner


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = 2.0

    def forward(self, x):
        y = self.lin(x) * self.scale
        if self.training:
            y = y + 1
        return y


@pytest.fixture
def cnt():
    ed.reset()
    return CompileCounter()


def compiled(fn, cnt):
    return ed.compile(fn, backend=cnt, fullgraph=True)


def test_shape_change_recompiles(cnt):
    f = compiled(lambda x: x.sum(0) * 2, cnt)
    x = torch.randn(3, 4)
    torch.testing.assert_close(f(x), x.sum(0) * 2)
    f(torch.randn(3, 4))
    assert cnt.frame_count == 1
    y = torch.randn(5, 2)
    torch.testing.assert_close(f(y), y.sum(0) * 2)
    assert cnt.frame_count == 2


def test_stride_change_recompiles(cnt):
    f = compiled(lambda x: x + 1, cnt)
    x = torch.randn(4, 3)
    f(x)
    xt = torch.randn(3, 4).t()
    torch.testing.assert_close(f(xt), xt + 1)
    assert cnt.frame_count == 2


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int64])
def test_dtype_change_recompiles(cnt, dtype):
    f = compiled(lambda x: (x * 2).sum(), cnt)
    f(torch.ones(4))
    x = torch.ones(4, dtype=dtype)
    out = f(x)
    assert out.dtype == (x * 2).sum().dtype
    assert cnt.frame_count == 2


def test_requires_grad_change_recompiles(cnt):
    f = compiled(lambda x: x * 3, cnt)
    f(torch.ones(2))
    x = torch.ones(2, requires_grad=True)
    out = f(x)
    assert out.requires_grad
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((2,), 3.0))
    assert cnt.frame_count == 2


def test_device_change_recompiles(cnt):
    f = compiled(lambda x: x.relu() + 1, cnt)
    f(torch.ones(3))
    out = f(torch.ones(3, device="meta"))
    assert out.device.type == "meta" and out.shape == (3,)
    assert cnt.frame_count == 2


def test_global_change_recompiles(cnt):
    global FACTOR
    FACTOR = 2.0
    f = compiled(use_global, cnt)
    x = torch.ones(2)
    torch.testing.assert_close(f(x), x * 2)
    FACTOR = 5.0
    try:
        torch.testing.assert_close(f(x), x * 5)
    finally:
        FACTOR = 2.0
    assert cnt.frame_count == 2


def test_inlined_default_change_recompiles(cnt):
    f = compiled(use_helper, cnt)
    x = torch.ones(2)
    torch.testing.assert_close(f(x), x * 2)
    old = helper.__defaults__
    helper.__defaults__ = (7.0,)
    try:
        torch.testing.assert_close(f(x), x * 7)
    finally:
        helper.__defaults__ = old
    assert cnt.frame_count == 2


def test_default_arg_change_recompiles(cnt):
    f = compiled(with_default, cnt)
    x = torch.ones(2)
    torch.testing.assert_close(f(x), x * 3)
    torch.testing.assert_close(f(x, 4), x * 4)
    assert cnt.frame_count == 2
    torch.testing.assert_close(f(x, k=3), x * 3)
    assert cnt.frame_count == 2  # same as the first entry


def test_closure_value_change_recompiles(cnt):
    x = torch.ones(2)
    f2 = compiled(make_closure(2.0), cnt)
    f5 = compiled(make_closure(5.0), cnt)
    torch.testing.assert_close(f2(x), x * 2)
    torch.testing.assert_close(f5(x), x * 5)
    torch.testing.assert_close(f2(x), x * 2)
    assert cnt.frame_count == 2


def test_nonlocal_rebinding_recompiles(cnt):
    s = 2.0

    def inner(x):
        return x * s

    f = compiled(inner, cnt)
    x = torch.ones(2)
    torch.testing.assert_close(f(x), x * 2)
    s = 4.0
    torch.testing.assert_close(f(x), x * 4)
    assert cnt.frame_count == 2


def test_module_attribute_change_recompiles(cnt):
    m = Scaled()
    f = compiled(m, cnt)
    x = torch.randn(3, 4)
    torch.testing.assert_close(f(x), m(x))
    m.scale = 3.0
    torch.testing.assert_close(f(x), m(x))
    assert cnt.frame_count == 2


def test_training_flag_change_recompiles(cnt):
    m = Scaled()
    f = compiled(m, cnt)
    x = torch.randn(3, 4)
    torch.testing.assert_close(f(x), m(x))
    m.eval()
    torch.testing.assert_close(f(x), m(x))
    assert cnt.frame_count == 2


def test_submodule_swap_recompiles(cnt):
    m = Scaled()
    f = compiled(m, cnt)
    x = torch.randn(3, 4)
    f(x)
    m.lin = nn.Linear(4, 4)
    torch.testing.assert_close(f(x), m(x))
    # the new submodule's frame binds to the stored frame: the captured graph, rebound
    # to the new weights, not a second backend call (ADR 0048)
    assert cnt.frame_count == 1
    m.lin = nn.Linear(4, 4, bias=False)  # another structure: captured again
    torch.testing.assert_close(f(x), m(x))
    assert cnt.frame_count == 2


def test_parameter_update_in_place_is_seen_without_recompile(cnt):
    m = Scaled()
    f = compiled(m, cnt)
    x = torch.randn(3, 4)
    f(x)
    with torch.no_grad():
        m.lin.weight.add_(1.0)
    torch.testing.assert_close(f(x), m(x))
    assert cnt.frame_count == 1


def test_grad_mode_change_recompiles(cnt):
    f = compiled(lambda x, w: x @ w, cnt)
    x, w = torch.randn(2, 3), torch.randn(3, 2, requires_grad=True)
    assert f(x, w).requires_grad
    with torch.no_grad():
        out = f(x, w)
    assert not out.requires_grad
    assert cnt.frame_count == 2


def test_python_int_argument_specializes(cnt):
    f = compiled(lambda x, n: x * n + n, cnt)
    x = torch.ones(2)
    torch.testing.assert_close(f(x, 2), x * 2 + 2)
    torch.testing.assert_close(f(x, 2), x * 2 + 2)
    assert cnt.frame_count == 1
    torch.testing.assert_close(f(x, 3), x * 3 + 3)
    assert cnt.frame_count == 2


def test_list_length_change_recompiles(cnt):
    f = compiled(lambda xs: sum(xs), cnt)
    a = [torch.ones(2), torch.ones(2)]
    torch.testing.assert_close(f(a), torch.full((2,), 2.0))
    torch.testing.assert_close(f([*a, torch.ones(2)]), torch.full((2,), 3.0))
    assert cnt.frame_count == 2


def test_dict_keys_change_recompiles(cnt):
    f = compiled(lambda d: d["a"] * 2 if "b" not in d else d["b"] + 0, cnt)
    x = torch.ones(2)
    torch.testing.assert_close(f({"a": x}), x * 2)
    torch.testing.assert_close(f({"a": x, "b": x * 5}), x * 5)
    assert cnt.frame_count == 2


def test_none_vs_tensor_argument_recompiles(cnt):
    def g(x, bias=None):
        return x * 1 if bias is None else x + bias

    f = compiled(g, cnt)
    x = torch.ones(2)
    torch.testing.assert_close(f(x), x)
    torch.testing.assert_close(f(x, x), x * 2)
    assert cnt.frame_count == 2


def test_guard_set_records_expected_kinds():
    """The GuardSet names what was assumed, in the guard IR."""
    import inspect
    import types

    from ember.dynamo.config import DynamoOptions
    from ember.dynamo.convert_frame import FrameState, convert_frame

    m = Scaled()

    def fwd(self, x):
        return self(x) * FACTOR

    state = FrameState(fwd.__code__, {"self": m, "x": torch.randn(2, 4)}, globals(), None, "fwd")
    cnt = CompileCounter()
    guarded = convert_frame(state, cnt, DynamoOptions(), None)  # type: ignore[arg-type]
    kinds = {(g.source.expr() if g.source else None, g.kind.value) for g in guarded.guard_set.guards}
    assert ("L['x']", "TENSOR_MATCH") in kinds
    assert ("L['self']", "NN_MODULE") in kinds
    assert ("L['self'].scale", "CONSTANT_MATCH") in kinds
    assert ("L['self'].training", "CONSTANT_MATCH") in kinds
    assert ("G['FACTOR']", "CONSTANT_MATCH") in kinds
    assert (None, "GLOBAL_STATE") in kinds
    fn = types.FunctionType(guarded.code, globals(), "fwd")
    x = torch.randn(2, 4)
    torch.testing.assert_close(fn(m, x), fwd(m, x))
    assert inspect.signature(fn) == inspect.signature(fwd)
    assert guarded.check_fn({"self": m, "x": x}, globals())
    assert not guarded.check_fn({"self": m, "x": torch.randn(3, 4)}, globals())


def test_autocast_state_change_recompiles(cnt):
    f = compiled(lambda x, w: x @ w, cnt)
    x, w = torch.randn(2, 3), torch.randn(3, 2)
    assert f(x, w).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert f(x, w).dtype == torch.bfloat16
    assert cnt.frame_count == 2


class Picks(nn.Module):
    """Reads container items by index: a named Sequential's and a ModuleList's."""

    def __init__(self):
        super().__init__()
        from collections import OrderedDict

        self.seq = nn.Sequential(OrderedDict(a=nn.Linear(4, 4), b=nn.Tanh(), c=nn.Linear(4, 4)))
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(self, x):
        return self.seq[2](self.seq[0](x)) + self.layers[1](x)


def test_container_items_are_guarded_through_modules_dicts():
    """An item a forward reads by index is guarded as ``_modules[key]`` (a dict lookup a
    native check does in C) instead of a call of the container's Python ``__getitem__``
    on every check; the Sequential's keys are pinned, since its ``[i]`` is its i-th value."""
    from ember.dynamo.config import DynamoOptions
    from ember.dynamo.convert_frame import FrameState, convert_frame

    m = Picks()

    def fwd(self, x):
        return self(x)

    state = FrameState(fwd.__code__, {"self": m, "x": torch.randn(2, 4)}, globals(), None, "fwd")
    guarded = convert_frame(state, CompileCounter(), DynamoOptions(), None)  # type: ignore[arg-type]
    sources = {g.source.expr() for g in guarded.guard_set.guards if g.source is not None}
    assert any("seq._modules['c']" in s for s in sources), sorted(sources)
    assert any("layers._modules['1']" in s for s in sources), sorted(sources)
    assert not any("seq[" in s or "layers[" in s for s in sources), sorted(sources)


@pytest.mark.parametrize("change", ["replace_item", "reorder", "delete_before", "modulelist_item"])
def test_container_item_changes_recompile(cnt, change):
    m = Picks()
    f = compiled(m, cnt)
    x = torch.randn(3, 4)
    torch.testing.assert_close(f(x), m(x))
    if change == "replace_item":
        m.seq[2] = nn.Linear(4, 4, bias=False)
    elif change == "reorder":  # same keys and modules, other positions: [0] is 'b', [2] 'a'
        m.seq._modules["a"] = m.seq._modules.pop("a")
    elif change == "delete_before":  # keys stay 'b', 'c'... but positions move
        del m.seq[1]
        m.seq.append(nn.Linear(4, 4))
    else:
        m.layers[1] = nn.Linear(4, 4, bias=False)
    torch.testing.assert_close(f(x), m(x))


class Features(nn.ModuleDict):
    """timm's FeatureDictNet: a ModuleDict subclass with plain attributes of its own."""

    def __init__(self):
        super().__init__({"stem": nn.Linear(4, 4), "head": nn.Linear(4, 4)})
        self.return_layers = {"stem": "s", "head": "h"}

    def forward(self, x):
        out = {}
        for name, module in self.items():
            x = module(x)
            if name in self.return_layers:
                out[self.return_layers[name]] = x
        return out


def test_plain_attribute_of_a_module_dict_subclass_is_an_attribute(cnt):
    """``self.return_layers`` of a ModuleDict subclass was guarded as the dict's item
    ``L['self']['return_layers']``, which does not exist: the guard failed to compile and
    the frame ran eagerly (timm's feature extractors, segmentation_models_pytorch's
    timm-universal encoders)."""
    m = Features()
    f = compiled(m, cnt)
    x = torch.randn(3, 4)
    got, want = f(x), m(x)
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k])
    assert cnt.frame_count == 1
    m.return_layers = {"head": "h"}  # a changed attribute recompiles
    assert f(x).keys() == {"h"}
