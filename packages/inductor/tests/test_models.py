"""Real models through the backend: inference and training, compared with eager."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from ember.inductor import CompiledGraph, InductorOptions, make_backend

#: every model runs with both code generators (Triton in its interpreter, on CPU tensors)
BACKENDS = ("cpp", "triton")


class GPTBlock(nn.Module):
    def __init__(self, d: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device))
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


def _models() -> dict[str, tuple[Callable[[], nn.Module], Callable[[], torch.Tensor]]]:
    return {
        "mlp": (
            lambda: nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16)),
            lambda: torch.randn(8, 32),
        ),
        "cnn_bn": (
            lambda: nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1),
                nn.BatchNorm2d(8),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(8, 4),
            ),
            lambda: torch.randn(2, 3, 8, 8),
        ),
        "transformer": (
            lambda: nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True),
            lambda: torch.randn(2, 6, 32),
        ),
        "gpt_block": (lambda: GPTBlock(), lambda: torch.randn(2, 8, 64)),
    }


def assert_trains_like_eager(compiled: Any, model: torch.nn.Module, ref: torch.nn.Module, x: torch.Tensor) -> None:
    """One forward and backward of ``compiled`` (wrapping ``model``) against ``ref`` (a copy
    of ``model`` run eagerly): outputs, every parameter's gradient and every buffer."""
    out, want = compiled(x), ref(x)
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
    grad = torch.randn_like(out)
    out.backward(grad)
    want.backward(grad)
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-3, msg=lambda m, n=n: f"{n}: {m}")
    for b, rb in zip(model.buffers(), ref.buffers()):
        torch.testing.assert_close(b, rb, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list(_models()))
def test_inference(name: str, reports: list[Any], options: InductorOptions) -> None:
    torch.manual_seed(0)
    make_model, make_input = _models()[name]
    model, x = make_model().eval(), make_input()
    if name == "transformer":
        model.train()  # eval mode takes ATen's fused fast path (one op, nothing to generate); dropout is 0
    compiled = torch.compile(model, backend=make_backend(options))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    assert reports and all(isinstance(r, CompiledGraph) for r in reports), [
        r.report.eager_reason for r in reports
    ]
    assert sum(r.report.kernels for r in reports) >= 1


@pytest.mark.parametrize("name", ["mlp", "cnn_bn", "gpt_block"])
def test_training(name: str, reports: list[Any], options: InductorOptions) -> None:
    pytest.importorskip("ember.aotgrad")
    torch.manual_seed(0)
    make_model, make_input = _models()[name]
    model, x = make_model().train(), make_input()
    ref_model = make_model().train()
    ref_model.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend=make_backend(options))
    assert_trains_like_eager(compiled, model, ref_model, x)
    assert len(reports) >= 2  # forward and backward graphs
    assert all(isinstance(r, CompiledGraph) for r in reports), [
        r.report.eager_reason for r in reports
    ]


def test_ember_dynamo_inductor_backend(reports: list[Any]) -> None:
    dynamo = pytest.importorskip("ember.dynamo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
    x = torch.randn(4, 16)
    compiled = dynamo.compile(model, backend="inductor")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    out = compiled(x)
    out.sum().backward()
    assert model[0].weight.grad is not None
    assert reports and all(isinstance(r, CompiledGraph) for r in reports), [
        r.report.eager_reason for r in reports
    ]


class SDPABlock(nn.Module):
    """Attention through ``F.scaled_dot_product_attention`` (on CPU ATen's
    ``_scaled_dot_product_flash_attention_for_cpu``), a projection before and after."""

    def __init__(self, d: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.qkv, self.proj, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(x).split(d, dim=2))
        y = nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, d)).relu()


def test_inference_attention_stays_one_fused_aten_call(reports: list[Any]) -> None:
    """Inference keeps ATen's fused CPU attention whole (an extern call, not bmm + softmax +
    bmm kernels: measured slower at every shape, ADR 0049), and equals eager."""
    torch.manual_seed(0)
    model, x = SDPABlock().eval(), torch.randn(2, 24, 32)
    compiled = torch.compile(model, backend=make_backend(InductorOptions()))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    fallbacks: dict[str, int] = {}
    for r in reports:
        assert isinstance(r, CompiledGraph), r.report.eager_reason
        for op, n in r.report.fallbacks.items():
            fallbacks[op] = fallbacks.get(op, 0) + n
    assert fallbacks.get("aten::_scaled_dot_product_flash_attention_for_cpu") == 1, fallbacks
    assert "aten::bmm" not in fallbacks, fallbacks


def test_channels_last_batch_norm_at_symbolic_sizes(reports: list[Any]) -> None:
    # a channels-last store of symbolic size walks the channels innermost, as at static
    # sizes (it walked H*W with stride C: a gather per element, 16 -> 91 us), and the
    # per-channel rsqrt is computed once per channel (the reader's size by its hint)
    model = nn.Sequential(nn.BatchNorm2d(32), nn.ReLU()).eval()
    with torch.no_grad():
        model[0].running_var.uniform_(0.5, 2.0)
        model[0].running_mean.normal_()
    dynamo = pytest.importorskip("ember.dynamo")
    compiled = dynamo.compile(model, backend="inductor", dynamic=True)
    with torch.no_grad():
        for n, hw in ((2, 16), (3, 12)):
            x = torch.randn(n, 32, hw, hw).to(memory_format=torch.channels_last)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
    assert reports and isinstance(reports[-1], CompiledGraph)
    sources = list(reports[-1].report.kernel_sources.values())
    main = [src for src in sources if "int64_t s" in src]
    assert len(main) == 1 and "sqrt" not in main[0], sources
    inner = main[0].split("#pragma omp simd")[-1].split("\n")[1]
    assert "< 32;" in inner, main[0]


class _Depthwise(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 16, 1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 8, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def test_depthwise_convolutions_run_channels_last_at_symbolic_sizes(reports: list[Any]) -> None:
    # a graph of 1x1 and depthwise convolutions runs them channels-last (ADR 0056) at
    # symbolic sizes too: the choice counted their work by the sizes' values for the inputs
    # at hand (it needed static sizes, so every model called at a second batch size lost it)
    from ember.inductor.testing import conv_inputs_channels_last

    dynamo = pytest.importorskip("ember.dynamo")
    torch.manual_seed(0)
    model = _Depthwise().eval()
    compiled = dynamo.compile(model, backend="inductor", dynamic=True)
    with torch.no_grad():
        for n, hw in ((2, 16), (3, 12)):
            x = torch.randn(n, 3, hw, hw)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-5, rtol=1e-5)
            assert compiled(x).is_contiguous()  # eager's layout for what the caller gets
        layouts = conv_inputs_channels_last(lambda: compiled(torch.randn(4, 3, 10, 10)))
    sources = "\n".join(reports[-1].report.kernel_sources.values())
    assert "const int64_t s" in sources, sources  # the graph that ran has symbolic sizes
    assert layouts and all(layouts), layouts
