"""transformers' own loops around a forward compiled by ember.dynamo.

- ``model.generate()`` with ``model.forward`` compiled (fullgraph=True): the
  greedy tokens are eager's, and every step's graph holds the decoder (its
  attention and MLP ops), not only the LM head.
- A graph break that remains inside transformers' code names the transformers
  source file and line under fullgraph=True.
"""

from __future__ import annotations

import functools
import linecache
import re
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

import ember.dynamo as ed

from . import zoo

NEW_TOKENS = 4


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    ed.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    ed.reset()


class GraphRecorder:
    """A backend that keeps each graph's call targets and runs it as is."""

    def __init__(self) -> None:
        self.graphs: list[list[str]] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        self.graphs.append(
            [str(n.target) for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
        )
        return gm.forward


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_generate_with_the_forward_compiled_captures_the_decoder(name: str) -> None:
    model = zoo.build(name).model
    ids = zoo._ids(batch=2, seq=6)
    kwargs: dict[str, Any] = {"max_new_tokens": NEW_TOKENS, "do_sample": False, "pad_token_id": zoo.PAD_ID}
    with torch.no_grad():
        want = model.generate(ids, **kwargs)
    rec = GraphRecorder()
    model.forward = ed.compile(model.forward, backend=rec, fullgraph=True)
    with torch.no_grad():
        got = model.generate(ids, **kwargs)
    assert torch.equal(got, want)
    assert got.shape[1] == ids.shape[1] + NEW_TOKENS
    # one graph per step at most (static shapes: each new length recompiles),
    # and each holds every decoder layer's attention, not only the LM head
    assert 1 <= len(rec.graphs) <= NEW_TOKENS, len(rec.graphs)
    layers = model.config.num_hidden_layers
    for ops in rec.graphs:
        attention = [t for t in ops if "scaled_dot_product_attention" in t]
        assert len(attention) == layers, ops
        assert len(ops) > 20 * layers


class OpaqueInterface(functools.partial):  # type: ignore[type-arg]
    """An attention function ember cannot trace (a partial subclass): eager runs it."""


def test_fullgraph_failure_inside_transformers_names_its_file_and_line() -> None:
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register("ember_opaque_sdpa", OpaqueInterface(sdpa_attention_forward))
    case = zoo.build("gpt2")
    case.model.set_attn_implementation("ember_opaque_sdpa")
    with torch.no_grad():
        case.model(*case.args, **case.kwargs)  # eager runs it
        compiled = ed.compile(case.model, backend="eager", fullgraph=True)
        with pytest.raises(ed.Unsupported) as info:
            compiled(*case.args, **case.kwargs)
    message = str(info.value)
    where = re.search(r"at (\S*/transformers/\S+\.py):(\d+) `([^`]+)`", message)
    assert where is not None, message
    path, line, text = where.group(1), int(where.group(2)), where.group(3)
    # the quoted line is the one at that place in transformers' source
    assert linecache.getline(path, line).strip() == text
    assert "OpaqueInterface" in message
