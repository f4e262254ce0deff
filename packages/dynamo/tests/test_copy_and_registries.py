"""``copy.copy``/``copy.deepcopy`` of the values model code copies, and the
Python around them: ``hasattr``/``delattr`` on an object made in the frame
whose class has its own ``__getattribute__``/``__delattr__``, objects whose
attributes live in ``__slots__`` (``dataclasses.Field``), and dicts keyed by
classes (a registry of handlers per type). Each captured whole
(fullgraph=True), compared with eager, and re-checked after the copied or
registered value changes (the guards must see it).

This is the path of every transformers encoder-decoder called with
``use_cache=True``: ``DynamicCache(config=...)`` deep-copies a legacy config
and renames its keys through huggingface_hub's strict-dataclass validators.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
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


def compiled(fn: Any) -> tuple[Any, CompileCounter]:
    cnt = CompileCounter()
    return ed.compile(fn, backend=cnt, fullgraph=True), cnt


class Settings:
    """A plain configuration object (as a model's config is)."""

    def __init__(self) -> None:
        self.scale = 2
        self.names = ["a", "b"]
        self.extra = {"shift": 3}


def test_deepcopy_of_a_guarded_object_is_a_new_object_with_copied_attributes() -> None:
    settings = Settings()

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, Settings]:
        mine = copy.deepcopy(settings)
        mine.scale = 5
        mine.names.append("c")
        mine.extra["shift"] = 1
        return x * mine.scale + len(mine.names) + settings.scale + mine.extra["shift"], mine

    c, cnt = compiled(fn)
    x = torch.ones(2)
    out, mine = c(x)
    torch.testing.assert_close(out, x * 5 + 3 + 2 + 1)
    # the copy left the frame as a real object; the original is untouched
    assert type(mine) is Settings and mine.names == ["a", "b", "c"] and mine.extra == {"shift": 1}
    assert settings.scale == 2 and settings.names == ["a", "b"] and settings.extra == {"shift": 3}
    assert mine.names is not settings.names
    settings.scale = 7  # the original's attribute is guarded through the copy
    torch.testing.assert_close(c(x)[0], fn(x)[0])
    assert cnt.frame_count == 2


def test_copy_copy_shares_the_attribute_values() -> None:
    settings = Settings()

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, Settings]:
        mine = copy.copy(settings)
        mine.scale = 4
        return x * mine.scale * len(mine.names), mine

    c, _ = compiled(fn)
    out, mine = c(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 8.0))
    assert mine.names is settings.names and mine.scale == 4 and settings.scale == 2


def test_deepcopy_keeps_sharing_inside_the_copied_structure() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, list[Any]]:
        inner = [1, 2]
        both = copy.deepcopy([inner, inner, (x.shape[0], "k")])
        both[0].append(3)  # one list, copied once: both entries see it
        return x + len(both[1]), both

    c, _ = compiled(fn)
    out, both = c(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 4.0))
    assert both[0] is both[1] and both[0] == [1, 2, 3] and both[2] == (2, "k")


def test_deepcopy_of_a_dict_of_constants_read_from_an_object() -> None:
    settings = Settings()

    def fn(x: torch.Tensor) -> torch.Tensor:
        state = copy.deepcopy(settings.__dict__)
        state["scale"] += 10
        return x * state["scale"] + settings.scale

    c, _ = compiled(fn)
    torch.testing.assert_close(c(torch.ones(2)), fn(torch.ones(2)))
    assert settings.scale == 2


class OwnCopy:
    def __init__(self) -> None:
        self.k = 3

    def __deepcopy__(self, memo: dict[int, Any]) -> OwnCopy:
        made = OwnCopy()
        made.k = 100
        return made


