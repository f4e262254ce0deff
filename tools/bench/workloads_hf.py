"""Workloads built from Hugging Face ``transformers`` configs (random weights, no downloads).

Registered always, but each row ``requires`` transformers: without it the row
is shown as unavailable. Dropout is set to 0 so every column can be checked
against eager exactly; the captioning model is the seed blog's ViT encoder +
GPT-2 decoder, shrunk to tiny configs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from bench.registry import Case, Workload, register_workload
from bench.workloads import inference_step

VOCAB = 1024
PAD_ID = 0
START_ID = 1


def _gpt2_config(**extra: Any) -> Any:
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=VOCAB,
        n_positions=128,
        n_embd=128,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        use_cache=False,
        bos_token_id=START_ID,
        eos_token_id=2,
        **extra,
    )


def _gpt2(device: str) -> Case:
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    model: nn.Module = GPT2LMHeadModel(_gpt2_config())
    model = model.to(device).eval()
    ids = torch.randint(0, VOCAB, (4, 64), device=device)
    return Case(model, [(ids,)], inference_step, params=list(model.parameters()))


class Captioner(nn.Module):
    """ViT encoder + GPT-2 decoder; forward returns the captioning loss."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import (
            VisionEncoderDecoderConfig,
            VisionEncoderDecoderModel,
            ViTConfig,
        )

        encoder = ViTConfig(
            image_size=32,
            patch_size=8,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=128,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        decoder = _gpt2_config(add_cross_attention=True, is_decoder=True)
        config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
        config.decoder_start_token_id = START_ID
        config.pad_token_id = PAD_ID
        self.model = VisionEncoderDecoderModel(config=config)
        self.model.encoder.pooler = None

    def forward(self, pixels: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = self.model(pixel_values=pixels, labels=labels, decoder_attention_mask=mask)
        return out.loss  # type: ignore[no-any-return]


def _loss_step(model: nn.Module) -> Callable[[Callable[..., Any], tuple[Any, ...]], list[torch.Tensor]]:
    params = [p for p in model.parameters() if p.requires_grad]

    def step(fn: Callable[..., Any], args: tuple[Any, ...]) -> list[torch.Tensor]:
        for p in params:
            p.grad = None
        loss = fn(*args)
        loss.backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        return [loss.detach(), *grads]

    return step


def _caption_batch(device: str, length: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """4 random images and captions of random true length, padded to ``length``."""
    pixels = torch.randn(4, 3, 32, 32, generator=gen).to(device)
    labels = torch.full((4, length), PAD_ID, dtype=torch.long)
    mask = torch.zeros(4, length, dtype=torch.long)
    for i in range(4):
        n = int(torch.randint(5, length + 1, (1,), generator=gen))
        labels[i, :n] = torch.randint(3, VOCAB, (n,), generator=gen)
        mask[i, :n] = 1
    labels = labels.masked_fill(mask == 0, -100)  # padding does not count in the loss
    return pixels, labels.to(device), mask.to(device)


def _captioner(lengths: tuple[int, ...]) -> Callable[[str], Case]:
    def build(device: str) -> Case:
        torch.manual_seed(0)
        model = Captioner().to(device).train()
        gen = torch.Generator().manual_seed(0)
        inputs = [_caption_batch(device, n, gen) for n in lengths]
        return Case(model, inputs, _loss_step(model), params=list(model.parameters()))

    return build


_HF = ("transformers",)
for _w in (
    Workload(
        "gpt2_2layer",
        "HF GPT-2, 2 layers, d=128, batch 4, seq 64, inference (needs transformers)",
        _gpt2,
        quick=False,
        requires=_HF,
    ),
    Workload(
        "vit_gpt2_train",
        "HF ViT+GPT-2 captioner (tiny), training step, captions padded to 32",
        _captioner((32,)),
        training=True,
        quick=False,
        requires=_HF,
        amortize_steps=10,
    ),
    Workload(
        "vit_gpt2_train_2len",
        "as vit_gpt2_train, padded lengths 24 and 32 alternating (recompiles)",
        _captioner((24, 32)),
        training=True,
        quick=False,
        requires=_HF,
        amortize_steps=10,
    ),
):
    register_workload(_w)
