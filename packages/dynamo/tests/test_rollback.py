"""Rolling back a failed instruction: the trail, and splitting a frame right
before a call that had already changed a container."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from typing import Any

import pytest
import torch

import ember.dynamo as ed
from ember.dynamo.mutable import Box, Trail, TrailDict
from ember.dynamo.symbolic_convert import InstructionTranslator
from ember.dynamo.testing import CompileCounter


def test_trail_undoes_boxes_and_dicts_newest_first() -> None:
    trail = Trail()
    box: Box[tuple[int, ...]] = Box((1,))
    d: TrailDict[str, int] = TrailDict(trail, {"a": 1})
    mark = trail.mark()
    trail.set(box, (1, 2))
    trail.set(box, (1, 2, 3))
    d["a"] = 10
    d["b"] = 2
    del d["a"]
    assert d.pop("b") == 2
    d.setdefault("c", 3)
    assert box.value == (1, 2, 3) and d == {"c": 3}
    trail.undo(mark)
    assert box.value == (1,) and d == {"a": 1}


def test_trail_counts_only_observable_writes() -> None:
    trail = Trail()
    box = Box(0)
    trail.set(box, 1, observable=False)
    assert trail.writes == 0
    trail.set(box, 2)
    assert trail.writes == 1
    trail.undo(0)
    assert box.value == 0


def helper(lst: list[Any], d: dict[str, Any], x: torch.Tensor) -> torch.Tensor:
    lst.append(x * 2)
    d["seen"] = len(lst)
    print("side")  # a graph break after both changes
    return x + 1


def outer(x: torch.Tensor) -> tuple[Any, ...]:
    lst = [x.sin()]
    d = {"k": 1}
    y = helper(lst, d, x.cos())
    return lst, d, y * 3


def test_break_after_in_place_changes_splits_before_the_call_in_one_trace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traced: list[Any] = []
    run = InstructionTranslator.run

    def counting_run(self: InstructionTranslator) -> Any:
        traced.append(self.code)
        return run(self)

    monkeypatch.setattr(InstructionTranslator, "run", counting_run)
    ed.reset()
    cnt = CompileCounter()
    f = ed.compile(outer, backend=cnt)
    x = torch.randn(3)
    with redirect_stdout(io.StringIO()) as out:
        got = f(x)
    with redirect_stdout(io.StringIO()):
        want = outer(x)
    assert out.getvalue() == "side\n"
    assert len(got[0]) == len(want[0]) == 2
    for a, b in zip(got[0], want[0], strict=True):
        torch.testing.assert_close(a, b)
    assert got[1] == want[1] == {"k": 1, "seen": 2}
    torch.testing.assert_close(got[2], want[2])
    # rolled back in place: the frame is traced once (then its resume function once)
    assert traced.count(outer.__code__) == 1
    assert cnt.frame_count >= 2  # before the call, and helper's own frame (and the rest)