def test_a_class_with_its_own_deepcopy_breaks_with_the_reason_and_runs_eagerly() -> None:
    obj = OwnCopy()

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * copy.deepcopy(obj).k

    explained = ed.explain(fn)(torch.ones(2))
    assert explained.graph_break_count >= 1
    assert any("__deepcopy__" in str(b.reason) for b in explained.break_reasons)
    torch.testing.assert_close(ed.compile(fn, backend="eager")(torch.ones(2)), torch.full((2,), 100.0))


def test_deepcopy_of_a_tensor_breaks_and_stays_correct() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return copy.deepcopy(x) + 1

    explained = ed.explain(fn)(torch.ones(2))
    assert explained.graph_break_count >= 1
    torch.testing.assert_close(ed.compile(fn, backend="eager")(torch.ones(2)), torch.full((2,), 2.0))


class Aliased:
    """A config-like class: reads and writes go through an alias table."""

    aliases: typing.ClassVar[dict[str, str]] = {"width": "hidden"}

    def __init__(self) -> None:
        self.hidden = 4
        self.encoder_depth = 2

    def __getattribute__(self, key: str) -> Any:
        if key != "aliases" and key in super().__getattribute__("aliases"):
            key = super().__getattribute__("aliases")[key]
        return super().__getattribute__(key)

    def __delattr__(self, key: str) -> None:
        super().__delattr__(key)


def test_hasattr_and_delattr_on_a_copy_with_python_attribute_hooks() -> None:
    cfg = Aliased()

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, Aliased]:
        mine = copy.deepcopy(cfg)
        for key in list(mine.__dict__):
            if key.startswith("encoder_"):
                value = getattr(mine, key)
                delattr(mine, key)
                setattr(mine, key[len("encoder_"):], value)
        present = hasattr(mine, "width"), hasattr(mine, "missing"), hasattr(mine, "encoder_depth")
        return x * mine.width * mine.depth + sum(present), mine

    c, _ = compiled(fn)
    out, mine = c(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 9.0))
    assert mine.depth == 2 and not hasattr(mine, "encoder_depth") and cfg.encoder_depth == 2


def test_slotted_objects_are_read_through_their_slots() -> None:
    @dataclasses.dataclass
    class Spec:
        size: int = 3

    field = dataclasses.fields(Spec)[0]  # a dataclasses.Field: attributes in __slots__

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * field.default + len(field.name)

    c, cnt = compiled(fn)
    torch.testing.assert_close(c(torch.ones(2)), fn(torch.ones(2)))
    field.default = 5  # type: ignore[misc]
    torch.testing.assert_close(c(torch.ones(2)), fn(torch.ones(2)))
    assert cnt.frame_count == 2


def _as_int(v: Any) -> int:
    return int(v) * 2


def _as_float(v: Any) -> float:
    return float(v) + 0.5


HANDLERS: dict[Any, Any] = {int: _as_int, float: _as_float, typing.Union: None, "name": "x"}


def test_a_dict_keyed_by_classes_is_read_and_guarded_by_position() -> None:
    def fn(x: torch.Tensor, kind: type) -> torch.Tensor:
        return x * HANDLERS.get(kind)(3) + len(HANDLERS)

    c, cnt = compiled(fn)
    x = torch.ones(2)
    saved = dict(HANDLERS)
    try:
        for kind in (int, float):
            torch.testing.assert_close(c(x, kind), fn(x, kind))
        assert cnt.frame_count == 2
        HANDLERS[int] = _as_float  # a value replaced: its guard fails
        torch.testing.assert_close(c(x, int), fn(x, int))
        assert cnt.frame_count == 3
        del HANDLERS[typing.Union]  # a key removed: the length and positions change
        torch.testing.assert_close(c(x, int), fn(x, int))
        assert cnt.frame_count == 4
        HANDLERS.clear()
        HANDLERS.update({float: _as_float, int: _as_int, typing.Union: None, "name": "x"})
        torch.testing.assert_close(c(x, int), fn(x, int))  # the same keys, another order
        assert cnt.frame_count == 5
    finally:
        HANDLERS.clear()
        HANDLERS.update(saved)


