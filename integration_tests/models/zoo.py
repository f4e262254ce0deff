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
    #: heavier to build or compile: its tests run only with ``-m slow`` / ``EMBER_SLOW=1``
    slow: bool = False


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


# -- the wider zoo (2026-11-27): architectures chosen for the Python they run ---------


def _cfg(config_cls: str, **kw: Any) -> Any:
    import transformers

    return getattr(transformers, config_cls)(**kw)


def _model(model_cls: str, cfg: Any) -> nn.Module:
    import transformers

    model: nn.Module = getattr(transformers, model_cls)(cfg)
    return model.eval()


def _causal(config_cls: str, model_cls: str, **kw: Any) -> Callable[[], ZooCase]:
    """A decoder-only LM on ``_ids()``, logits compared."""

    def build() -> ZooCase:
        model = _model(model_cls, _cfg(config_cls, **kw))
        return ZooCase(model, (_ids(),), outputs=lambda o: [o.logits])

    return build


def _encoder(
    config_cls: str, model_cls: str, out: str = "logits", **kw: Any
) -> Callable[[], ZooCase]:
    """A BERT-style encoder on ``_ids()`` with an all-ones attention mask."""

    def build() -> ZooCase:
        cfg = _cfg(
            config_cls, vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=128, max_position_embeddings=64,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **kw,
        )
        ids = _ids()
        return ZooCase(
            _model(model_cls, cfg), (ids,), {"attention_mask": torch.ones_like(ids)},
            outputs=lambda o: [getattr(o, out)],
        )

    return build


def _seq2seq(config_cls: str, model_cls: str, **kw: Any) -> Callable[[], ZooCase]:
    def build() -> ZooCase:
        model = _model(model_cls, _cfg(config_cls, use_cache=False, **kw))
        return ZooCase(
            model, (),
            {"input_ids": _ids(), "decoder_input_ids": _ids(seq=8), "use_cache": False},
            outputs=lambda o: [o.logits],
        )

    return build


def _vision(
    config_cls: str, model_cls: str, shape: tuple[int, ...] = (2, 3, 32, 32), **kw: Any
) -> Callable[[], ZooCase]:
    def build() -> ZooCase:
        model = _model(model_cls, _cfg(config_cls, **kw))
        return ZooCase(model, (torch.randn(*shape),), outputs=lambda o: [o.logits])

    return build


def _trained(base: Callable[[], ZooCase], labels: Callable[[ZooCase], torch.Tensor],
             key: str = "input_ids") -> Callable[[], ZooCase]:
    """``base``'s model in train() mode, computing its own loss from ``labels``."""

    def build() -> ZooCase:
        case = base()
        case.model.train()
        kwargs = {k: v for k, v in case.kwargs.items() if k != "use_cache"}
        kwargs[key] = case.args[0]
        kwargs["labels"] = labels(case)
        return ZooCase(case.model, (), kwargs, mode="train", outputs=lambda o: [o.loss])

    return build


LLAMA_LIKE: dict[str, Any] = {
    "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
}
BART_LIKE: dict[str, Any] = {
    "vocab_size": VOCAB, "d_model": 64, "encoder_layers": 2, "decoder_layers": 2,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128, "max_position_embeddings": 64, "dropout": 0.0,
    "attention_dropout": 0.0, "activation_dropout": 0.0, "pad_token_id": PAD_ID,
    "decoder_start_token_id": START_ID,
}
DEBERTA: dict[str, Any] = {
    "relative_attention": True, "max_relative_positions": 32, "pos_att_type": ["p2c", "c2p"],
}

