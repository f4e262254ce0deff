"""A zoo of real Hugging Face ``transformers`` models, built from small configs.

Random weights, no downloads, dropout off (so every run can be compared with
eager exactly). Each entry builds a fresh model and its example inputs; the
tests in this folder run it eagerly, under ``torch.compile`` and under
``ember.dynamo`` in the same process and compare graph counts and results.

The models are what transformers users run, written by transformers' authors,
not by ember's: ModelOutput dataclasses, cache objects, decorators on
``forward``, ``**kwargs`` forwarding, attention-implementation dispatch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

VOCAB = 512
PAD_ID = 0
START_ID = 1
END_ID = 2


@dataclass
class ZooCase:
    """One model with one example call: ``model(*args, **kwargs)``."""

    model: nn.Module
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: ``"inference"`` (no_grad, outputs compared) or ``"train"`` (loss + grads compared)
    mode: str = "inference"
    #: picks the compared tensors out of the model's output
    outputs: Callable[[Any], list[torch.Tensor]] = lambda out: [out[0]]


@dataclass(frozen=True)
class ZooModel:
    name: str
    build: Callable[[], ZooCase]
    #: what the seed blog or the issue says about the model, for messages
    note: str = ""


def _ids(batch: int = 2, seq: int = 16, vocab: int = VOCAB) -> torch.Tensor:
    return torch.randint(3, vocab, (batch, seq))


def gpt2() -> ZooCase:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=START_ID,
        eos_token_id=END_ID,
    )
    model = GPT2LMHeadModel(cfg).eval()
    return ZooCase(model, (_ids(),), {"use_cache": False}, outputs=lambda o: [o.logits])


def bert() -> ZooCase:
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertForMaskedLM(cfg).eval()
    ids = _ids()
    return ZooCase(
        model, (ids,), {"attention_mask": torch.ones_like(ids)}, outputs=lambda o: [o.logits]
    )


def roberta() -> ZooCase:
    from transformers import RobertaConfig, RobertaForSequenceClassification

    cfg = RobertaConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=66, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, pad_token_id=1, num_labels=3,
    )
    model = RobertaForSequenceClassification(cfg).eval()
    return ZooCase(model, (_ids(),), outputs=lambda o: [o.logits])


def distilbert() -> ZooCase:
    from transformers import DistilBertConfig, DistilBertModel

    cfg = DistilBertConfig(
        vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
        max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
    )
    model = DistilBertModel(cfg).eval()
    return ZooCase(model, (_ids(),), outputs=lambda o: [o.last_hidden_state])


def t5() -> ZooCase:
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(
        vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
        dropout_rate=0.0, decoder_start_token_id=PAD_ID, use_cache=False,
    )
    model = T5ForConditionalGeneration(cfg).eval()
    return ZooCase(
        model, (), {"input_ids": _ids(), "decoder_input_ids": _ids(seq=8), "use_cache": False},
        outputs=lambda o: [o.logits],
    )


def bart() -> ZooCase:
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(
        vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_position_embeddings=64, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, use_cache=False,
    )
    model = BartForConditionalGeneration(cfg).eval()
    return ZooCase(
        model, (), {"input_ids": _ids(), "decoder_input_ids": _ids(seq=8), "use_cache": False},
        outputs=lambda o: [o.logits],
    )


def _llama_like(config_cls: str, model_cls: str, **extra: Any) -> Callable[[], ZooCase]:
    def build() -> ZooCase:
        import transformers

        cfg = getattr(transformers, config_cls)(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
            **extra,
        )
        model = getattr(transformers, model_cls)(cfg).eval()
        return ZooCase(model, (_ids(),), outputs=lambda o: [o.logits])

    return build


llama = _llama_like("LlamaConfig", "LlamaForCausalLM")
qwen2 = _llama_like("Qwen2Config", "Qwen2ForCausalLM")
mistral = _llama_like("MistralConfig", "MistralForCausalLM", sliding_window=None)


def _vit_config(**extra: Any) -> Any:
    from transformers import ViTConfig

    return ViTConfig(
        image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=128, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, **extra,
    )


def vit() -> ZooCase:
    from transformers import ViTForImageClassification

    model = ViTForImageClassification(_vit_config(num_labels=10)).eval()
    return ZooCase(model, (torch.randn(2, 3, 32, 32),), outputs=lambda o: [o.logits])


def clip() -> ZooCase:
    from transformers import CLIPConfig, CLIPModel

    cfg = CLIPConfig(
        text_config={
            "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 32,
            "bos_token_id": START_ID, "eos_token_id": END_ID, "pad_token_id": PAD_ID,
        },
        vision_config={
            "image_size": 32, "patch_size": 8, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4,
        },
        projection_dim=32,
    )
    model = CLIPModel(cfg).eval()
    return ZooCase(
        model, (), {"input_ids": _ids(seq=12), "pixel_values": torch.randn(2, 3, 32, 32)},
        outputs=lambda o: [o.logits_per_image, o.text_embeds, o.image_embeds],
    )


def whisper() -> ZooCase:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    cfg = WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=16, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, max_source_positions=32, max_target_positions=32,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, use_cache=False,
        pad_token_id=PAD_ID, bos_token_id=START_ID, eos_token_id=END_ID,
        decoder_start_token_id=START_ID,
    )
    model = WhisperForConditionalGeneration(cfg).eval()
    return ZooCase(
        model, (),
        {"input_features": torch.randn(2, 16, 64), "decoder_input_ids": _ids(seq=8),
         "use_cache": False},
        outputs=lambda o: [o.logits],
    )


def blog_captioner(loss_function: bool = True) -> ZooCase:
    """The seed blog's VisionEncoderDecoder (ViT + GPT-2), one training step.

    Built as ``get_model()`` in ``002_1daa7122265368d2.txt`` does, shrunk:
    ``loss_function = ForCausalLMLoss`` is set as the blog recommends unless
    ``loss_function=False`` (then transformers picks the loss in Python and
    ``fullgraph=True`` fails, as the blog shows).
    """
    from transformers import GPT2Config, VisionEncoderDecoderConfig, VisionEncoderDecoderModel

    decoder = GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
        bos_token_id=START_ID, eos_token_id=END_ID,
    )
    config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(
        encoder_config=_vit_config(), decoder_config=decoder
    )
    config.decoder.vocab_size = VOCAB
    config.decoder.use_cache = False
    config.decoder_start_token_id = START_ID
    config.pad_token_id = PAD_ID
    config.eos_token_id = END_ID
    model = VisionEncoderDecoderModel(config=config)
    model.encoder.pooler = None
    if loss_function:
        from transformers.loss.loss_utils import ForCausalLMLoss

        model.loss_function = ForCausalLMLoss
    model.train()
    batch = caption_batch(length=16)
    return ZooCase(model, (), batch, mode="train", outputs=lambda o: [o.loss])


def caption_batch(length: int, batch: int = 2, seed: int = 0) -> dict[str, torch.Tensor]:
    """The blog's collate: random captions ending in END_ID, padded to ``length``."""
    gen = torch.Generator().manual_seed(seed)
    inputs, labels = [], []
    for _ in range(batch):
        n = int(torch.randint(4, length, (1,), generator=gen))
        lab = torch.cat([torch.randint(3, VOCAB, (n,), generator=gen), torch.tensor([END_ID])])
        inp = torch.cat([torch.tensor([START_ID]), lab[:-1]])
        inputs.append(nn.functional.pad(inp, (0, length - inp.shape[0]), value=PAD_ID))
        labels.append(nn.functional.pad(lab, (0, length - lab.shape[0]), value=-100))
    ids = torch.stack(inputs)
    return {
        "pixel_values": torch.randn(batch, 3, 32, 32, generator=gen),
        "decoder_input_ids": ids,
        "labels": torch.stack(labels),
        "decoder_attention_mask": ids != PAD_ID,
    }


ZOO: tuple[ZooModel, ...] = (
    ZooModel("gpt2", gpt2),
    ZooModel("bert", bert),
    ZooModel("roberta", roberta),
    ZooModel("distilbert", distilbert),
    ZooModel("t5", t5),
    ZooModel("bart", bart),
    ZooModel("llama", llama),
    ZooModel("qwen2", qwen2),
    ZooModel("mistral", mistral),
    ZooModel("vit", vit),
    ZooModel("clip", clip),
    ZooModel("whisper", whisper),
    ZooModel("vit_gpt2_train", blog_captioner, "the seed blog's model, loss_function set"),
)

BY_NAME = {m.name: m for m in ZOO}


def build(name: str) -> ZooCase:
    """A fresh model and inputs, seeded, so two builds are identical."""
    torch.manual_seed(0)
    return BY_NAME[name].build()
