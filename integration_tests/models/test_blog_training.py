"""The seed blog's training loop (``002_1daa7122265368d2.txt``, steps 1-3) under ember:
its ViT+GPT-2 captioner (small config) with the model and ``optimizer.step``
compiled, 20 steps, against the same loop run eagerly."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

import ember.dynamo as ed
from ember.dynamo.optimizer import CompiledOptimizerStep

from . import zoo

STEPS = 20


def losses(model_backend: str | None, step_backend: str | None) -> tuple[list[float], Any]:
    case = zoo.build("vit_gpt2_train")
    model = case.model
    optimizer = torch.optim.Adam(model.parameters())  # the blog's optimizer (foreach by default)
    if model_backend is not None:
        model = ed.compile(model, backend=model_backend, fullgraph=True)
    if step_backend is not None:
        optimizer.step = ed.compile(optimizer.step, backend=step_backend)
    out = []
    for i in range(STEPS):
        batch = zoo.caption_batch(length=16, seed=i)
        optimizer.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        out.append(loss.item())
    return out, optimizer


@pytest.mark.slow
def test_blog_loop_with_model_and_optimizer_compiled_gives_eager_losses() -> None:
    ed.reset()
    want, _ = losses(None, None)
    got, optimizer = losses("aot_eager", "inductor")
    assert isinstance(optimizer.step, CompiledOptimizerStep)
    assert optimizer.step.compiles == 1 and all(e is not None for e in optimizer.step.entries.values())
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5)


@pytest.mark.slow
def test_blog_loop_with_inductor_model_gives_eager_losses() -> None:
    ed.reset()
    want, _ = losses(None, None)
    got, optimizer = losses("inductor", "inductor")
    assert isinstance(optimizer.step, CompiledOptimizerStep) and optimizer.step.compiles == 1
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5)