# decoder-only LMs: softcapping and sliding windows, partial rotary, ALiBi, parallel
# attention, fused QKV, learned positions, Mixture-of-Experts routing, state spaces, RNNs
gemma2 = _causal("Gemma2Config", "Gemma2ForCausalLM", head_dim=16, sliding_window=8, **LLAMA_LIKE)
gemma3 = _causal("Gemma3TextConfig", "Gemma3ForCausalLM", head_dim=16, sliding_window=8, **LLAMA_LIKE)
phi = _causal(
    "PhiConfig", "PhiForCausalLM", partial_rotary_factor=0.5, resid_pdrop=0.0, embd_pdrop=0.0,
    **LLAMA_LIKE,
)
phi3 = _causal("Phi3Config", "Phi3ForCausalLM", pad_token_id=PAD_ID, **LLAMA_LIKE)
falcon = _causal(
    "FalconConfig", "FalconForCausalLM", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
    num_attention_heads=4, hidden_dropout=0.0, attention_dropout=0.0, alibi=True,
    new_decoder_architecture=False, multi_query=True,
)
gpt_neox = _causal(
    "GPTNeoXConfig", "GPTNeoXForCausalLM", vocab_size=VOCAB, hidden_size=64,
    num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
    max_position_embeddings=128, rotary_pct=0.25, hidden_dropout=0.0, attention_dropout=0.0,
)
opt = _causal(
    "OPTConfig", "OPTForCausalLM", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
    ffn_dim=128, num_attention_heads=4, max_position_embeddings=128, dropout=0.0,
    attention_dropout=0.0, word_embed_proj_dim=64,
)
bloom = _causal(
    "BloomConfig", "BloomForCausalLM", vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4,
    hidden_dropout=0.0, attention_dropout=0.0,
)
gptj = _causal(
    "GPTJConfig", "GPTJForCausalLM", vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4,
    rotary_dim=8, n_positions=128, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
)
mpt = _causal(
    "MptConfig", "MptForCausalLM", vocab_size=VOCAB, d_model=64, n_layers=2, n_heads=4,
    max_seq_len=128,
)
mixtral = _causal(
    "MixtralConfig", "MixtralForCausalLM", num_local_experts=4, num_experts_per_tok=2,
    **LLAMA_LIKE,
)
qwen2_moe = _causal(
    "Qwen2MoeConfig", "Qwen2MoeForCausalLM", num_experts=4, num_experts_per_tok=2,
    moe_intermediate_size=32, shared_expert_intermediate_size=64, **LLAMA_LIKE,
)
mamba = _causal(
    "MambaConfig", "MambaForCausalLM", vocab_size=VOCAB, hidden_size=64, state_size=8,
    num_hidden_layers=2, use_cache=False,
)
rwkv = _causal(
    "RwkvConfig", "RwkvForCausalLM", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
    attention_hidden_size=64, intermediate_size=128, context_length=64, use_cache=False,
)
xlnet = _causal(
    "XLNetConfig", "XLNetLMHeadModel", vocab_size=VOCAB, d_model=64, n_layer=2, n_head=4,
    d_inner=128, dropout=0.0, use_mems_eval=False,
)

# encoders: disentangled relative attention, factorized embeddings, pooling, FFT mixing
deberta_v2 = _encoder(
    "DebertaV2Config", "DebertaV2ForMaskedLM", position_buckets=16, **DEBERTA
)
deberta = _encoder("DebertaConfig", "DebertaForSequenceClassification", **DEBERTA)
electra = _encoder("ElectraConfig", "ElectraForPreTraining", embedding_size=32)
albert = _encoder("AlbertConfig", "AlbertForMaskedLM", embedding_size=32)
funnel = _causal(
    "FunnelConfig", "FunnelForMaskedLM", vocab_size=VOCAB, block_sizes=[1, 1], d_model=64,
    n_head=4, d_head=16, d_inner=128, hidden_dropout=0.0, attention_dropout=0.0,
    activation_dropout=0.0,
)

# encoder-decoders
mbart = _seq2seq("MBartConfig", "MBartForConditionalGeneration", **BART_LIKE)
marian = _seq2seq("MarianConfig", "MarianMTModel", **BART_LIKE)
pegasus = _seq2seq("PegasusConfig", "PegasusForConditionalGeneration", **BART_LIKE)
umt5 = _seq2seq(
    "UMT5Config", "UMT5ForConditionalGeneration", vocab_size=VOCAB, d_model=64, d_kv=16,
    d_ff=128, num_layers=2, num_heads=4, dropout_rate=0.0, decoder_start_token_id=PAD_ID,
)
longt5 = _seq2seq(
    "LongT5Config", "LongT5ForConditionalGeneration", vocab_size=VOCAB, d_model=64, d_kv=16,
    d_ff=128, num_layers=2, num_heads=4, local_radius=4, encoder_attention_type="local",
    dropout_rate=0.0, decoder_start_token_id=PAD_ID,
)

