"""Instances of user classes inside a captured frame: made there (``__init__``
inlined, ``__slots__``, dataclasses, ``dict`` subclasses shaped like
``transformers.utils.ModelOutput``), read and written, used through their
dunder methods, and rebuilt where they leave the frame (returned, kept
across a graph break), each compared with eager, with fullgraph=True."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest
import torch

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def _reset():
    ed.reset()
    yield
    ed.reset()


def compiled(fn: Any, **kw: Any) -> tuple[Any, CompileCounter]:
    cnt = CompileCounter()
    return ed.compile(fn, backend=cnt, fullgraph=kw.pop("fullgraph", True), **kw), cnt


class Vec:
    """Arithmetic dunders, a property, a classmethod, __eq__ and __len__."""

    def __init__(self, t: torch.Tensor, scale: float = 1.0) -> None:
        self.t = t
        self.scale = scale

    @property
    def value(self) -> torch.Tensor:
        return self.t * self.scale

    @classmethod
    def zeros_like(cls, other: Vec) -> Vec:
        return cls(torch.zeros_like(other.t))

    def __add__(self, other: Any) -> Vec:
        if isinstance(other, Vec):
            return Vec(self.value + other.value)
        return Vec(self.value + other)

    def __radd__(self, other: Any) -> Vec:
        return Vec(other + self.value)

    def __mul__(self, k: float) -> Vec:
        return Vec(self.t, self.scale * k)

    def __neg__(self) -> Vec:
        return Vec(-self.value)

    def __len__(self) -> int:
        return int(self.t.shape[0])

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.value[i]


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a: Any) -> None:
        self.a = a


class WithGetattr:
    def __init__(self) -> None:
        self.data = {"x": 2.0}

    def __getattr__(self, name: str) -> Any:
        return self.data[name]


@dataclasses.dataclass
class Pair:
    first: torch.Tensor
    second: torch.Tensor | None = None
    tag: str = "p"

    def __post_init__(self) -> None:
        if self.second is None:
            self.second = self.first * 2


@dataclasses.dataclass(frozen=True)
class Frozen:
    x: torch.Tensor
    k: int = 3


class Output(collections.OrderedDict):
    """transformers.utils.ModelOutput, reduced: fields set as items and
    attributes; indexing by name or position skips None fields."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        for k, v in kwargs.items():
            setattr(self, k, v)

    def __setattr__(self, name: str, value: Any) -> None:
        if value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(self[k] for k in self.keys())


class Layers(Sequence):
    """Iterated through __getitem__ + IndexError (collections.abc.Sequence)."""

    def __init__(self, items: list[torch.Tensor]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i: int) -> torch.Tensor:
        if i >= len(self._items):
            raise IndexError("out of range")
        return self._items[i]


def test_object_made_inside_with_dunders_and_properties() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        v = Vec(x, 2.0)
        w = v + 1.0  # __add__
        z = 3.0 + w  # __radd__
        u = -(z * 0.5)  # __mul__, __neg__
        zero = Vec.zeros_like(u)
        return u.value + zero.value + len(v) + v[0]

    c, cnt = compiled(f)
    x = torch.randn(4)
    torch.testing.assert_close(c(x), f(x))
    assert cnt.frame_count == 1


def test_object_returned_is_rebuilt_with_its_state() -> None:
    def f(x: torch.Tensor) -> Any:
        v = Vec(x.sin(), 2.0)
        v.extra = x.cos()
        return v

    c, _ = compiled(f)
    x = torch.randn(3)
    got, want = c(x), f(x)
    assert type(got) is Vec
    assert got.scale == 2.0
    torch.testing.assert_close(got.t, want.t)
    torch.testing.assert_close(got.extra, want.extra)


def test_one_object_reached_twice_is_one_object() -> None:
    def f(x: torch.Tensor) -> Any:
        v = Vec(x + 1)
        return v, [v], {"v": v}

    c, _ = compiled(f)
    a, b, d = c(torch.randn(2))
    assert a is b[0] is d["v"]


def test_slots_getattr_type_and_class_name() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        s = Slotted(x)
        s.b = x * 2
        g = WithGetattr()
        name = f"{s.__class__.__name__}-{type(g).__name__}"
        assert isinstance(s, Slotted) and not isinstance(g, Slotted)
        return s.a + s.b * g.x + len(name)

    c, _ = compiled(f)
    x = torch.randn(3)
    torch.testing.assert_close(c(x), f(x))


def test_dataclasses_post_init_frozen_fields() -> None:
    def f(x: torch.Tensor) -> Any:
        p = Pair(x)
        q = Frozen(x + 1)
        names = [fl.name for fl in dataclasses.fields(p)]
        assert dataclasses.is_dataclass(q)
        return p.first + p.second + q.x * q.k + len(names), p

    c, cnt = compiled(f)
    x = torch.randn(3)
    (got, p), (want, _) = c(x), f(x)
    torch.testing.assert_close(got, want)
    assert isinstance(p, Pair) and p.tag == "p"
    torch.testing.assert_close(p.second, x * 2)
    assert cnt.frame_count == 1


