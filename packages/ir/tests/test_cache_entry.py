"""Checksummed cache entries and graph key text (shared by the inductor and aotgrad caches)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from ember.ir.cache_entry import (
    entry_path,
    graph_key_text,
    load_entry,
    remember_stored_text,
    source_fingerprint,
    store_entry,
)

LOG = logging.getLogger("ember.ir.test")


def test_entry_round_trip_and_damage(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = entry_path(tmp_path, "graphs", "ab" * 32)
    assert path == tmp_path / "graphs" / "ab" / f"{'ab' * 32}.json"
    assert load_entry(path, json.loads, LOG) is None  # missing: a plain miss
    assert store_entry(path, json.dumps({"x": [1, 2]}), json.loads, LOG)
    assert load_entry(path, json.loads, LOG) == {"x": [1, 2]}
    assert not list(path.parent.glob("*.tmp"))
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0x01
    path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="ember.ir.test"):
        assert load_entry(path, json.loads, LOG) is None
    assert "corrupted or unreadable" in caplog.text and not path.exists()


def test_unparsable_entries_are_neither_written_nor_used(tmp_path: Path) -> None:
    path = entry_path(tmp_path, "aot", "cd" * 32)
    assert not store_entry(path, "{not json", json.loads, LOG)
    assert not path.exists()
    store_entry(path, "[1]", json.loads, LOG)

    def reject(text: str) -> object:
        raise ValueError("format 0, expected 1")

    assert load_entry(path, reject, LOG) is None  # parses badly now (an older format): rebuilt
    assert not path.exists()


def test_graph_key_text_ignores_stack_traces_but_not_the_graph() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2

    gm1 = torch.fx.symbolic_trace(f)
    gm2 = torch.fx.symbolic_trace(f)
    for n in gm2.graph.nodes:
        n.stack_trace = 'File "elsewhere.py", line 99'
    text = graph_key_text(gm1, LOG)
    assert text is not None and text == graph_key_text(gm2, LOG)
    gm3 = torch.fx.symbolic_trace(lambda x: torch.relu(x) * 3)
    assert graph_key_text(gm3, LOG) != text


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.register_buffer("scale", torch.full((8,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.norm(self.proj(x))) * self.scale + x


def test_a_graph_loaded_from_a_cache_entry_keys_from_the_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm start reads a rebuilt graph's key from the entry's text (no second
    serialization), and that key is the one the live graph had; a graph edited after
    loading is serialized again."""
    import ember.ir as ir
    import ember.ir.cache_entry as cache_entry

    block = _Block()
    live = torch.fx.symbolic_trace(block)
    text = ir.dumps(ir.from_fx(live))
    expected = graph_key_text(live, LOG)
    loaded = ir.loads(text)
    gm = ir.to_fx(loaded.with_tensors({k: v for k, v in block.state_dict().items()}))
    remember_stored_text(gm, text)

    def no_serialization(*args: object) -> None:
        raise AssertionError("serialized the graph again")

    with monkeypatch.context() as m:
        m.setattr(cache_entry, "from_fx", no_serialization)
        assert graph_key_text(gm, LOG) == expected
    x = torch.randn(3, 8)
    torch.testing.assert_close(gm(x), block(x))

    output = next(n for n in gm.graph.nodes if n.op == "output")
    with gm.graph.inserting_before(output):
        relu = gm.graph.call_function(torch.relu, (output.args[0],))
    output.args = (relu,)
    gm.recompile()
    edited = graph_key_text(gm, LOG)
    assert edited is not None and edited != expected and "relu" in edited


def test_source_fingerprint_follows_the_files(tmp_path: Path) -> None:
    trees = []
    for name, body in (("one", "x = 1\n"), ("same", "x = 1\n"), ("edited", "x = 2\n")):
        root = tmp_path / name
        (root / "sub").mkdir(parents=True)
        (root / "sub" / "a.py").write_text(body)
        (root / "notes.txt").write_text(name)  # not source: not hashed
        trees.append(source_fingerprint(root))
    one, same, edited = trees
    assert one == same
    assert one != edited


def test_code_digest_is_by_content_not_address() -> None:
    import functools

    from ember.ir.cache_entry import code_digest

    def make(k: int) -> object:
        def outer(x: int) -> int:
            def inner(y: int) -> int:  # a nested code object in outer's constants
                return y * k

            return inner(x) + 1

        return outer

    a, b = make(2), make(3)  # distinct function objects, same code
    assert code_digest(a) == code_digest(b)
    assert code_digest(functools.partial(a, 1)) == code_digest(a)
    assert code_digest(lambda x: x + 1) != code_digest(lambda x: x + 2)
    assert code_digest(len) == "-"
