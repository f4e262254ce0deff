import pytest

from ember.ir import Attr, FormatError, Global, Item, Local, Size, Stride, parse_source, root_of

CASES = [
    (Local("x"), "L['x']"),
    (Attr(Global("torch"), "nn"), "G['torch'].nn"),
    (Attr(Item(Attr(Local("self"), "layers"), 2), "weight"), "L['self'].layers[2].weight"),
    (Size(Local("x"), 0), "L['x'].size()[0]"),
    (Stride(Local("x"), 1), "L['x'].stride()[1]"),
    (Item(Local("d"), "key"), "L['d']['key']"),
    (Item(Local("t"), -1), "L['t'][-1]"),
    (Item(Local("d"), (1, "a", None)), "L['d'][(1, 'a', None)]"),
    (Item(Local("d"), (3,)), "L['d'][(3,)]"),
    (Item(Local("d"), None), "L['d'][None]"),
    (Item(Local("d"), 0.5), "L['d'][0.5]"),
    (Item(Local("d"), "it's \"q\"\n"), "L['d']['it\\'s \"q\"\\n']"),
    (Attr(Size(Local("x"), 0), "real"), "L['x'].size()[0].real"),
]


@pytest.mark.parametrize(("source", "text"), CASES, ids=[t for _, t in CASES])
def test_expr_and_parse_round_trip(source: object, text: str) -> None:
    assert source.expr() == text  # type: ignore[attr-defined]
    assert parse_source(text) == source
    assert parse_source(source.expr()) == source  # type: ignore[attr-defined]


@pytest.mark.parametrize(("source", "text"), CASES[:6], ids=[t for _, t in CASES[:6]])
def test_expr_is_valid_python_for_frame_dicts(source: object, text: str) -> None:
    class Layer:
        weight = "w2"

    class Self:
        layers = [None, None, Layer()]

    import torch

    x = torch.zeros(3, 4)
    frame_locals = {"x": x, "self": Self(), "d": {"key": 7}}
    frame_globals = {"torch": torch}
    value = eval(text, {"L": frame_locals, "G": frame_globals})  # test only: checks the text is Python
    expected = {
        "L['x']": x,
        "G['torch'].nn": torch.nn,
        "L['self'].layers[2].weight": "w2",
        "L['x'].size()[0]": 3,
        "L['x'].stride()[1]": 1,
        "L['d']['key']": 7,
    }[text]
    assert value is expected or value == expected


def test_root_of() -> None:
    assert root_of(parse_source("L['self'].layers[2].weight")) == Local("self")
    assert root_of(parse_source("G['torch'].nn")) == Global("torch")


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("x", 0),
        ("L['x'", 5),
        ("L[1]", 3),
        ("L['x'].", 7),
        ("L['x'].size()[a]", 14),
        ("L['x'](", 6),
        ("L['x'].__import__('os')", 17),
        ("L['unterminated]", 16),
    ],
)
def test_bad_text_reports_position(text: str, position: int) -> None:
    with pytest.raises(FormatError, match=f"position {position}"):
        parse_source(text)


def test_attr_member_must_be_identifier() -> None:
    with pytest.raises(FormatError, match="identifier"):
        Attr(Local("x"), "not valid")
