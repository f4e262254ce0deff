import json

import pytest
import torch

from ember.ir import (
    PAYLOAD_SCHEMA,
    Attr,
    DictEntry,
    DictItem,
    FormatError,
    Global,
    Guard,
    GuardKind,
    GuardSet,
    Local,
    encode_guard_value,
    encode_value,
    global_state_payload,
    parse_source,
    tensor_payload,
)


def sample_guard_set() -> GuardSet:
    x = torch.randn(4, 8)
    return GuardSet(
        guards=(
            Guard(Local("x"), GuardKind.TENSOR_MATCH, tensor_payload(x, dynamic_dims=[0])),
            Guard(Local("n"), GuardKind.TYPE_MATCH, {"type": "builtins.int", "type_id": id(int)}),
            Guard(Local("n"), GuardKind.CONSTANT_MATCH, {"value": encode_value(3)}),
            Guard(parse_source("L['cfg']['mode']"), GuardKind.EQUALS_MATCH, {"value": encode_value(("a", 1.5))}),
            Guard(parse_source("G['torch'].nn"), GuardKind.ID_MATCH, {"id": id(torch.nn), "repr": "<module torch.nn>"}),
            Guard(Local("xs"), GuardKind.LENGTH_MATCH, {"length": 2}),
            Guard(Local("d"), GuardKind.DICT_KEYS, {"keys": [encode_value("a"), encode_value(1)]}),
            Guard(Local("self"), GuardKind.NN_MODULE, {"id": 123, "type": "torch.nn.modules.linear.Linear"}),
            Guard(parse_source("G['torch'].cos"), GuardKind.FUNCTION_MATCH, {"id": id(torch.cos), "qualname": "torch.cos"}),
            Guard(parse_source("L['self'].layers[2].bias"), GuardKind.NOT_NONE, {}),
            Guard(None, GuardKind.SHAPE_EXPR, {"expr": "Eq(Mod(s0*s1, 8), 0)"}),
            Guard(None, GuardKind.GLOBAL_STATE, global_state_payload()),
        ),
        shape_relations=("s0 >= 2", "Ne(s1, 1)"),
    )


def sample_3_0() -> GuardSet:
    """The kinds new in format 3.0 (ADR 0062)."""
    payload = {"sources": ["L['a']", "L['self'].cache[0]", "L['b']"], "written": [1]}
    return GuardSet(guards=(*sample_guard_set().guards, Guard(None, GuardKind.NO_ALIASING, payload)))


def test_every_kind_is_covered_by_the_sample_and_schema() -> None:
    kinds = {g.kind for g in sample_guard_set().guards} | {g.kind for g in sample_3_0().guards}
    assert kinds == set(GuardKind)
    assert set(PAYLOAD_SCHEMA) == set(GuardKind)


def test_no_aliasing_is_format_3_0() -> None:
    gs = sample_3_0()
    text = gs.dumps()
    assert json.loads(text)["version"] == [3, 0]
    assert GuardSet.loads(text) == gs
    assert "L['self'].cache[0] share memory with no other of 3 inputs" in str(gs)
    with pytest.raises(FormatError, match=r"guard format 2\.0 has no NO_ALIASING guards \(new in 3\.0\)"):
        GuardSet.loads(text.replace('"version": [3, 0]', '"version": [2, 0]'))
    for bad in ({"sources": ["L['a']"], "written": [0]}, {"sources": ["L['a']", "L['b']"], "written": []},
                {"sources": ["L['a']", "L['b']"], "written": [0, 0]}, {"sources": ["L['a']", "L['b']"], "written": [5]},
                {"sources": ["L['a']", "not a source"], "written": [0]}):
        with pytest.raises(FormatError):
            Guard(None, GuardKind.NO_ALIASING, bad).verify()


def test_dumps_loads_round_trip() -> None:
    gs = sample_guard_set()
    text = gs.dumps()
    data = json.loads(text)
    assert data["format"] == "ember.guards" and data["version"] == [1, 0]
    back = GuardSet.loads(text)
    assert back == gs
    assert back.dumps() == text


