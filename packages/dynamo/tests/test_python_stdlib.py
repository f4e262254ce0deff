"""The builtins and standard library real model code uses, captured whole
(fullgraph=True) and compared with eager; TorchDynamo's own 2022 test
functions that once failed or crashed; generators; ``super()`` in its forms;
stateless modules made inside ``forward``; decorated functions."""

from __future__ import annotations

import functools
import inspect
import itertools
import logging
import math
import operator
import os
import typing
from typing import Any

import pytest
import torch
from torch import nn

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounter

logger = logging.getLogger("ember.tests.stdlib")


@pytest.fixture(autouse=True)
def _reset():
    ed.reset()
    yield
    ed.reset()


def check(fn: Any, *args: Any, graphs: int = 1) -> CompileCounter:
    """``fn`` compiled with fullgraph=True gives eager's result, twice, in ``graphs`` graphs."""
    cnt = CompileCounter()
    c = ed.compile(fn, backend=cnt, fullgraph=True)
    for _ in range(2):
        torch.testing.assert_close(c(*args), fn(*args))
    assert cnt.frame_count == graphs, cnt.frame_count
    return cnt


# -- TorchDynamo's 2022 test functions -------------------------------------------------


def test_module_made_inside_the_function() -> None:
    check(lambda x: nn.Softmax(dim=-1)(x) + nn.ReLU()(x), torch.randn(3, 4))


def test_sum_of_map_over_a_lambda() -> None:
    check(lambda a, b: sum(map(lambda t: t * 2, [a, b])), torch.randn(3), torch.randn(3))


def test_reduce_with_operator_add() -> None:
    check(lambda a, b, c: functools.reduce(operator.add, [a, b, c]), *torch.randn(3, 4))


def test_islice_of_chain() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        items = list(itertools.islice(itertools.chain([a, b], [a * 2, b * 3]), 1, 3))
        return items[0] + items[1]

    check(f, torch.randn(3), torch.randn(3))


