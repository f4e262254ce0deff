import pytest

from ember.ir import (
    Attr,
    DictEntry,
    DictItem,
    FormatError,
    Global,
    Item,
    Local,
    Size,
    Stride,
    format_needed,
    needs_format_2,
    parse_source,
    root_of,
)

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
    (DictItem(Global("ACT2FN"), "silu"), "dict.__getitem__(G['ACT2FN'], 'silu')"),
    (Item(DictItem(Attr(Local("self"), "acts"), "gelu"), 1), "dict.__getitem__(L['self'].acts, 'gelu')[1]"),
    (DictItem(DictItem(Local("d"), 0), "a, b)"), "dict.__getitem__(dict.__getitem__(L['d'], 0), 'a, b)')"),
    (DictItem(Item(Local("d"), "k"), (1, "x")), "dict.__getitem__(L['d']['k'], (1, 'x'))"),
    (DictEntry(Global("TABLE"), 2, "keys"), "list(dict.keys(G['TABLE']))[2]"),
    (Attr(DictEntry(Attr(Local("self"), "registry"), 0, "values"), "fn"),
     "list(dict.values(L['self'].registry))[0].fn"),
    (DictEntry(DictItem(DictEntry(Global("t"), 1, "values"), "k"), 3, "keys"),
     "list(dict.keys(dict.__getitem__(list(dict.values(G['t']))[1], 'k')))[3]"),
    (DictEntry(Item(Local("d"), (1, ")")), 0, "values"), "list(dict.values(L['d'][(1, ')')]))[0]"),
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
        ("dict.__getitem__(L['d'] 'k')", 24),
        ("dict.__getitem__(L['d'], 'k'", 28),
        ("dict.__getitem__(L['d'])", 23),
        ("dict.get(L['d'], 'k')", 0),
        ("L['d'], 'k')", 6),
    ],
)
def test_bad_text_reports_position(text: str, position: int) -> None:
    with pytest.raises(FormatError, match=f"position {position}"):
        parse_source(text)


def test_attr_member_must_be_identifier() -> None:
    with pytest.raises(FormatError, match="identifier"):
        Attr(Local("x"), "not valid")


def test_hash_is_cached_per_process_and_never_pickled() -> None:
    """A derived source caches its hash (guard sets hash long chains many times); the
    cache is per process (str hashes are salted), so a pickled source carries none."""
    import pickle

    s = parse_source("L['self'].layers[2].weight.size()[1]")
    fresh = parse_source("L['self'].layers[2].weight.stride()[1]").base
    assert hash(s) == hash(s) and hash(s.base) == hash(fresh) and s.base == fresh
    copied = pickle.loads(pickle.dumps(s))
    assert copied._hash == 0 and copied == s and hash(copied) == hash(s)


def test_sources_sharing_a_base_parse_only_their_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored frame's guard sources share long bases: once ``L['self'].enc`` is parsed,
    ``L['self'].enc.layer[0].w`` parses from there; a ``.`` or ``[`` inside a string or
    number constant is never taken for the end of a base."""
    from ember.ir import source as source_module

    base = parse_source("L['self'].enc")
    tricky = ["L['self']['enc.layer[0]']", "L['self'][\"e'].nc\"].x", "L['self'][(1, 2.5)].w"]
    expected = {t: source_module._Parser(t).parse() for t in tricky}

    def no_full_parse(self: object) -> None:
        raise AssertionError("parsed the whole text again")

    monkeypatch.setattr(source_module._Parser, "parse", no_full_parse)
    got = parse_source("L['self'].enc.layer[0].w.size()[1]")
    assert got == Size(Attr(Item(Attr(base, "layer"), 0), "w"), 1)
    assert parse_source("L['self'].enc.layer[1]") == Item(Attr(base, "layer"), 1)
    for text, want in expected.items():  # these start from L['self'] (parsed above), not enc
        assert parse_source(text) == want


class _Instantiating(dict):  # transformers' ClassInstantier: each item read makes a new object
    def __getitem__(self, key: object) -> object:
        return dict.__getitem__(self, key)()


def test_dict_item_text_is_python_reading_past_an_overridden_getitem() -> None:
    class Act:
        pass

    acts = _Instantiating(silu=Act)
    text = DictItem(Global("ACT2FN"), "silu").expr()
    assert eval(text, {"L": {}, "G": {"ACT2FN": acts}}) is Act  # test only: the text is Python
    assert isinstance(acts["silu"], Act)  # what ``Item`` would have read


def test_only_dict_item_sources_need_format_2() -> None:
    assert needs_format_2(parse_source("dict.__getitem__(G['A'], 'x').y.size()[0]"))
    assert needs_format_2(Item(DictItem(Local("d"), "k"), 0))
    assert not needs_format_2(parse_source("L['self'].layers[2].weight"))


def test_dict_entry_text_is_python_reading_entries_by_position() -> None:
    table = {int: "handle_int", str: "handle_str"}
    read = {part: eval(DictEntry(Global("T"), 1, part).expr(), {"L": {}, "G": {"T": table}})  # test only
            for part in ("keys", "values")}
    assert read == {"keys": str, "values": "handle_str"}


def test_the_format_a_source_needs() -> None:
    assert format_needed(parse_source("L['self'].layers[2].weight")) == (1, 0)
    assert format_needed(parse_source("dict.__getitem__(G['A'], 'x').y")) == (2, 0)
    assert format_needed(Attr(DictItem(DictEntry(Global("T"), 0, "values"), "k"), "y")) == (2, 1)
    assert needs_format_2(DictEntry(Global("T"), 0, "keys"))


@pytest.mark.parametrize(
    "text",
    ["list(dict.keys(G['T']))[-1]", "list(dict.items(G['T']))[0]", "list(dict.keys(G['T']))['a']",
     "list(dict.values(G['T'])[0]", "list(dict.keys(G['T']))"],
)
def test_bad_dict_entry_text_is_refused(text: str) -> None:
    with pytest.raises(FormatError):
        parse_source(text)


def test_dict_item_parses_from_a_remembered_base() -> None:
    """The base inside ``dict.__getitem__(`` is remembered as its own text, never with the
    prefix before it (which alone is no source)."""
    first = parse_source("dict.__getitem__(L['cfg'].acts, 'silu').x")
    assert first == Attr(DictItem(Attr(Local("cfg"), "acts"), "silu"), "x")
    assert parse_source("L['cfg'].acts") == Attr(Local("cfg"), "acts")
    with pytest.raises(FormatError):
        parse_source("dict.__getitem__(L['cfg'].acts")
    assert parse_source("dict.__getitem__(L['cfg'].acts, 'silu').y") == Attr(first.base, "y")
