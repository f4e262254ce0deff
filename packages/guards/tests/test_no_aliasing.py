"""The ``NO_ALIASING`` guard (ADR 0062): a graph that writes some of its inputs in place
holds only while none of those shares memory with another input. The native check must give
the Python reference's verdict on every pattern, with the tensor helper's direct read of the
storage pointer and without it."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest
import torch

import ember.guards
from ember.guards import native
from ember.guards.builder import no_written_alias
from ember.ir import FormatError, Guard, GuardKind, GuardSet

pytestmark = pytest.mark.skipif(
    shutil.which(os.environ.get("CC", "gcc")) is None, reason="no C compiler for native guards"
)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "native-guards-cache"))
    monkeypatch.setenv("EMBER_NATIVE_GUARDS", "1")


def guard(names: list[str], written: list[int]) -> Guard:
    return Guard(None, GuardKind.NO_ALIASING, {"sources": [f"L[{n!r}]" for n in names], "written": written})


def both(names: list[str], written: list[int], values: list[Any], helper: bool) -> bool:
    L = dict(zip(names, values, strict=True))
    fn = ember.guards.compile(GuardSet([guard(names, written)]), L, {})
    if helper:
        assert native.tensor_helper(wait=True) is not None, native.tensor_helper_error()
        assert fn.compile_native() is not None, fn.native_error
    else:
        source = native.generate_c(fn.parts, fn._builder, None, None)  # no direct reads
        fn.native_fn = native.build(source, None, None)
    py = fn.py_fn(L, {})
    nat = fn.native_fn(L, {})  # type: ignore[misc]
    assert nat is py, f"native {nat}, Python {py}"
    assert py is no_written_alias(tuple(written), *values)
    assert (fn.explain(L, {}) is None) is py
    return bool(py)


def cases() -> list[tuple[str, list[Any], list[int], bool]]:
    x = torch.randn(6)
    y = torch.randn(6)
    big = [torch.randn(2) for _ in range(40)]
    return [
        ("distinct", [x, y], [0], True),
        ("one tensor twice", [x, x], [0], False),
        ("written one is the second", [y, x, x], [2], False),
        ("views of one storage", [x[:3], x[3:]], [1], False),
        ("the others alias, the written one does not", [y, x, x[1:]], [0], True),
        ("a view through .view()", [x, x.view(2, 3)], [0], False),
        ("empty tensors (null storage)", [torch.empty(0), torch.empty(0)], [0], True),
        ("a float beside", [x, 2.0], [0], True),
        ("parameter and its data", [torch.nn.Parameter(x), x], [0], False),
        ("meta tensors", [torch.empty(3, device="meta"), torch.empty(3, device="meta")], [0], True),
        ("many inputs, distinct", big, [0, 5, 39], True),
        ("many inputs, the last written aliases the first", [*big[:-1], big[0]], [39], False),
        ("many inputs, all written, distinct", big, list(range(40)), True),
        ("a subclass", [x.as_subclass(Sub), x], [1], False),
    ]


class Sub(torch.Tensor):
    pass


@pytest.mark.parametrize("helper", [True, False])
@pytest.mark.parametrize("case", [c[0] for c in cases()])
def test_native_matches_reference(case: str, helper: bool) -> None:
    _, values, written, want = next(c for c in cases() if c[0] == case)
    names = [f"a{i}" for i in range(len(values))]
    assert both(names, written, values, helper) is want


def test_explanation_names_the_pair() -> None:
    x = torch.randn(4)
    L = {"a": torch.randn(4), "b": x, "c": x[1:]}
    fn = ember.guards.compile(GuardSet([guard(["a", "b", "c"], [1])]), {"a": L["a"], "b": x, "c": torch.randn(3)}, {})
    assert fn(L, {}) is False
    why = fn.explain(L, {})
    assert why is not None and "L['b'] shared memory with L['c']" in why and "writes L['b'] in place" in why


def test_format() -> None:
    gs = GuardSet([guard(["a", "b"], [1])])
    assert gs.format_version() == (3, 0)
    assert GuardSet.loads(gs.dumps()) == gs
    text = gs.dumps().replace('"version": [3, 0]', '"version": [2, 1]')
    with pytest.raises(FormatError, match="new in 3.0"):
        GuardSet.loads(text)
    with pytest.raises(FormatError):
        GuardSet([guard(["a", "b"], [2])]).verify()
    with pytest.raises(FormatError):
        GuardSet([guard(["a"], [0])]).verify()