def test_dict_subclass_output_like_model_output() -> None:
    def f(x: torch.Tensor) -> Any:
        out = Output(logits=x * 2, loss=None, hidden=x + 1)
        first = out[0]
        by_name = out["hidden"]
        return out, first + by_name, len(out.to_tuple())

    c, cnt = compiled(f)
    x = torch.randn(3)
    (out, s, n), (want_out, want_s, want_n) = c(x), f(x)
    assert type(out) is Output and list(out.keys()) == list(want_out.keys())
    assert out.loss is None
    torch.testing.assert_close(out.logits, want_out.logits)
    torch.testing.assert_close(out["hidden"], want_out["hidden"])
    torch.testing.assert_close(s, want_s)
    assert n == want_n == 2
    assert cnt.frame_count == 1


def test_existing_dict_subclass_read_by_name_and_position() -> None:
    def f(out: Output) -> torch.Tensor:
        return out[0] * 2 + out["hidden"] + len(out.keys())

    c, cnt = compiled(f)
    x = torch.randn(3)
    o = Output(logits=x, hidden=x + 1)
    torch.testing.assert_close(c(o), f(o))
    torch.testing.assert_close(c(o), f(o))
    assert cnt.frame_count == 1


def test_object_live_across_a_graph_break() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        v = Vec(x.sin())
        out = Output(a=v.t)
        ed.graph_break()
        return v.value + out["a"]

    c, cnt = compiled(f, fullgraph=False)
    x = torch.randn(3)
    torch.testing.assert_close(c(x), f(x))
    assert cnt.frame_count == 2


def test_sequence_iteration_and_try_except_in_inlined_code() -> None:
    def lookup(d: dict[str, float], key: str) -> float:
        try:
            return d[key]
        except KeyError:
            return -1.0

    def f(x: torch.Tensor) -> torch.Tensor:
        total = x
        for t in Layers([x, x * 2, x * 3]):
            total = total + t
        return total * lookup({"a": 2.0}, "a") + lookup({}, "b")

    c, cnt = compiled(f)
    x = torch.randn(3)
    torch.testing.assert_close(c(x), f(x))
    assert cnt.frame_count == 1


def test_exception_not_caught_is_a_graph_break_naming_it() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        raise ValueError("bad input")

    c, _ = compiled(f)
    with pytest.raises(ed.Unsupported, match="raise ValueError"):
        c(torch.randn(2))


def test_sets_of_constants() -> None:
    def f(x: torch.Tensor, names: tuple[str, ...]) -> torch.Tensor:
        seen = {n for n in names}
        seen.add("z")
        both = seen & {"a", "z"}
        rest = set(names) - {"a"}
        return x * len(both) + x * len(rest) + ("b" in seen)

    c, _ = compiled(f)
    x = torch.randn(3)
    torch.testing.assert_close(c(x, ("a", "b", "a")), f(x, ("a", "b", "a")))


class _CountingSetattr:
    """A class whose ``__setattr__`` does work of its own before object's, as
    transformers' ``ModelOutput`` does (it mirrors each attribute into its items)."""

    def __init__(self) -> None:
        object.__setattr__(self, "writes", 0)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, "writes", self.writes + 1)
        super().__setattr__(name, value)


def test_a_write_through_a_custom_setattr_runs_it_once() -> None:
    # Capture traces the class's __setattr__ and records object's writes; replaying
    # them with STORE_ATTR ran the class's __setattr__ a second time (`writes` was 2;
    # ModelOutput recursed into itself under the frame hook).
    def f(o: _CountingSetattr, x: torch.Tensor) -> torch.Tensor:
        o.y = x + 1
        return x * 2

    want = _CountingSetattr()
    f(want, torch.ones(2))
    got = _CountingSetattr()
    fn, cnt = compiled(f)
    torch.testing.assert_close(fn(got, torch.ones(2)), torch.full((2,), 2.0))
    assert got.writes == want.writes == 1
    torch.testing.assert_close(got.y, want.y)
    assert cnt.frame_count == 1


class _LoggingDict(collections.OrderedDict):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        object.__setattr__(self, "log", log)

    def __setitem__(self, key: str, value: Any) -> None:
        self.log.append(key)
        super().__setitem__(key, value)  # OrderedDict's C method: a graph break


class _LoggingDictChild(_LoggingDict):
    pass


def test_super_method_kept_across_a_graph_break_is_the_base_method() -> None:
    # `super().__setitem__` found OrderedDict's C method; at the graph break it was
    # rebuilt as `self.__setitem__`, which is the class's own override: on Python 3.12+
    # the override ran twice (under the frame hook, forever: transformers' ModelOutput).
    log: list[str] = []
    d = _LoggingDictChild(log)
    fn = ed.compile(_LoggingDict.__setitem__, backend="eager")
    fn(d, "a", torch.ones(2))
    assert log == ["a"]
    assert list(d) == ["a"]
