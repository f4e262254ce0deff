"""The recipes of docs/guide.md ("ember inside Trainer, accelerate and Lightning"), run as a
user would: two training steps through the library's own loop, with ember selected either
by name through torch.compile (``backend="ember"``, ember.inductor behind TorchDynamo) or
as the whole frontend (``ember.dynamo.compile`` where the recipe would call
torch.compile). Every loss is compared with the same library loop run eagerly, and each
test checks that ember's inductor really compiled graphs (a counter on its graph
compiler), so a recipe that silently ran eagerly fails.

transformers' ``TrainingArguments(torch_compile_backend=...)`` and accelerate's
``dynamo_backend`` accept only the names of accelerate's ``DynamoBackend`` enum, so
"ember" cannot be named there (``ValueError: 'EMBER' is not a valid DynamoBackend``); the
recipes compile the model before handing it to the library instead, which is what those
options do internally.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import ember.dynamo
import ember.inductor.backends as inductor_backends

transformers = pytest.importorskip("transformers")


@pytest.fixture
def inductor_graphs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many ATen graphs ember.inductor compiled during the test."""
    seen: list[int] = []
    real = inductor_backends.compile_graph

    def counting(gm: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
        seen.append(len(gm.graph.nodes))
        return real(gm, *args, **kwargs)

    monkeypatch.setattr(inductor_backends, "compile_graph", counting)
    torch._dynamo.reset()
    ember.dynamo.reset()
    yield seen
    torch._dynamo.reset()
    ember.dynamo.reset()


def _gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=16,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def _rows() -> list[dict[str, torch.Tensor]]:
    ids = torch.randint(0, 64, (8, 12), generator=torch.Generator().manual_seed(0))
    return [{"input_ids": r, "labels": r} for r in ids]


def _trainer_losses(prepare: Callable[[torch.nn.Module], torch.nn.Module]) -> list[float]:
    model = prepare(_gpt2())
    args = transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(), max_steps=2, per_device_train_batch_size=4,
        logging_steps=1, report_to=[], use_cpu=True, save_strategy="no", seed=0,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_rows())
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2
    return losses


def _in_place_torch_compile(model: torch.nn.Module) -> torch.nn.Module:
    model.compile(backend="ember")  # nn.Module.compile: torch.compile in place, by name
    return model


@pytest.mark.parametrize("how", ["backend_name", "frontend"])
def test_transformers_trainer_two_steps_equal_eager(how: str, inductor_graphs: list[int]) -> None:
    want = _trainer_losses(lambda m: m)
    prepare = _in_place_torch_compile if how == "backend_name" else ember.dynamo.compile
    got = _trainer_losses(prepare)
    assert inductor_graphs, "ember.inductor compiled nothing: the recipe ran eagerly"
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def _accelerate_losses(prepare: Callable[[torch.nn.Module], torch.nn.Module]) -> list[float]:
    accelerate = pytest.importorskip("accelerate")
    accelerator = accelerate.Accelerator(cpu=True)
    model = _gpt2()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, opt = accelerator.prepare(model, opt)
    model = prepare(model)
    losses = []
    for batch in torch.randint(0, 64, (2, 4, 12), generator=torch.Generator().manual_seed(1)):
        loss = model(input_ids=batch, labels=batch).loss
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


# torch.compile's own capture costs ~20 s per test here: by name, under EMBER_SLOW=1
@pytest.mark.parametrize("how", [pytest.param("backend_name", marks=pytest.mark.slow), "frontend"])
def test_accelerate_two_steps_equal_eager(how: str, inductor_graphs: list[int]) -> None:
    want = _accelerate_losses(lambda m: m)
    if how == "backend_name":
        got = _accelerate_losses(lambda m: torch.compile(m, backend="ember"))
    else:
        got = _accelerate_losses(ember.dynamo.compile)
    assert inductor_graphs, "ember.inductor compiled nothing: the recipe ran eagerly"
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def _lightning_losses(how: str) -> list[float]:
    pl = pytest.importorskip("lightning.pytorch")

    class LitGPT2(pl.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = _gpt2()
            self.losses: list[float] = []

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.net(input_ids=ids, labels=ids).loss

        def training_step(self, batch: list[torch.Tensor], idx: int) -> torch.Tensor:
            loss = self(batch[0])
            self.losses.append(float(loss.detach()))
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    lit = LitGPT2()
    module: Any = lit
    if how == "backend_name":
        module = torch.compile(lit, backend="ember")  # Lightning unwraps torch's OptimizedModule
    elif how == "frontend":
        lit.forward = ember.dynamo.compile(lit.forward)  # type: ignore[method-assign]
    ids = torch.randint(0, 64, (8, 12), generator=torch.Generator().manual_seed(2))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=4)
    trainer = pl.Trainer(max_steps=2, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(module, loader)
    assert len(lit.losses) == 2
    return lit.losses


@pytest.mark.parametrize("how", [pytest.param("backend_name", marks=pytest.mark.slow), "frontend"])
def test_lightning_two_steps_equal_eager(how: str, inductor_graphs: list[int]) -> None:
    want = _lightning_losses("eager")
    got = _lightning_losses(how)
    assert inductor_graphs, "ember.inductor compiled nothing: the recipe ran eagerly"
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
