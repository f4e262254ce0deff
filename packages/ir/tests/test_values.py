import json
import math

import pytest
import torch

from ember.ir import FormatError, NodeRef, decode_value, encode_guard_value, encode_value

VALUES = [
    None,
    True,
    False,
    0,
    -7,
    2**70,
    1.5,
    -0.0,
    "text",
    "",
    (1, 2.5, "a"),
    (),
    [1, [2, (3,)]],
    {"a": 1, "b": (2, 3)},
    {1: "one", (2, 3): None},
    {"$tuple": 1},
    torch.float32,
    torch.bfloat16,
    torch.int64,
    torch.device("cpu"),
    torch.device("cuda", 1),
    torch.device("meta"),
    torch.strided,
    torch.sparse_coo,
    torch.channels_last,
    torch.contiguous_format,
    torch.Size([2, 3]),
    slice(1, None, 2),
    slice(None),
    Ellipsis,
    1 + 2j,
    NodeRef("add_1"),
    float("inf"),
    float("-inf"),
]

SETS = [{"relu", "gelu", "silu"}, frozenset({1, "a", (2, None)}), set()]


@pytest.mark.parametrize("value", SETS, ids=["set", "frozenset", "empty"])
def test_guard_values_round_trip_sets(value: object) -> None:
    back = decode_value(json.loads(json.dumps(encode_guard_value(value))))
    assert back == value and type(back) is type(value)
    with pytest.raises(FormatError, match="builtins.set"):  # graph IR does not write them
        encode_value({1, 2})


def test_a_set_has_one_text_whatever_its_iteration_order() -> None:
    a = {"x", "y", 3}
    b = {3, "y", "x"}
    assert json.dumps(encode_guard_value(a)) == json.dumps(encode_guard_value(b))
    assert type(decode_value(encode_guard_value(frozenset(a)))) is frozenset
    with pytest.raises(FormatError, match="not hashable"):
        decode_value({"$set": [[1, 2]]})


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_round_trip_through_json_text(value: object) -> None:
    text = json.dumps(encode_value(value), allow_nan=False)
    back = decode_value(json.loads(text))
    assert back == value
    assert type(back) is type(value)


def test_nan_round_trips() -> None:
    back = decode_value(json.loads(json.dumps(encode_value(float("nan")), allow_nan=False)))
    assert isinstance(back, float) and math.isnan(back)


def test_nested_types_survive() -> None:
    value = {"k": [(torch.float16, slice(0, 4)), {2: torch.Size([1])}]}
    back = decode_value(json.loads(json.dumps(encode_value(value))))
    assert back == value
    assert isinstance(back, dict) and isinstance(back["k"][0], tuple)


def test_unknown_type_names_the_type() -> None:
    class Widget:
        pass

    with pytest.raises(FormatError, match="Widget"):
        encode_value([1, Widget()])
    with pytest.raises(FormatError, match=r"builtins\.set"):
        encode_value({1, 2})


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"$mystery": 1}, "unknown value tag '\\$mystery'"),
        ({"a": 1, "b": 2}, "one-key tag"),
        ({"$dtype": "float33"}, "unknown dtype 'float33'"),
        ({"$device": "gpu:x"}, "bad device"),
        ({"$slice": [1, 2]}, "needs a list of 3"),
        ({"$size": [1, "2"]}, "list of ints"),
        ({"$float": "big"}, "inf"),
        ({"$node": 3}, "node name"),
    ],
)
def test_bad_tags_are_format_errors(bad: object, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        decode_value(bad)  # type: ignore[arg-type]
