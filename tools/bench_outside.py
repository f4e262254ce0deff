"""transformers architectures that no ember suite builds: eager, ember and torch.compile.

    .venv/bin/python tools/bench_outside.py [names ...] [--explain]

The zoo is a sample: each fix is tried on models nobody wrote a test for. Each model here
is built from a small config with random weights (nothing downloads), called under
``no_grad`` with one torch thread, and timed as ``tools/bench_interleaved.py`` times (the
three callables in one process, interleaved rounds, thread CPU time). Printed per model:
the largest difference from eager of each compiler's first output, and ms per call with the
speedup over eager. ``--explain`` prints ember's graph and break counts (and the first
break reasons) instead of timing. No name: every model.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_interleaved as bi

Built = tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]


def _t() -> Any:
    import transformers

    return transformers


def _seq2seq(config: str, model: str, **kw: Any) -> Callable[[], Built]:
    """An encoder-decoder called as users call it: the config's default ``use_cache``."""

    def build() -> Built:
        base = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                    decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                    vocab_size=100, max_position_embeddings=64)
        base.update(kw)
        m = getattr(_t(), model)(getattr(_t(), config)(**base)).eval()
        ids = torch.randint(3, 100, (2, 12))
        return m, (), {"input_ids": ids, "decoder_input_ids": torch.randint(3, 100, (2, 8))}

    return build


def _classifier(config: str, model: str, **kw: Any) -> Callable[[], Built]:
    def build() -> Built:
        base = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=128, max_position_embeddings=64, num_labels=3)
        base.update(kw)
        m = getattr(_t(), model)(getattr(_t(), config)(**base)).eval()
        return m, (torch.randint(3, 100, (2, 16)),), {}

    return build


def speech2text() -> Built:
    t = _t()
    cfg = t.Speech2TextConfig(
        d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=100,
        input_feat_per_channel=16, input_channels=1, conv_channels=32, max_source_positions=64,
        max_target_positions=32,
    )
    m = t.Speech2TextModel(cfg).eval()
    return m, (), {"input_features": torch.randn(2, 40, 16),
                   "decoder_input_ids": torch.randint(0, 100, (2, 8))}


def recurrent_gemma() -> Built:
    t = _t()
    cfg = t.RecurrentGemmaConfig(
        num_hidden_layers=3, vocab_size=128, hidden_size=64, intermediate_size=128,
        num_attention_heads=4, num_key_value_heads=1, lru_width=64, attention_window_size=16,
        conv1d_width=4, block_types=["recurrent", "recurrent", "attention"], head_dim=16,
    )
    return t.RecurrentGemmaForCausalLM(cfg).eval(), (torch.randint(0, 128, (2, 16)),), {}


def hubert() -> Built:
    t = _t()
    cfg = t.HubertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, vocab_size=32,
    )
    return t.HubertModel(cfg).eval(), (torch.randn(2, 1600),), {}


MODELS: dict[str, Callable[[], Built]] = {
    "speech2text": speech2text,
    "plbart": _seq2seq("PLBartConfig", "PLBartModel"),
    "m2m100": _seq2seq("M2M100Config", "M2M100Model"),
    "blenderbot_small": _seq2seq("BlenderbotSmallConfig", "BlenderbotSmallModel"),
    "convbert": _classifier("ConvBertConfig", "ConvBertForSequenceClassification", embedding_size=64),
    "roformer": _classifier("RoFormerConfig", "RoFormerForSequenceClassification", embedding_size=64),
    "squeezebert": _classifier(
        "SqueezeBertConfig", "SqueezeBertForSequenceClassification", embedding_size=64, q_groups=2,
        k_groups=2, v_groups=2, post_attention_groups=2, intermediate_groups=2, output_groups=2,
    ),
    "recurrent_gemma": recurrent_gemma,
    "hubert": hubert,
}


def first_tensor(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return first_tensor(out[0])
    for name in ("logits", "last_hidden_state"):
        value = getattr(out, name, None)
        if isinstance(value, torch.Tensor):
            return value
    raise TypeError(f"no tensor output in {type(out).__name__}")


def explain(name: str, built: Built) -> None:
    import ember.dynamo

    model, args, kwargs = built
    report = ember.dynamo.explain(model)(*args, **kwargs)
    print(f"{name:16s} ember: {report.graph_count} graphs, {report.graph_break_count} breaks")
    for b in report.break_reasons[:4]:
        print(f"    - {str(b.reason)[:200]}")


def time_model(name: str, built: Built, calls: int, rounds: int) -> None:
    import ember.dynamo

    model, args, kwargs = built
    ref = first_tensor(model(*args, **kwargs))
    fns = {"eager": model, "ember": ember.dynamo.optimize("inductor")(model), "torch": torch.compile(model)}
    diffs = []
    for key in ("ember", "torch"):
        diffs.append(f"{key} {(first_tensor(fns[key](*args, **kwargs)) - ref).abs().max().item():.1e}")
    ms = bi.time_rounds({k: bi.bind(f, args, kwargs) for k, f in fns.items()}, calls, rounds)
    cells = "  ".join(f"{k} {v:6.2f} ms {ms['eager'] / v:5.2f}x" for k, v in ms.items())
    print(f"{name:16s} {cells}   (max diff vs eager: {', '.join(diffs)})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"any of {', '.join(MODELS)}")
    parser.add_argument("--explain", action="store_true", help="graph and break counts, no timing")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    ns = parser.parse_args()
    unknown = [n for n in ns.names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; known: {', '.join(MODELS)}")
    torch.set_num_threads(1)
    for name in ns.names or list(MODELS):
        torch.manual_seed(0)
        import ember.dynamo

        ember.dynamo.reset()
        torch._dynamo.reset()
        with torch.no_grad():
            built = MODELS[name]()
            if ns.explain:
                explain(name, built)
            else:
                time_model(name, built, ns.calls, ns.rounds)


if __name__ == "__main__":
    main()
