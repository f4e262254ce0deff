"""The seed blog's variable-length recipe on its ViT+GPT-2 captioner, against eager.

"Compiling Graphs with Variable-Shaped Tensors": ``mark_dynamic`` on the
decoder inputs' length dimension gives one graph for every caption length;
without it, the default ``dynamic=None`` recompiles once and the recompile
reason names the dimension that changed.
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch

pytest.importorskip("transformers")

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounterWithBackend

from . import zoo

DECODER_INPUTS = ("decoder_input_ids", "labels", "decoder_attention_mask")


def _train_steps(backend: str, lengths: tuple[int, ...], mark: bool,
                 dynamic: bool | None = None) -> CompileCounterWithBackend:
    torch.manual_seed(0)
    eager = zoo.blog_captioner().model
    model = copy.deepcopy(eager)
    cnt = CompileCounterWithBackend(backend)
    compiled = ed.compile(model, backend=cnt, dynamic=dynamic)
    for length in lengths:
        batch = zoo.caption_batch(length)
        if mark:
            for k in DECODER_INPUTS:
                ed.mark_dynamic(batch[k], 1)
        got = compiled(**batch).loss
        got.backward()
        want = eager(**batch).loss
        want.backward()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        for (name, p), q in zip(model.named_parameters(), eager.parameters(), strict=True):
            if q.grad is not None:
                assert p.grad is not None, name
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4, msg=name)
        model.zero_grad(set_to_none=True)
        eager.zero_grad(set_to_none=True)
    return cnt


def test_mark_dynamic_on_the_decoder_inputs_compiles_one_graph(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ed.reset()
    with caplog.at_level(logging.WARNING, logger="ember"):
        cnt = _train_steps("inductor", (8, 13, 20), mark=True)
    assert cnt.frame_count == 1 and len(cnt.graphs) == 1
    assert not caplog.records, [r.getMessage() for r in caplog.records]  # nothing ran eagerly


def test_default_recompiles_once_naming_the_length_dimension(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ed.reset()
    ed.set_logs(recompiles=True)
    try:
        with caplog.at_level(logging.INFO, logger="ember.recompiles"):
            cnt = _train_steps("eager", (8, 13, 20, 11), mark=False)
    finally:
        ed.set_logs()
    assert cnt.frame_count == 2
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "size()[1] was 13, the graph assumed 8" in text, text
    # The recompiled frame is the model's forward, or (transformers >= 5.24) the deprecation
    # wrapper around it, whose keyword arguments arrive as ``**kwargs``.
    assert (
        "L['decoder_input_ids'].size()[1]" in text
        or "L['kwargs']['decoder_input_ids'].size()[1]" in text
    ), text


@pytest.mark.slow
@pytest.mark.parametrize("dynamic", [None, True], ids=["dynamic_none", "dynamic_true"])
def test_training_at_growing_lengths_without_marks(
    dynamic: bool | None, caplog: pytest.LogCaptureFixture,
) -> None:
    # the blog's loop as a new user runs it: no mark_dynamic, each batch padded to its own
    # length; the symbolic graph's backward serves every later length (issue 31)
    ed.reset()
    with caplog.at_level(logging.WARNING, logger="ember"):
        cnt = _train_steps("inductor", (8, 13, 20, 11, 24), mark=False, dynamic=dynamic)
    assert cnt.frame_count == (1 if dynamic else 2)
    assert not caplog.records, [r.getMessage() for r in caplog.records]  # nothing ran eagerly


def _generate(backend: str, new_tokens: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=zoo.VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(3, zoo.VOCAB, (1, 8))
    kw = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False}
    with torch.no_grad():
        want = model.generate(ids, **kw)
        cnt = CompileCounterWithBackend(backend)
        model.forward = ed.compile(model.forward, backend=cnt)
        got = model.generate(ids, **kw)
    return got, want, cnt.frame_count


@pytest.mark.parametrize(
    "backend", ["inductor", pytest.param("aot_eager", marks=pytest.mark.slow)]
)
def test_llama_generate_compiles_at_most_three_times(backend: str) -> None:
    # the KV cache grows one token per step: the second size makes its length dynamic
    ed.reset()
    got, want, frames = _generate(backend, 30)
    assert torch.equal(got, want)  # greedy tokens identical to eager
    assert frames <= 3
