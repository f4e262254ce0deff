"""Hugging Face transformers models under ember.dynamo (skipped where
transformers is not installed; test_hf_patterns.py covers the same Python
patterns without it)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import ember.dynamo as ed  # noqa: E402
from ember.dynamo.testing import CompileCounter  # noqa: E402


@pytest.fixture(autouse=True)
def _reset():
    ed.reset()
    yield
    ed.reset()


def tiny_gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128,
        bos_token_id=0, eos_token_id=0,
    )
    return transformers.GPT2Model(cfg).eval()


@pytest.mark.parametrize("kwargs", [{"use_cache": False}, {}], ids=["no_cache", "default"])
def test_gpt2_captures_graphs_equal_to_eager(kwargs) -> None:
    m = tiny_gpt2()
    ids = torch.randint(0, 1000, (2, 32))
    with torch.no_grad():
        want = m(ids, **kwargs).last_hidden_state
        info = ed.explain(m)(ids, **kwargs)
        assert info.graph_count >= 1
        assert info.op_count >= 50  # the transformer blocks, not just glue
        reasons = " ".join(str(b.reason) for b in info.break_reasons)
        assert "__code__" not in reasons
        ed.reset()
        cnt = CompileCounter()
        c = ed.compile(m, backend=cnt)
        torch.testing.assert_close(c(ids, **kwargs).last_hidden_state, want)
        frames = cnt.frame_count
        torch.testing.assert_close(c(ids, **kwargs).last_hidden_state, want)
        assert cnt.frame_count == frames  # called twice, compiled once
