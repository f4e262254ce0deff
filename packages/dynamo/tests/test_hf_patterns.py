"""The Python patterns Hugging Face transformers wraps its models in, without
transformers (CI does not install it; see test_hf_capture.py for the real
thing): decorators reading ``func.__code__``, ``str(model.__class__)``,
``super().get`` on a ``dict`` subclass, ``Mapping``-style registries, a
break inside a call that already mutated a container, and a break at
``func(self, *args, **kwargs)`` inside a closure."""

from __future__ import annotations

import functools
from collections.abc import MutableMapping

import pytest
import torch

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def _reset():
    ed.reset()
    yield
    ed.reset()


def config_defaults(func):
    """transformers.utils.generic.merge_with_config_defaults, reduced."""

    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        for name in ("scale", "missing"):
            index = None
            if name in func.__code__.co_varnames:
                index = func.__code__.co_varnames.index(name) - 1
            if index is not None and len(args) > index:
                continue
            if kwargs.get(name) is None and hasattr(self, name):
                kwargs[name] = getattr(self, name)
        assert func.__name__ == "forward" and func.__qualname__.endswith("forward")
        return func(self, *args, **kwargs)

    return wrapper


class Registry(dict):
    def get(self, model):
        return super().get(str(model.__class__)) or {}


REGISTRY = Registry()


class Interface(MutableMapping):
    """transformers.utils.generic.GeneralInterface, reduced."""

    _global_mapping = {"double": lambda x: x * 2}

    def __init__(self):
        self._local_mapping = {}

    def __getitem__(self, key):
        if key in self._local_mapping:
            return self._local_mapping[key]
        return self._global_mapping[key]

    def __setitem__(self, key, value):
        self._local_mapping[key] = value

    def __delitem__(self, key):
        del self._local_mapping[key]

    def __iter__(self):
        return iter({**self._global_mapping, **self._local_mapping})

    def __len__(self):
        return len(self._global_mapping.keys() | self._local_mapping.keys())


FUNCS = Interface()


class Opaque:
    def __init__(self, value):
        self.value = value


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.scale = 3.0

    @config_defaults
    def forward(self, x, scale=None):
        flags = REGISTRY.get(self)
        kwargs = {"a": 1}
        kwargs.pop("a")
        y = self.lin(x) * scale
        if "double" in FUNCS and "nope" not in FUNCS:
            y = FUNCS["double"](y)
        if flags.get("plus"):
            y = y + 1
        return Opaque(y)  # a user object made in forward: rebuilt after the graph