def test_dumps_is_stable_sorted_json_one_guard_per_line() -> None:
    gs = sample_guard_set()
    text = gs.dumps()
    assert text == gs.dumps()
    lines = text.splitlines()
    guard_lines = [line for line in lines if line.startswith('  {"kind": ')]
    assert len(guard_lines) == len(gs.guards)
    for line in guard_lines:
        item = json.loads(line.strip().rstrip(","))
        assert list(item) == sorted(item)
    assert [line.split('"')[1] for line in lines if line.startswith(' "')] == ["format", "guards", "shape_relations", "version"]
    assert GuardSet((), ()).dumps() == '{\n "format": "ember.guards",\n "guards": [],\n "shape_relations": [],\n "version": [1, 0]\n}\n'


def test_str_reads_like_dynamo_guards_log() -> None:
    text = str(sample_guard_set())
    lines = text.splitlines()
    assert lines[0] == "GUARDS:"
    assert lines[1].startswith("- local 'x' TENSOR_MATCH: torch.Tensor float32 cpu sizes=[None, 8] strides=[None, 1]")
    assert "- local L['cfg']['mode'] EQUALS_MATCH: == ('a', 1.5)" in lines
    assert "- global G['torch'].nn ID_MATCH: id=" + str(id(torch.nn)) + " repr='<module torch.nn>'" in lines
    assert "- SHAPE_EXPR: Eq(Mod(s0*s1, 8), 0)" in lines
    assert "- shape relation: s0 >= 2" in lines


def test_tensor_payload_matches_tensor() -> None:
    x = torch.randn(2, 3, requires_grad=True).t()
    p = tensor_payload(x)
    assert p["sizes"] == [3, 2] and p["strides"] == [1, 3] and p["ndim"] == 2
    assert p["requires_grad"] is True and p["dtype"] == "float32" and p["device"] == "cpu"
    assert "AutogradCPU" in str(p["dispatch_keys"])


def _with_guard(raw: dict[str, object]) -> str:
    data = json.loads(sample_guard_set().dumps())
    data["guards"][0] = raw
    return json.dumps(data)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("payload"), "guards\\[0\\].*'payload'.*missing"),
        (lambda d: d.update(kind="SIZE_MATCH"), "unknown guard kind 'SIZE_MATCH'"),
        (lambda d: d["payload"].pop("dtype"), "node 'L\\['x'\\]', field 'payload.dtype'.*missing 'dtype'"),
        (lambda d: d["payload"].update(ndim="2"), "field 'payload.ndim': expected an int"),
        (lambda d: d["payload"].update(sizes=[1]), "sizes has 1 entries but ndim is 2"),
        (lambda d: d["payload"].update(dtype="float33"), "unknown dtype 'float33'"),
        (lambda d: d.update(source="L[x]"), "field 'source': bad source text at position 2"),
        (lambda d: d.update(source=None), "TENSOR_MATCH guards need a source"),
    ],
)
def test_malformed_guards_name_guard_and_field(mutate: object, message: str) -> None:
    raw = json.loads(sample_guard_set().dumps())["guards"][0]
    mutate(raw)  # type: ignore[operator]
    with pytest.raises(FormatError, match=message):
        GuardSet.loads(_with_guard(raw), file="guards.json")


def test_shape_expr_payload_is_parsed_not_evaluated() -> None:
    bad = Guard(None, GuardKind.SHAPE_EXPR, {"expr": "__import__('os').system('true')"})
    with pytest.raises(FormatError, match="bad size expression"):
        bad.verify()
    not_relation = Guard(None, GuardKind.SHAPE_EXPR, {"expr": "s0 + 1"})
    with pytest.raises(FormatError, match="expected a relation"):
        not_relation.verify()


