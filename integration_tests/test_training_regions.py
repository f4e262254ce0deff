"""Autocast and activation-checkpointing regions inside compiled training steps,
against eager (issue 18)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import ember.dynamo
import ember.dynamo.testing
from ember.dynamo.testing import CompileCounter


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 8))


def grads(model: nn.Module) -> list[torch.Tensor]:
    out = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return out


def test_bf16_autocast_training_step_matches_eager() -> None:
    model = mlp()

    def step(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        assert out.dtype == torch.bfloat16
        return out.float().square().mean()

    x = torch.randn(16, 32)
    want = step(x)
    want.backward()
    want_grads = grads(model)
    got = ember.dynamo.compile(step, backend="inductor")(x)
    got.backward()
    # autocast tolerances: bf16 keeps 8 bits of mantissa
    torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1e-3)
    for g, w in zip(grads(model), want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=1.6e-2, atol=1e-3)


class Checkpointed(nn.Module):
    def __init__(self, use_checkpoint: bool) -> None:
        super().__init__()
        self.block = mlp()
        self.use_checkpoint = use_checkpoint

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_checkpoint:
            out = checkpoint(self.block, x, use_reentrant=False)
        else:
            out = self.block(x)
        assert isinstance(out, torch.Tensor)
        return out.square().mean()


def saved_numel(model: nn.Module, x: torch.Tensor) -> tuple[int, list[torch.Tensor]]:
    """Elements of the activations autograd saves for backward during one forward
    (saved parameters, and views of them, cost no memory and are not counted), and the
    gradients. A compiled model is called once first, so that compiling (which runs
    the model on other tensors) is not counted."""
    model(x).backward()
    grads(model)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in params:
            saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x)
    loss.backward()
    return sum(saved), grads(model)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_checkpointed_block_saves_fewer_activations_and_matches_eager(backend: str) -> None:
    x = torch.randn(16, 32)
    eager_saved, eager_grads = saved_numel(Checkpointed(True), x)
    plain = Checkpointed(False)
    plain_saved, _ = saved_numel(ember.dynamo.compile(plain, backend=backend), x)
    ckpt = Checkpointed(True)
    ckpt_saved, ckpt_grads = saved_numel(ember.dynamo.compile(ckpt, backend=backend), x)
    # the checkpointed graph saves only the block's input (16x32), as eager's checkpoint
    # does; the plain graph saves its hidden activations too
    assert ckpt_saved < plain_saved
    assert ckpt_saved <= eager_saved
    for g, w in zip(ckpt_grads, eager_grads, strict=True):
        torch.testing.assert_close(g, w)


def test_checkpointed_region_is_captured_in_one_graph() -> None:
    counter = CompileCounter()
    model = Checkpointed(True)
    ember.dynamo.compile(model, backend=counter)(torch.randn(16, 32))
    assert counter.frame_count == 1
    assert counter.op_count >= 6  # the block's 5 modules and the loss
    # the block's nodes are marked as one region recomputed in backward; the loss is not
    marks = [n.meta.get("recompute") for n in counter.graphs[0].graph.nodes
             if n.op in ("call_module", "call_function", "call_method")]
    assert marks.count(1) == 5 and set(marks) == {1, None}


class TwoRegions(nn.Module):
    """Two checkpointed blocks back to back, the second with a keyword argument and
    dropout inside (a random op: its mask is saved, never redrawn)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = mlp()
        torch.manual_seed(1)
        self.second = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8))

    def scaled(self, x: torch.Tensor, *, scale: float) -> torch.Tensor:
        return nn.functional.dropout(self.second(x) * scale, 0.25, training=self.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = checkpoint(self.first, x, use_reentrant=False)
        h = checkpoint(self.scaled, h, use_reentrant=False, scale=0.5)
        return h.square().mean()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_two_regions_with_dropout_train_like_eager(backend: str) -> None:
    eager, model = TwoRegions(), TwoRegions()
    model.load_state_dict(eager.state_dict())
    counter = ember.dynamo.testing.CompileCounterWithBackend(backend)
    compiled = ember.dynamo.compile(model, backend=counter)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(16, 32)
        losses = []
        for m, o in ((eager, eager_opt), (compiled, opt)):
            torch.manual_seed(100 + step)  # the same dropout masks
            o.zero_grad()
            loss = m(x)
            loss.backward()
            o.step()
            losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0])
    assert counter.frame_count == 1
    for a, b in zip(eager.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_reentrant_checkpoint_with_an_input_requiring_grad_is_captured() -> None:
    block = mlp()

    def step(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(block, x, use_reentrant=True).sum()

    x = torch.randn(4, 32, requires_grad=True)
    step(x).backward()
    want = [x.grad.clone(), *grads(block)]
    x.grad = None
    counter = ember.dynamo.testing.CompileCounterWithBackend("aot_eager")
    ember.dynamo.compile(step, backend=counter)(x).backward()
    assert counter.frame_count == 1
    for g, w in zip([x.grad, *grads(block)], want, strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("how", ["no_use_reentrant", "reentrant_without_grad_input", "context_fn"])
def test_checkpoint_calls_ember_does_not_capture_run_eagerly(how: str) -> None:
    """Without ``use_reentrant`` torch warns and takes the reentrant path; reentrant
    checkpointing without an input requiring grad gives the block no gradients; a
    ``context_fn`` is selective checkpointing: all three run under torch's checkpoint."""
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    block = mlp()
    kwargs: dict[str, object] = {
        "no_use_reentrant": {},
        "reentrant_without_grad_input": {"use_reentrant": True},
        "context_fn": {"use_reentrant": False,
                       "context_fn": lambda: create_selective_checkpoint_contexts([torch.ops.aten.mm.default])},
    }[how]

    def step(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(block, x, **kwargs).sum()

    x = torch.randn(4, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want_loss = step(x)
        if want_loss.requires_grad:
            want_loss.backward()
        want = grads(block)
        got_loss = ember.dynamo.compile(step, backend="aot_eager")(x)
        if got_loss.requires_grad:
            got_loss.backward()
    torch.testing.assert_close(got_loss, want_loss)
    assert got_loss.requires_grad == want_loss.requires_grad
    for g, w in zip(grads(block), want, strict=True):
        torch.testing.assert_close(g, w)


class GPT2Loss(nn.Module):
    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=2, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False, bos_token_id=1, eos_token_id=2)
        torch.manual_seed(0)
        self.model = GPT2LMHeadModel(config).train()
        if checkpointed:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            # transformers adds a forward hook on the input embeddings for reentrant
            # checkpointing; module hooks are graph breaks in ember (not traced)
            self.model.get_input_embeddings()._forward_hooks.clear()
        self.ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        loss: torch.Tensor = self.model(ids, labels=ids).loss
        return loss


def test_transformers_gradient_checkpointing_is_captured_and_recomputed() -> None:
    pytest.importorskip("transformers")
    ids = GPT2Loss(False).ids
    eager_saved, eager_grads = saved_numel(GPT2Loss(True), ids)
    plain_saved, _ = saved_numel(ember.dynamo.compile(GPT2Loss(False), backend="aot_eager"), ids)
    counter = ember.dynamo.testing.CompileCounterWithBackend("aot_eager")
    ckpt_saved, ckpt_grads = saved_numel(ember.dynamo.compile(GPT2Loss(True), backend=counter), ids)
    assert counter.frame_count == 1
    regions = {n.meta.get("recompute") for n in counter.graphs[0].graph.nodes} - {None}
    assert regions == {1, 2}  # one per GPT-2 block
    assert ckpt_saved < plain_saved
    for g, w in zip(ckpt_grads, eager_grads, strict=True):
        torch.testing.assert_close(g, w)