def test_function_attributes_read_as_constants() -> None:
    def deco(fn):
        def wrapper(x):
            names = fn.__code__.co_varnames
            if "x" in names and fn.__name__ == "inner" and fn.__defaults__ == (2,):
                return fn(x) + len(fn.__module__)
            return fn(x)

        return wrapper

    @deco
    def inner(x, k=2):
        return x * k

    cnt = CompileCounter()
    f = ed.compile(inner, backend=cnt, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(f(x), x * 2 + len(__name__))
    torch.testing.assert_close(f(x), x * 2 + len(__name__))
    assert cnt.frame_count == 1


def test_function_name_is_guarded() -> None:
    def target(x):
        return x + 1

    def caller(x):
        return target(x) * len(target.__name__)

    cnt = CompileCounter()
    f = ed.compile(caller, backend=cnt, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(f(x), (x + 1) * 6)
    target.__name__ = "renamed_target"
    try:
        torch.testing.assert_close(f(x), (x + 1) * 14)
    finally:
        target.__name__ = "target"
    assert cnt.frame_count == 2


def test_str_of_class_and_dict_subclass_super_get() -> None:
    REGISTRY[str(Net)] = {"plus": True}
    try:
        m = Net().eval()
        x = torch.randn(2, 4)
        want = m(x).value
        cnt = CompileCounter()
        c = ed.compile(m, backend=cnt)
        torch.testing.assert_close(c(x).value, want)
        frames = cnt.frame_count
        torch.testing.assert_close(c(x).value, want)
        assert cnt.frame_count == frames  # no recompile
        assert cnt.op_count >= 3
    finally:
        REGISTRY.clear()


def test_hf_shaped_module_captures_the_tensor_work() -> None:
    m = Net().eval()
    x = torch.randn(2, 4)
    want = m(x).value
    info = ed.explain(m)(x)
    assert info.graph_count >= 1
    assert info.op_count >= 3
    assert info.graph_break_count == 0, info.break_reasons
    cnt = CompileCounter()
    c = ed.compile(m, backend=cnt, fullgraph=True)
    out = c(x)
    assert type(out) is Opaque
    torch.testing.assert_close(out.value, want)
    torch.testing.assert_close(c(x, scale=0.5).value, m(x, scale=0.5).value)


def test_break_inside_call_that_mutated_is_split_before_it() -> None:
    def callee(d, x):
        d.pop("k")
        y = x * 2
        return Opaque(y).value + 1  # fails after mutating `d`

    def outer(x):
        d = {"k": 1}
        x = x.sin()
        r = callee(d, x)
        return r.cos(), len(d)

    cnt = CompileCounter()
    f = ed.compile(outer, backend=cnt)
    x = torch.randn(3)
    got = f(x)
    want = outer(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1] == 0
    assert cnt.op_count >= 2  # sin before the call, and the callee's own graph


def test_torch_compiler_is_compiling_is_true_while_tracing() -> None:
    def f(x):
        if torch.compiler.is_compiling():
            return x + 1
        return x - 1

    cnt = CompileCounter()
    c = ed.compile(f, backend=cnt, fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(c(x), x + 1)
    torch.testing.assert_close(f(x), x - 1)  # eagerly: False
    assert cnt.frame_count == 1


def test_mapping_contains_missing_key_is_false() -> None:
    def f(x):
        return x * (2 if "double" in FUNCS else 3) + (1 if "nope" in FUNCS else 0)

    c = ed.compile(f, backend=CompileCounter(), fullgraph=True)
    x = torch.randn(3)
    torch.testing.assert_close(c(x), f(x))


class ClassInstantier(dict):
    """transformers.activations.ClassInstantier: each item read makes a new module."""

    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


class SiLUActivation(torch.nn.Module):
    """A module class outside torch.nn that adds only ``forward`` (transformers')."""

    def forward(self, input):
        return torch.nn.functional.silu(input) * 2


class CountingActivation(torch.nn.Module):
    made = 0

    def __init__(self):
        super().__init__()
        CountingActivation.made += 1  # a side effect each call of eager code has

    def forward(self, input):
        return input - 1


ACTS = ClassInstantier(
    silu=SiLUActivation, gelu=(torch.nn.GELU, {"approximate": "tanh"}), counting=CountingActivation
)


def test_dict_subclass_getitem_making_a_module_is_captured_and_guarded() -> None:
    """``ACT2FN["silu"](x)``: the item is read past the subclass's ``__getitem__`` and
    guarded where it is (``dict.__getitem__(G['ACTS'], 'silu')``); the module it makes
    is inlined. Changing an item after compiling recompiles, never a stale result."""

    def f(x):
        return ACTS["silu"](x) + ACTS["gelu"](x)

    saved = dict(ACTS)
    try:
        cnt = CompileCounter()
        c = ed.compile(f, backend=cnt, fullgraph=True)
        x = torch.randn(3, 4)
        torch.testing.assert_close(c(x), f(x))
        torch.testing.assert_close(c(x), f(x))
        assert cnt.frame_count == 1
        ACTS["silu"] = torch.nn.ReLU
        torch.testing.assert_close(c(x), f(x))
        assert cnt.frame_count == 2
        dict.__getitem__(ACTS, "gelu")[1]["approximate"] = "none"
        torch.testing.assert_close(c(x), f(x))
        assert cnt.frame_count == 3
        SiLUActivation.forward, old = (lambda self, input: input * 3), SiLUActivation.forward
        try:
            ACTS["silu"] = SiLUActivation
            torch.testing.assert_close(c(x), f(x))
        finally:
            SiLUActivation.forward = old
        torch.testing.assert_close(c(x), f(x))
    finally:
        dict.clear(ACTS)
        dict.update(ACTS, saved)
        saved["gelu"][1]["approximate"] = "tanh"


def test_module_with_its_own_init_made_in_the_frame_runs_as_eager() -> None:
    """A user ``__init__`` is code each eager call runs (here: a counter on the class), so
    its class is not made at trace time: the break names the line of the write, and the
    call runs eagerly, with eager's side effects."""

    def f(x):
        return ACTS["counting"](x) * 2

    x = torch.randn(3)
    with pytest.raises(Exception, match="CountingActivation.made"):
        ed.compile(f, backend=CompileCounter(), fullgraph=True)(x)
    ed.reset()
    c = ed.compile(f, backend=CompileCounter())
    before = CountingActivation.made
    torch.testing.assert_close(c(x), f(x))
    torch.testing.assert_close(c(x), f(x))
    assert CountingActivation.made == before + 4


def compiling():
    """transformers' is_torchdynamo_compiling(): a frame with no tensors."""
    return torch.compiler.is_compiling()


def width(mask):
    return mask.shape[-1]


def block(x, mask):
    return (x * mask).sin() + 1


def stack(x, mask=None):
    """LongT5's stack, reduced: under compilation the default mask is not made, and
    the traced code raises where eager does not (TorchDynamo raises the same)."""
    if mask is None and not compiling():
        mask = torch.ones_like(x)
    return width(mask) * block(x, mask)


def stack_op_first(x, mask=None):
    """The same, raising first in a tensor op (``x * None``: TypeError)."""
    if mask is None and not compiling():
        mask = torch.ones_like(x)
    return block(x, mask) * width(mask)


@pytest.mark.parametrize("fn", [stack, stack_op_first], ids=["attribute", "operator"])
def test_frame_that_raises_while_traced_runs_eagerly_and_its_callees_are_captured(fn) -> None:
    """The frame runs eagerly as a whole (a split would run the rest for real on the
    unset mask, and raise where eager does not; torch.compile raises on both), and the
    frames it calls with tensors are captured each on its own, as under TorchDynamo."""
    from ember.dynamo import frame_hook

    if frame_hook.load() is None:
        pytest.skip(f"no PEP 523 hook: {frame_hook.unavailable()}")
    cnt = CompileCounter()
    c = ed.compile(fn, backend=cnt)
    x = torch.randn(3, 4)
    torch.testing.assert_close(c(x), fn(x))
    assert cnt.frame_count == 1 and cnt.op_count >= 3  # block(); compiling() is not captured
    torch.testing.assert_close(c(x), fn(x))
    m = torch.rand(3, 4)
    torch.testing.assert_close(c(x, m), fn(x, m))  # the code stays eager; block()'s graph serves
    assert cnt.frame_count == 1
    with pytest.raises(Exception, match=r"\((AttributeError|TypeError)\)|raises TypeError"):
        ed.compile(fn, backend=CompileCounter(), fullgraph=True)(x)