def test_sourceless_kinds_reject_a_source() -> None:
    with pytest.raises(FormatError, match="take no source"):
        Guard(Local("x"), GuardKind.SHAPE_EXPR, {"expr": "Eq(s0, 2)"}).verify()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not valid JSON"),
        ('{"format": "ember.guards", "version": [1, 0], "guards": [', "truncated"),
        ("[]", "must be a JSON object"),
        ('{"format": "ember.graph", "version": [1, 0]}', "expected format 'ember.guards'"),
        ('{"format": "ember.guards", "version": [4, 0], "guards": []}',
         r"version 4\.0 is a newer major.*3\.0.*reads any 3\.x or 2\.x or 1\.x"),
        ('{"format": "ember.guards", "version": [0, 9], "guards": []}', "version 0.9 is a older major"),
        ('{"format": "ember.guards", "version": "1.0", "guards": []}', "MAJOR, MINOR"),
        ('{"format": "ember.guards", "version": [1, 0]}', "'guards' must be a list"),
    ],
)
def test_bad_files(text: str, message: str) -> None:
    with pytest.raises(FormatError, match=message) as info:
        GuardSet.loads(text, file="g.json")
    assert str(info.value).startswith("g.json")


def test_newer_minor_with_extra_fields_is_accepted() -> None:
    data = json.loads(sample_guard_set().dumps())
    data["version"] = [1, 7]
    data["future_field"] = {"x": 1}
    data["guards"][0]["payload"]["future_payload_field"] = 3
    loaded = GuardSet.loads(json.dumps(data))
    assert len(loaded.guards) == len(sample_guard_set().guards)


def test_guards_are_hashable_and_kind_accepts_strings() -> None:
    g = Guard(Local("x"), "NOT_NONE", {})  # type: ignore[arg-type]
    assert g.kind is GuardKind.NOT_NONE
    assert len({g, Guard(Local("x"), GuardKind.NOT_NONE, {})}) == 1


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"value": float("nan")}, "nan is not valid JSON"),
        ({"value": (1, 2)}, "a tuple is not plain JSON"),
        ({"value": 1, "extra": {1: 2}}, "field 'payload.extra': a dict is not plain JSON"),
    ],
)
def test_in_memory_payloads_must_be_plain_json(payload: dict[str, object], message: str) -> None:
    guard = Guard(Local("x"), GuardKind.CONSTANT_MATCH, payload)  # type: ignore[arg-type]
    with pytest.raises(FormatError, match=message):
        GuardSet((guard,)).dumps()


def _with_dict_item() -> GuardSet:
    return GuardSet(
        (
            Guard(DictItem(Global("ACT2FN"), "silu"), GuardKind.ID_MATCH, {"id": 5, "repr": "<class 'SiLU'>"}),
            Guard(Local("x"), GuardKind.NOT_NONE, {}),
        )
    )


def test_a_set_is_written_in_the_oldest_format_that_holds_it() -> None:
    """Format 2.0 only added the ``dict.__getitem__`` source: a set without one is
    still 1.0 (readers of 1.0 keep reading it), a set with one is 2.0."""
    assert json.loads(sample_guard_set().dumps())["version"] == [1, 0]
    text = _with_dict_item().dumps()
    assert json.loads(text)["version"] == [2, 0]
    assert GuardSet.loads(text) == _with_dict_item()


def test_a_set_reading_a_dict_by_position_is_format_2_1() -> None:
    key = DictEntry(Global("HANDLERS"), 1, "keys")
    value = Attr(DictEntry(Global("HANDLERS"), 1, "values"), "__code__")
    guards = GuardSet(
        (
            Guard(key, GuardKind.ID_MATCH, {"id": 7, "repr": "<class 'int'>"}),
            Guard(value, GuardKind.ID_MATCH, {"id": 9, "repr": "<code>"}),
        )
    )
    text = guards.dumps()
    assert json.loads(text)["version"] == [2, 1]
    assert GuardSet.loads(text) == guards


def test_a_dict_item_source_in_a_format_1_file_is_refused() -> None:
    data = json.loads(_with_dict_item().dumps())
    data["version"] = [1, 3]
    with pytest.raises(FormatError, match=r"dict.__getitem__.*guard format 1\.3 does not have"):
        GuardSet.loads(json.dumps(data), file="old.json")


def test_a_set_value_is_format_2_1() -> None:
    guards = GuardSet((Guard(Global("NAMES"), GuardKind.EQUALS_MATCH, {"value": encode_guard_value({"a", "b"})}),))
    text = guards.dumps()
    assert json.loads(text)["version"] == [2, 1]
    assert GuardSet.loads(text) == guards