# vision and audio: windows and shifts, depthwise convs, BatchNorm, CNN+transformer mixes
swin = _vision(
    "SwinConfig", "SwinForImageClassification", image_size=32, patch_size=2, embed_dim=16,
    depths=[1, 2], num_heads=[2, 4], window_size=4, num_labels=10, hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0, drop_path_rate=0.0,
)
convnext = _vision(
    "ConvNextConfig", "ConvNextForImageClassification", hidden_sizes=[16, 32], depths=[1, 1],
    num_stages=2, num_labels=10, drop_path_rate=0.0,
)
resnet = _vision(
    "ResNetConfig", "ResNetForImageClassification", embedding_size=16, hidden_sizes=[16, 32],
    depths=[1, 1], layer_type="bottleneck", num_labels=10,
)
mobilevit = _vision(
    "MobileViTConfig", "MobileViTForImageClassification", image_size=32, patch_size=2,
    hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
    num_attention_heads=2, num_labels=10, hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
)
segformer = _vision(
    "SegformerConfig", "SegformerForSemanticSegmentation", num_encoder_blocks=2, depths=[1, 1],
    sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
    num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=32, num_labels=5,
    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
    drop_path_rate=0.0,
)
beit = _vision(
    "BeitConfig", "BeitForImageClassification", image_size=32, patch_size=8, hidden_size=64,
    num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
    use_relative_position_bias=True, num_labels=10, hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0, drop_path_rate=0.0,
)
wav2vec2 = _vision(
    "Wav2Vec2Config", "Wav2Vec2ForCTC", shape=(2, 800), vocab_size=32, hidden_size=64,
    num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, conv_dim=(16, 16),
    conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=4, hidden_dropout=0.0, attention_dropout=0.0,
    activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0,
)

# training steps (the model's own loss; gradients compared)
mixtral_train = _trained(mixtral, lambda case: case.args[0].clone())
resnet_train = _trained(resnet, lambda case: torch.tensor([1, 7]), key="pixel_values")
electra_train = _trained(electra, lambda case: torch.randint(0, 2, case.args[0].shape))


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
    ZooModel("gemma2", gemma2, "logit softcapping, sliding-window layers"),
    ZooModel("phi", phi, "partial rotary, parallel attention and MLP"),
    ZooModel("bloom", bloom, "ALiBi, fused QKV"),
    ZooModel("gpt_neox", gpt_neox, "partial rotary, fused QKV"),
    ZooModel("mixtral", mixtral, "Mixture-of-Experts top-2 routing"),
    ZooModel("mamba", mamba, "selective state space, reference scan in PyTorch", slow=True),
    ZooModel("deberta_v2", deberta_v2, "disentangled relative attention, log buckets"),
    ZooModel("albert", albert, "factorized embeddings, one shared layer"),
    ZooModel("swin", swin, "shifted windows, relative position bias"),
    ZooModel("convnext", convnext, "depthwise convs, channels-last LayerNorm"),
    ZooModel("segformer", segformer, "transformers' output-capturing forward hooks"),
    ZooModel("resnet_train", resnet_train, "BatchNorm statistics, one training step"),
    ZooModel("gemma3", gemma3, slow=True),
    ZooModel("phi3", phi3, slow=True),
    ZooModel("falcon", falcon, "ALiBi, multi-query", slow=True),
    ZooModel("opt", opt, slow=True),
    ZooModel("gptj", gptj, slow=True),
    ZooModel("mpt", mpt, slow=True),
    ZooModel("qwen2_moe", qwen2_moe, "MoE with a shared expert", slow=True),
    ZooModel("rwkv", rwkv, "RNN time mixing in a Python loop", slow=True),
    ZooModel("xlnet", xlnet, "two-stream relative attention", slow=True),
    ZooModel("deberta", deberta, "DeBERTa v1: a tensor as slice bound", slow=True),
    ZooModel("electra", electra, slow=True),
    ZooModel("funnel", funnel, "pooling between blocks", slow=True),
    ZooModel("mbart", mbart, slow=True),
    ZooModel("marian", marian, slow=True),
    ZooModel("pegasus", pegasus, slow=True),
    ZooModel("umt5", umt5, slow=True),
    ZooModel("longt5", longt5, "local attention; its stack raises only when compiled (ADR 0045)"),
    ZooModel("mobilevit", mobilevit, "unfold/fold patches", slow=True),
    ZooModel("beit", beit, slow=True),
    ZooModel("wav2vec2", wav2vec2, "conv feature extractor, grouped conv positions", slow=True),
    ZooModel("mixtral_train", mixtral_train, slow=True),
    ZooModel("electra_train", electra_train, "boolean-mask indexing in the loss", slow=True),
)

BY_NAME = {m.name: m for m in ZOO}


def build(name: str) -> ZooCase:
    """A fresh model and inputs, seeded, so two builds are identical."""
    torch.manual_seed(0)
    return BY_NAME[name].build()
