"""transformers encoder-decoders called with ``use_cache=True`` (their configs'
default), captured whole.

The zoo calls them with ``use_cache=False``; with the cache on, the decoder
builds ``DynamicCache(config=...)``, whose ``get_text_config(decoder=True)``
deep-copies the legacy flat config and renames its ``decoder_*`` keys through
huggingface_hub's strict-dataclass validators (a dict keyed by ``typing``
constructs). ember broke three or four times there and ran the decoder
eagerly; now the whole forward is one graph, its logits and its returned cache
equal eager's.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounter

from . import zoo


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    ed.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    ed.reset()


def _cache_tensors(out: Any) -> list[torch.Tensor]:
    cache = out.past_key_values
    assert cache is not None, "use_cache=True returned no cache"
    found: list[torch.Tensor] = []
    for part in (cache.self_attention_cache, cache.cross_attention_cache):
        for layer in part.layers:
            found += [layer.keys, layer.values]
    return found


@pytest.mark.parametrize("name", ["bart", "marian", "pegasus"])
def test_forward_with_the_cache_on_is_one_graph_equal_to_eager(name: str) -> None:
    case = zoo.build(name)
    model = case.model
    model.config.use_cache = True
    kwargs = {**case.kwargs, "use_cache": True}
    with torch.no_grad():
        want = model(*case.args, **kwargs)
        cnt = CompileCounter()
        compiled = ed.compile(model, backend=cnt, fullgraph=True)
        for _ in range(2):
            got = compiled(*case.args, **kwargs)
            torch.testing.assert_close(got.logits, want.logits)
            for a, b in zip(_cache_tensors(got), _cache_tensors(want), strict=True):
                torch.testing.assert_close(a, b)
    assert cnt.frame_count == 1
    # the config the model holds was only read: the decoder's copy stayed inside
    assert model.config.decoder_layers == model.config.encoder_layers == 2
    assert not hasattr(model.config, "num_hidden_layers") or model.config.num_hidden_layers == 2


def test_inductor_with_the_cache_on_equals_eager() -> None:
    case = zoo.build("bart")
    kwargs = {**case.kwargs, "use_cache": True}
    with torch.no_grad():
        want = case.model(*case.args, **kwargs)
        got = ed.compile(case.model, backend="inductor", fullgraph=True)(*case.args, **kwargs)
    torch.testing.assert_close(got.logits, want.logits, atol=1e-4, rtol=1e-4)
    for a, b in zip(_cache_tensors(got), _cache_tensors(want), strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
