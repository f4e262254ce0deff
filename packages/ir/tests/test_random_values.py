"""Hypothesis: random sources, values and guard sets survive text round trips."""

from __future__ import annotations

import json
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.ir import (
    Attr,
    Global,
    Guard,
    GuardKind,
    GuardSet,
    Item,
    Local,
    Size,
    Source,
    Stride,
    decode_value,
    encode_value,
    parse_source,
)

names = st.text(min_size=1, max_size=8)
identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
index_atoms = st.one_of(
    st.integers(-(2**40), 2**40),
    st.text(max_size=6),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
)
indices = st.one_of(index_atoms, st.lists(index_atoms, max_size=3).map(tuple))


def sources() -> st.SearchStrategy[Source]:
    roots: st.SearchStrategy[Source] = st.one_of(names.map(Local), names.map(Global))

    def extend(base: st.SearchStrategy[Source]) -> st.SearchStrategy[Source]:
        return st.one_of(
            st.builds(Attr, base, identifiers),
            st.builds(Item, base, indices),
            st.builds(Size, base, st.integers(-4, 8)),
            st.builds(Stride, base, st.integers(-4, 8)),
        )

    return st.recursive(roots, extend, max_leaves=6)


@settings(max_examples=60, deadline=None, database=None)
@given(sources())
def test_parse_of_expr_is_identity(source: Source) -> None:
    assert parse_source(source.expr()) == source


leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=6),
    st.sampled_from([torch.float32, torch.int8, torch.bool, torch.device("cpu"), torch.device("cuda", 3)]),
    st.sampled_from([torch.strided, torch.channels_last, Ellipsis]),
    st.builds(slice, st.none() | st.integers(), st.none() | st.integers(), st.none() | st.integers(1, 3)),
    st.lists(st.integers(0, 5), max_size=3).map(torch.Size),
    st.complex_numbers(allow_nan=False),
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=4), inner, max_size=3),
        st.dictionaries(st.integers() | st.tuples(st.integers()), inner, max_size=3),
    ),
    max_leaves=12,
)


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple))
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


@settings(max_examples=80, deadline=None, database=None)
@given(values)
def test_value_encoding_round_trips_exactly(value: object) -> None:
    text = json.dumps(encode_value(value), allow_nan=False)
    assert _same(decode_value(json.loads(text)), value)


@settings(max_examples=25, deadline=None, database=None)
@given(st.lists(st.tuples(sources(), values), max_size=6), st.lists(st.sampled_from(["s0 >= 2", "Eq(s1, 4*s0)"]), max_size=2))
def test_random_guard_sets_round_trip(pairs: list[tuple[Source, object]], relations: list[str]) -> None:
    guards = tuple(Guard(src, GuardKind.EQUALS_MATCH, {"value": encode_value(v)}) for src, v in pairs)
    gs = GuardSet(guards, tuple(relations))
    text = gs.dumps()
    back = GuardSet.loads(text)
    assert [g.source for g in back.guards] == [g.source for g in gs.guards]
    assert back.dumps() == text
    assert len(str(back).splitlines()) == 1 + len(guards) + len(relations)
