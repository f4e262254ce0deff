"""Fuzzing the readers: any mutation of a valid file either loads or raises FormatError, nothing else."""

from __future__ import annotations

import copy
import json
from typing import Any

import torch
import torch.fx
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from ember.ir import (
    FormatError,
    Guard,
    GuardKind,
    GuardSet,
    Local,
    dumps,
    encode_value,
    from_fx,
    loads,
    tensor_payload,
    to_fx,
)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.lin(x[:, :4])).sum(dim=-1, keepdim=True) * 2


GRAPH: Any = json.loads(dumps(from_fx(torch.fx.symbolic_trace(Net()), [torch.randn(2, 5)])))
GUARDS: Any = json.loads(
    GuardSet(
        (
            Guard(Local("x"), GuardKind.TENSOR_MATCH, tensor_payload(torch.randn(2, 5))),
            Guard(Local("n"), GuardKind.CONSTANT_MATCH, {"value": encode_value((1, None, slice(2)))}),
            Guard(None, GuardKind.SHAPE_EXPR, {"expr": "Eq(Mod(s0, 4), 0)"}),
        ),
        ("s0 >= 2",),
    ).dumps()
)

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=5),
              st.sampled_from(["$node", "$tuple", "x", "lin", "aten::add.Tensor", "float32", "s0 +", "Tensor.sum", "L['x']"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=2),
                            st.dictionaries(st.sampled_from(["$node", "$tuple", "$dict", "$slice", "tensor", "scalar"]), inner, max_size=1)),
    max_leaves=6,
)  # fmt: skip


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn, doc: Any) -> str:
    data = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(data) if p]
        path = draw(st.sampled_from(paths))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "rename"]))
        if action == "replace":
            parent[path[-1]] = draw(json_values)
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "delete":
            parent.pop(path[-1])
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=4))] = parent.pop(path[-1])
    return json.dumps(data)


@settings(max_examples=150, deadline=None, database=None)
@given(mutated(GRAPH))
def test_mutated_graph_files(text: str) -> None:
    try:
        loads(text, file="fuzz.json")
    except FormatError as e:
        assert str(e).startswith("fuzz.json")


@settings(max_examples=100, deadline=None, database=None)
@given(mutated(GUARDS))
def test_mutated_guard_files(text: str) -> None:
    try:
        GuardSet.loads(text, file="fuzz.json")
    except FormatError as e:
        assert str(e).startswith("fuzz.json")


@settings(max_examples=60, deadline=None, database=None)
@given(st.integers(0, len(json.dumps(GRAPH)) - 1))
def test_truncated_graph_text(cut: int) -> None:
    try:
        loads(json.dumps(GRAPH)[:cut], file="cut.json")
        raise AssertionError("a truncated file must not load")
    except FormatError as e:
        assert str(e).startswith("cut.json")


TENSORS = from_fx(torch.fx.symbolic_trace(Net()), [torch.randn(2, 5)]).tensors


@settings(max_examples=150, deadline=None, database=None)
@given(mutated(GRAPH))
def test_mutated_graphs_that_load_also_build(text: str) -> None:
    try:
        ir = loads(text)
        to_fx(ir.with_tensors({k: v for k, v in TENSORS.items() if k in ir.tensor_metas()}))
    except FormatError:
        pass