SUPPORTED = {"relu", "gelu"}
FROZEN_NAMES = frozenset({"a", "b"})


def test_a_module_level_set_is_read_and_guarded_by_value() -> None:
    def fn(x: torch.Tensor, kind: str) -> tuple[torch.Tensor, set[str]]:
        hit = kind in SUPPORTED and "a" in FROZEN_NAMES
        return (x + len(SUPPORTED) if hit else x - 1), SUPPORTED

    c, cnt = compiled(fn)
    x = torch.ones(2)
    try:
        out, same = c(x, "relu")
        torch.testing.assert_close(out, fn(x, "relu")[0])
        assert same is SUPPORTED  # the set itself leaves the frame, not a copy
        assert cnt.frame_count == 1
        SUPPORTED.add("tanh")  # its contents are guarded
        torch.testing.assert_close(c(x, "relu")[0], fn(x, "relu")[0])
        assert cnt.frame_count == 2
        torch.testing.assert_close(c(x, "tanh")[0], fn(x, "tanh")[0])
    finally:
        SUPPORTED.discard("tanh")


def test_changing_a_set_read_from_the_frame_breaks_and_stays_correct() -> None:
    seen = {"a"}

    def fn(x: torch.Tensor) -> torch.Tensor:
        seen.add("b")
        return x * len(seen)

    explained = ed.explain(fn)(torch.ones(2))
    assert any("changing the set" in str(b.reason) for b in explained.break_reasons)
    seen.discard("b")
    torch.testing.assert_close(ed.compile(fn, backend="eager")(torch.ones(2)), torch.full((2,), 2.0))
    assert seen == {"a", "b"}


class Backend(str, __import__("enum").Enum):
    NATIVE = "native"
    FLASH = "flash"


#: diffusers' attention registry (enum keys, set values) and unsupported dtypes per device
ARG_NAMES: dict[Backend, set[str]] = {Backend.NATIVE: {"scale", "is_causal"}, Backend.FLASH: {"scale"}}
UNSUPPORTED: dict[torch.dtype, tuple[str, ...]] = {torch.float64: ("mps",), torch.bfloat16: ()}


def test_dicts_keyed_by_enum_members_and_dtypes() -> None:
    def fn(x: torch.Tensor, backend: Backend) -> torch.Tensor:
        kwargs = {k: v for k, v in {"scale": 2.0, "dropout": 0.1}.items() if k in ARG_NAMES[backend]}
        bad = UNSUPPORTED.get(x.dtype, ())
        return x * kwargs.get("scale", 1.0) + len(bad)

    c, cnt = compiled(fn)
    for dtype in (torch.float32, torch.float64):
        x = torch.ones(2, dtype=dtype)
        torch.testing.assert_close(c(x, Backend.NATIVE), fn(x, Backend.NATIVE))
    ARG_NAMES[Backend.NATIVE].discard("scale")  # a value's contents are guarded
    try:
        x = torch.ones(2)
        torch.testing.assert_close(c(x, Backend.NATIVE), fn(x, Backend.NATIVE))
    finally:
        ARG_NAMES[Backend.NATIVE].add("scale")


class Holder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    @property
    def dtype(self) -> torch.dtype:  # diffusers' ModelMixin.dtype
        for _, p in self.named_parameters():
            if p.is_floating_point():
                return p.dtype
        return torch.float32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        names = [n for n, _ in self.named_parameters(prefix="m")]
        n_buffers = len(list(self.buffers())) + len(list(self.named_buffers(recurse=False)))
        return self.lin(x.to(self.dtype)) * len(names) + n_buffers


def test_named_parameters_and_buffers_in_forward() -> None:
    m = Holder()
    c, cnt = compiled(m)
    x = torch.randn(2, 3, dtype=torch.float64)
    torch.testing.assert_close(c(x), m(x))
    m.lin.bias = None  # which parameters there are is guarded
    torch.testing.assert_close(c(x), m(x))
    assert cnt.frame_count == 2