class WithParams(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = next(self.parameters())
        return x.to(p.dtype) @ p + next(iter(self.lin.parameters())).sum()


def test_next_of_parameters() -> None:
    check(WithParams(), torch.randn(2, 3))


class Base(nn.Module):
    @classmethod
    def scale(cls, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def helper(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


class Child(Base):
    @classmethod
    def scale(cls, x: torch.Tensor) -> torch.Tensor:
        return super().scale(x) + 1

    def helper(self, x: torch.Tensor) -> torch.Tensor:
        return super().helper(x) * super(Child, self).helper(x)  # noqa: UP008

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale(x) + self.helper(x) + Child.scale(x)


def test_super_in_every_form() -> None:
    check(Child(), torch.randn(3))


class Meters:
    def __init__(self, v: torch.Tensor) -> None:
        self.v = v

    def __add__(self, other: Meters) -> Meters:
        return Meters(self.v + other.v)

    def __mul__(self, k: float) -> Meters:
        return Meters(self.v * k)

    def __rmul__(self, k: float) -> Meters:
        return Meters(self.v * k)


def test_user_class_with_arithmetic_dunders() -> None:
    check(lambda x: (2.0 * (Meters(x) + Meters(x * 3)) * 0.5).v, torch.randn(3))


def test_class_name_in_an_fstring() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        text = f"{x.__class__.__name__}:{type(x).__name__}"
        return x * len(text)

    check(f, torch.randn(3))


def test_ntuple_from_torch() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        three = nn.modules.utils._ntuple(3)(3)
        pair = nn.modules.utils._pair((1, 2))
        return x * sum(three) + pair[1]

    check(f, torch.randn(3))


# -- the four internal errors -----------------------------------------------------------


def test_tuple_plus_equals() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        t = (a,)
        t += (b,)
        n = 0
        n += 2
        x, y = t
        return x + y * n

    check(f, torch.randn(3), torch.randn(3))


def test_jit_annotate_with_typing() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        out = torch.jit.annotate(typing.List[torch.Tensor], [])  # noqa: UP006
        out.append(x + 1)
        opt = typing.cast(typing.Optional[torch.Tensor], out[0])  # noqa: UP045
        return opt * 2

    check(f, torch.randn(3))


class DigitKeys(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.d = nn.ModuleDict({"0": nn.Linear(3, 3), "a": nn.ReLU()})
        self.add_module("1", nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.d["a"](self.d["0"](x)) + getattr(self, "1")(x)


def test_module_dict_with_a_digit_key() -> None:
    check(DigitKeys(), torch.randn(2, 3))


class ShadowBase(nn.Module):
    def linear(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0


class Shadowing(ShadowBase):
    """TorchDynamo's ModuleAttributePrecedence: class methods named like
    submodules win; instance attributes win over class methods."""

    def __init__(self) -> None:
        super().__init__()
        self.activation = nn.ReLU()
        self.linear = nn.Linear(4, 4)
        self.initializer = torch.ones(4, 4)
        self.scale = 0.5

    def activation(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x * 1.2

    def initializer(self) -> torch.Tensor:  # type: ignore[override]
        return torch.zeros(4, 4)

    def scale(self) -> float:  # type: ignore[override]
        return 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.linear(self.initializer + x)) * self.scale


def test_attribute_precedence_over_submodules() -> None:
    check(Shadowing(), torch.randn(4, 4))


# -- builtins and the standard library ------------------------------------------------------


def test_builtins_over_python_values() -> None:
    def f(x: torch.Tensor, sizes: list[int]) -> torch.Tensor:
        pairs = sorted(zip(sizes, range(len(sizes))), key=lambda p: -p[0])
        big = max(sizes, key=lambda s: s % 5)
        small = min((s, i) for i, s in enumerate(reversed(sizes)))
        evens = list(filter(lambda s: s % 2 == 0, sizes))
        ok = any(s > 3 for s in sizes) and all(s > 0 for s in sizes)
        total = sum(s for s in sizes) + math.floor(math.sqrt(16)) + math.pi
        return x * pairs[0][0] + big + small[0] + len(evens) + ok + total

    check(f, torch.randn(3), [3, 8, 1, 6])


def test_itertools_and_operator() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        grid = list(itertools.product([1, 2], [x, x * 2]))
        running = list(itertools.accumulate([1, 2, 3]))
        fours = list(itertools.repeat(x, 2))
        counted = list(zip(itertools.count(5), [x, x]))
        get = operator.itemgetter(1)
        return get(grid[3]) + running[-1] + fours[1] + counted[1][0] + operator.mul(x, 2)

    check(f, torch.randn(3))


def test_partial_signature_and_wraps() -> None:
    def scaled(x: torch.Tensor, k: float, shift: float = 0.0) -> torch.Tensor:
        return x * k + shift

    def f(x: torch.Tensor) -> torch.Tensor:
        half = functools.partial(scaled, k=0.5)
        n = len(inspect.signature(half).parameters)

        @functools.wraps(scaled)
        def wrapper(t: torch.Tensor) -> torch.Tensor:
            return half(t, shift=1.0)

        return wrapper(x) * n + len(wrapper.__name__)

    check(f, torch.randn(3))


def test_generators_and_yield_from() -> None:
    def squares(xs: list[torch.Tensor]) -> Any:
        for x in xs:
            yield x * x
        return "done"

    def both(xs: list[torch.Tensor]) -> Any:
        result = yield from squares(xs)
        yield len(result)

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        items = list(both([a, b]))
        first = next(iter(squares([a])))
        return items[0] + items[1] + items[2] + first

    check(f, torch.randn(3), torch.randn(3))


class RotaryLike(nn.Module):
    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class UsesRotary(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rot = RotaryLike()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r = self.rot(x)
        return self.lin(x) + r, r


def test_no_grad_decorator_on_a_forward() -> None:
    m = UsesRotary()
    cnt = CompileCounter()
    c = ed.compile(m, backend=cnt, fullgraph=True)
    x = torch.randn(2, 3, requires_grad=True)
    out, r = c(x)
    want_out, want_r = m(x)
    torch.testing.assert_close(out, want_out)
    assert not r.requires_grad and out.requires_grad
    assert cnt.frame_count == 1


def test_environment_reads_and_logging_calls(caplog: pytest.LogCaptureFixture) -> None:
    os.environ["EMBER_TEST_FLAG"] = "1"

    def f(x: torch.Tensor) -> torch.Tensor:
        if os.environ.get("EMBER_TEST_FLAG", "0") == "1":
            x = x + 1
        logger.warning("traced %s", "warning")
        return x * 2

    with caplog.at_level(logging.WARNING, logger=logger.name):
        check(f, torch.randn(3))
    assert sum("traced warning" in r.getMessage() for r in caplog.records) == 4  # 2 eager, 2 compiled
    del os.environ["EMBER_TEST_FLAG"]


class LossInForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss_fct = nn.CrossEntropyLoss()  # a new module on every call
        return loss_fct(self.lin(x), labels)


def test_module_made_per_call_does_not_recompile() -> None:
    m = LossInForward()
    cnt = CompileCounter()
    c = ed.compile(m, backend=cnt, fullgraph=True)
    for _ in range(4):
        x, y = torch.randn(5, 4), torch.randint(0, 3, (5,))
        torch.testing.assert_close(c(x, y), m(x, y))
    assert cnt.frame_count == 1


def test_an_ordered_dict_made_in_the_frame_is_returned_as_one() -> None:
    """torchvision's ``IntermediateLayerGetter`` (segmentation models) returns the
    ``OrderedDict`` it filled: rebuilt after the graph, same type and order."""
    import collections

    def fn(x: torch.Tensor) -> collections.OrderedDict[str, torch.Tensor]:
        out: collections.OrderedDict[str, torch.Tensor] = collections.OrderedDict()
        out["out"] = x.relu()
        out["aux"] = x * 2
        out.move_to_end("out")
        return out

    cnt = CompileCounter()
    got = ed.compile(fn, backend=cnt, fullgraph=True)(torch.randn(3))
    assert type(got) is collections.OrderedDict and list(got) == ["aux", "out"]
    assert cnt.frame_count == 1


def test_ordered_dict_reordering_methods() -> None:
    import collections

    def fn(x: torch.Tensor) -> tuple[Any, ...]:
        d = collections.OrderedDict(a=1, b=2, c=3)
        d.move_to_end("a")
        d.move_to_end("c", last=False)
        first = d.popitem(last=False)
        newest = d.popitem()
        plain = {"p": 1, "q": 2}
        return x + len(d), tuple(d), first, newest, plain.popitem(), d.copy()

    x = torch.randn(2)
    got, want = ed.compile(fn, backend="eager", fullgraph=True)(x), fn(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[1:] == want[1:] and type(got[-1]) is collections.OrderedDict
