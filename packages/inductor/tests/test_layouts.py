"""Memory-order decisions: column reductions, views handed to ATen, div/mod simplification.

Each test compares against eager (through the ``check`` fixture) and then asserts the
property of the generated code that makes it fast.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable
from typing import Any

import pytest
import sympy
import torch
from torch import nn

from ember.inductor import CompiledGraph, CppOptions, InductorOptions, decomposition_table
from ember.inductor.index import FloorDiv, ModIndex, index_symbols, simplify_index
from ember.inductor.testing import conv_inputs_channels_last

Check = Callable[..., CompiledGraph]
#: every test here runs with both code generators (Triton in its interpreter)
BACKENDS = ("cpp", "triton")


@pytest.mark.parametrize("reduce", ["sum", "amax", "amin", "prod", "mean"])
@pytest.mark.parametrize("rows,cols", [(64, 2048), (37, 129), (512, 8)])
def test_column_reduction_matches_eager(
    check: Check, backend: str, reduce: str, rows: int, cols: int
) -> None:
    x = torch.randn(rows, cols)
    if reduce == "prod":
        x = 1 + x / 100  # keep the product finite
        if backend == "triton":  # Triton's interpreter runs tl.reduce's combine per element
            x = x[:, :32].contiguous()

    def f(x: torch.Tensor) -> torch.Tensor:
        return getattr(torch, reduce)(x * 2 + 1, 0)

    c = check(f, x, atol=1e-4, rtol=1e-4)
    src = "\n".join(c.report.kernel_sources.values())
    if cols >= 8 and backend == "cpp":
        # the kept dim is the vectorized inner loop: accumulators are a per-tile array
        assert "_tile = " in src and "#pragma omp simd\n" in src + "\n", src


def test_column_reduction_propagates_nan(check: Check) -> None:
    x = torch.randn(50, 96)
    x[7, 3] = float("nan")
    x[20, 90] = float("nan")
    check(lambda x: x.amax(0), x)
    check(lambda x: x.amin(0), x)


def test_column_reduction_with_epilogue_and_stored_intermediate(check: Check) -> None:
    x = torch.randn(128, 256)

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x.exp()
        return y, (y.sum(0) + 3).sqrt()

    check(f, x, atol=1e-4, rtol=1e-4)


@pytest.mark.backends("cpp")
def test_row_reduction_keeps_the_row_loop(check: Check) -> None:
    x = torch.randn(256, 512)
    c = check(lambda x: x.sum(1), x, atol=1e-4, rtol=1e-4)
    src = "\n".join(c.report.kernel_sources.values())
    assert "_tile = " not in src and "reduction(+:" in src


@pytest.mark.backends("cpp")
def test_column_reduction_can_be_turned_off(check: Check) -> None:
    x = torch.randn(64, 256)
    opts = InductorOptions(cpp=CppOptions(column_reductions=False), fallback_on_error=False)
    c = check(lambda x: x.sum(0), x, atol=1e-4, rtol=1e-4, options=opts)
    assert "_tile = " not in "\n".join(c.report.kernel_sources.values())


def test_transposed_operand_of_mm_is_a_view_not_a_copy(check: Check, backend: str) -> None:
    # Linear's backward: the gradient feeds mm(g, W) and mm(g.t(), x) and the bias sum.
    g, x, w = torch.randn(64, 256), torch.randn(64, 128), torch.randn(256, 128)

    def f(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = torch.nn.functional.gelu(g) * 3
        return h @ w, h.t() @ x, h.sum(0)

    c = check(f, g, x, w, atol=1e-4, rtol=1e-4)
    src = "\n".join(c.report.kernel_sources.values())
    # gelu is computed once, stored once (row order), and the sum reads it back
    assert src.count({"cpp": "ember_erff(", "triton": "tl.erf("}[backend]) == 1, src
    assert c.report.wrapper_source.count("empty_strided") == 2  # h and the bias sum


def test_layer_norm_training_graph_has_no_prims_externs(caplog: pytest.LogCaptureFixture) -> None:
    # var_mean has a lowering: torch's decomposition of it must not reach inductor as prims.
    table = decomposition_table()
    assert torch.ops.aten.var_mean.correction not in table
    assert torch.ops.aten.var_mean.dim not in table

    import ember.dynamo as ed

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 8))
    x = torch.randn(16, 32)
    compiled = ed.compile(model, backend="inductor")
    with caplog.at_level(logging.DEBUG, logger="ember.perf_hints"):
        compiled(x).square().mean().backward()
    grads = [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]
    model.zero_grad()
    model(x).square().mean().backward()
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad, atol=1e-5, rtol=1e-4)
    externs = [r.getMessage() for r in caplog.records if "extern kernel for" in r.getMessage()]
    assert externs, "the perf_hints log names every extern call"
    assert not any("prims::" in m for m in externs), externs


def test_simplify_index_undoes_reshape_div_mod() -> None:
    (i,) = index_symbols("x", 1)
    (r,) = index_symbols("r", 1)
    e = i + 512 * ModIndex(r, 64) + 32768 * ModIndex(FloorDiv(r, 64), 8)
    assert simplify_index(e, {i: 512, r: 512}) == i + 512 * r
    # out of range: the mod is real and must stay
    kept = 32 * ModIndex(r, 32) + 2048 * ModIndex(FloorDiv(r, 32), 4)
    assert simplify_index(kept, {r: 384}) == kept
    # three-level split of one index
    e3 = ModIndex(r, 32) + 32 * ModIndex(FloorDiv(r, 32), 4) + 128 * FloorDiv(r, 128)
    assert simplify_index(e3, {r: 1000}) == r
    # unknown range: nothing is assumed
    assert simplify_index(ModIndex(r, 64), {}) == ModIndex(r, 64)
    assert isinstance(simplify_index(sympy.Integer(3), {}), sympy.Integer)


def test_reshape_of_computed_buffer_is_read_in_place(check: Check, backend: str) -> None:
    x = torch.randn(8, 64, 512)
    w = torch.randn(512, 16)

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = x.exp()
        return y.reshape(512, 512) @ w + y.sum((0, 1))[:16]

    c = check(f, x, w, atol=1e-3, rtol=1e-4)
    src = "\n".join(c.report.kernel_sources.values())
    if backend == "cpp":  # (Triton kernels split their flat lane index with // and %)
        assert "% 64" not in src and "/ 64" not in src, src


def test_bool_buffers_are_bytes_and_match_eager(check: Check, backend: str) -> None:
    # bool tensors are loaded and stored as uint8_t (0/1 bytes): a C++ bool load kept
    # gcc from vectorizing the causal-masked softmax loop next to it
    torch.manual_seed(0)
    x = torch.randn(4, 64, 64)
    mask = torch.tril(torch.ones(64, 64, dtype=torch.bool))
    keep = torch.rand(4, 64, 64) > 0.1

    def f(x: torch.Tensor, mask: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, ...]:
        att = torch.softmax(x.masked_fill(~mask, float("-inf")), -1)
        return att * keep / 0.9, keep & (x > 0), (~keep).any(-1), mask.sum(0)

    c = check(f, x, mask, keep, atol=1e-6, rtol=1e-5)
    src = "\n".join(c.report.kernel_sources.values())
    if backend == "cpp":
        assert "const uint8_t* __restrict__ in_arg1" in src and "bool*" not in src


class _GroupNormConv(torch.nn.Module):
    """diffusers' ResnetBlock2D step: GroupNorm, SiLU, a 3x3 convolution, twice."""

    def __init__(self, c: int = 16) -> None:
        super().__init__()
        self.n1, self.c1 = torch.nn.GroupNorm(4, c), torch.nn.Conv2d(c, c, 3, padding=1)
        self.n2, self.c2 = torch.nn.GroupNorm(4, c), torch.nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c1(torch.nn.functional.silu(self.n1(x)))
        return x + self.c2(torch.nn.functional.silu(self.n2(h)))


def test_no_layout_copies_around_extern_convolutions(check: Check, backend: str) -> None:
    """A convolution's output layout follows its input's as this graph realized it, not as
    traced. On a channels-last activation the GroupNorm's traced result is channels-last
    while the kernel writing it is contiguous; ATen's convolution (contiguous weights)
    then returns a contiguous result, which the wrapper copied into the traced
    channels-last layout: one copy per convolution (issue 29, diffusers' VAE decode)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    torch.manual_seed(0)
    model = _GroupNormConv().eval()
    x = torch.randn(2, 16, 12, 12).to(memory_format=torch.channels_last)

    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return model(x)

    c = check(f, x, atol=1e-5, rtol=1e-5)  # values and (channels-last) strides equal eager's
    copies: list[tuple[int, ...]] = []

    class Count(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            # (Triton's interpreter copies one-element tensors of its own)
            if func is torch.ops.aten.copy_.default and args[0].shape == x.shape:
                copies.append(args[0].stride())
            return func(*args, **(kwargs or {}))

    with Count():
        c(x)
    assert not copies, copies


def test_convolution_read_through_as_strided_keeps_the_traced_layout(check: Check) -> None:
    """``as_strided`` reads its input's storage through the traced strides (aotgrad emits
    it for adaptive_avg_pool2d's channels-last restride): a convolution it reads keeps its
    traced layout instead of following its input's realized one."""
    torch.manual_seed(0)
    model = _GroupNormConv().eval()
    x = torch.randn(2, 16, 12, 12).to(memory_format=torch.channels_last)

    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            h = model.c1(torch.nn.functional.silu(model.n1(x)))
            return torch.as_strided(h, (2, 16, 6, 12), h.stride()) * 2

    check(f, x, atol=1e-5, rtol=1e-5)


def test_as_strided_reads_its_argument_in_the_traced_layout(check: Check) -> None:
    """``as_strided``'s strides assume its argument's traced layout; a value ember stores in
    another order (a pointwise result of a channels-last input, stored contiguous) is
    stored in the traced layout first. (Before: wrong values, silently.)"""
    x = torch.randn(2, 16, 6, 5).to(memory_format=torch.channels_last)

    def f(x: torch.Tensor) -> torch.Tensor:
        y = (x * 2).sigmoid()
        return torch.as_strided(y, (2, 16, 3, 5), y.stride()) + 1

    check(f, x)


@pytest.mark.parametrize("how", ["contiguous", "to"])
def test_copy_to_a_memory_format_is_written_by_the_producing_kernel(
    check: Check, backend: str, how: str
) -> None:
    """``x.contiguous(memory_format=torch.channels_last)`` / ``x.to(memory_format=...)`` of
    a computed value (diffusers' Upsample2D after an interpolation) is stored in that layout
    by the kernel computing the value: no ATen call copying a buffer ember wrote."""
    x = torch.randn(2, 8, 5, 6)
    w = torch.randn(4, 8, 3, 3)

    def f(x: torch.Tensor) -> torch.Tensor:
        up = torch.nn.functional.interpolate(x.sigmoid(), scale_factor=2.0, mode="nearest")
        if how == "contiguous":
            cl = up.contiguous(memory_format=torch.channels_last)
        else:
            cl = up.to(memory_format=torch.channels_last)
        return torch.nn.functional.conv2d(cl, w, padding=1) + cl.mean()

    c = check(f, x, atol=1e-4, rtol=1e-4)
    assert not any("clone" in k or "_to_copy" in k for k in c.report.fallbacks), c.report.fallbacks
    assert any("convolution" in k for k in c.report.fallbacks), c.report.fallbacks


@pytest.mark.backends("cpp")
def test_pointwise_kernel_iterates_in_its_stores_memory_order(check: Check) -> None:
    """A pointwise kernel writing a channels-last buffer iterates N, H, W, C (C innermost, the
    store's stride-1 dim), so reads and writes of channels-last tensors are one contiguous
    sweep (one merged loop here) instead of W innermost with stride C."""
    x = torch.randn(2, 16, 6, 5).to(memory_format=torch.channels_last)
    c = check(lambda x: (x * 2).sigmoid(), x)
    src = "\n".join(c.report.kernel_sources.values())
    assert src.count("for (") == 1, src


def _conv_input_formats(c: CompiledGraph, x: torch.Tensor) -> list[bool]:
    """Whether each ATen convolution the compiled graph calls gets a channels-last input."""
    return conv_inputs_channels_last(lambda: c(x))


def _with_running_stats(block: nn.Module) -> nn.Module:
    """``block`` (seeded) with random running statistics in its batch norms, so folding
    them wrongly would show."""
    torch.manual_seed(0)
    for m in block.modules():
        if isinstance(m, nn.BatchNorm2d):
            nn.init.uniform_(m.running_var, 0.5, 2.0)
            nn.init.normal_(m.running_mean)
    return block


def _inverted_residual(c: int = 16) -> nn.Module:
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise, 1x1 project, batch norms, ReLU6."""
    e = 4 * c
    return nn.Sequential(
        nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e), nn.ReLU6(),
        nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False), nn.BatchNorm2d(e), nn.ReLU6(),
        nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c),
    ).eval()


def test_pointwise_and_depthwise_convolutions_run_channels_last(
    check: Check, options: InductorOptions, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Inference graphs whose convolution work is mostly 1x1/depthwise/grouped feed their
    convolutions channels-last inputs (ATen's CPU kernels are faster so: mobilenetv2 1.44x
    in eager); a graph of full 3x3 convolutions keeps NCHW where channels-last is not
    measured faster (ATen converts their weights every call: resnet18 3x slower). Values
    and output strides are eager's either way (``check``)."""
    from ember.inductor import conv_layout

    block = _with_running_stats(_inverted_residual())
    x = torch.randn(2, 16, 10, 10)

    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return x + block(x)

    c = check(f, x, atol=1e-4, rtol=1e-4)
    assert _conv_input_formats(c, x) == [True, True, True]

    full = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3)).eval()

    def g(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return full(x)

    # mostly full 3x3 convolutions: timed both ways (ADR 0059); where channels-last is not
    # measured faster, the graph keeps NCHW
    monkeypatch.setattr(conv_layout, "_measured_faster", lambda convs, hints=None: False)
    monkeypatch.setattr(conv_layout, "_MEASURED", {})
    c = check(g, x, atol=1e-4, rtol=1e-4, options=dataclasses.replace(options, cache_dir=str(tmp_path)))
    assert _conv_input_formats(c, x) == [False, False]


def _squeeze_excite_block(c: int = 16) -> nn.Module:
    """EfficientNet's MBConv middle: depthwise conv, batch norm, SiLU (read twice: by the
    squeeze's mean and by the excite's product), squeeze-excite, 1x1 projection."""

    class SE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False)
            self.bn = nn.BatchNorm2d(c)
            self.fc1 = nn.Conv2d(c, 4, 1)
            self.fc2 = nn.Conv2d(4, c, 1)
            self.project = nn.Conv2d(c, c, 1, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.nn.functional.silu(self.bn(self.dw(x)))
            s = h.mean((2, 3), keepdim=True)
            s = torch.sigmoid(self.fc2(torch.nn.functional.silu(self.fc1(s))))
            return self.project(h * s)

    return SE().eval()


def test_values_stored_between_kernels_keep_their_inputs_memory_order(
    check: Check, backend: str
) -> None:
    """A value ember stores for its own kernels takes the memory order of the input it is
    computed from, as eager's elementwise ops do: in a channels-last network the SiLU that
    the squeeze-excite reads twice is stored channels-last, not contiguous (which made the
    reduction's kernel write it with stride H*W and the product read it transposed)."""
    block = _with_running_stats(_squeeze_excite_block())
    x = torch.randn(2, 16, 10, 10)

    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return block(x)

    c = check(f, x, atol=1e-4, rtol=1e-4)
    assert _conv_input_formats(c, x) == [True, True, True, True]
    if backend == "cpp":
        src = "\n".join(c.report.kernel_sources.values())
        assert "out_buf" in src and _strided_vector_stores(src) == [], src


def _strided_vector_stores(src: str) -> list[str]:
    """Stores inside a C++ kernel's ``omp simd`` loop whose index moves by more than one
    element per iteration of that loop (``out_buf3[(r1 + (100*x1) + ...)]`` in a loop
    over ``x1``): a scatter instead of one contiguous vector store."""
    bad: list[str] = []
    lines = src.splitlines()
    for i, line in enumerate(lines):
        if "#pragma omp simd" not in line:
            continue
        var = re.search(r"for \(int64_t (\w+) =", lines[i + 1])
        if var is None:
            continue
        depth = 0
        for body in lines[i + 1:]:
            depth += body.count("{") - body.count("}")
            store = re.search(r"out_buf\d+\[(.*)\] =", body)
            if store and re.search(rf"\b(\d+)\*{var.group(1)}\b", store.group(1)):
                bad.append(body.strip())
            if depth <= 0:
                break
    return bad


def test_a_graph_of_full_convolutions_takes_the_measured_layout(
    check: Check, options: InductorOptions, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Where 1x1/depthwise work is under half, the layout is decided by timing the graph's
    convolutions both ways once per process (SqueezeNet's small 3x3 convolutions run 1.7x
    faster channels-last, ResNet's 3x slower); values and strides are eager's either way."""
    from ember.inductor import conv_layout

    calls: list[int] = []

    def measured(convs: list[Any], hints: Any = None) -> bool:
        calls.append(len(convs))
        return True

    monkeypatch.setattr(conv_layout, "_measured_faster", measured)
    monkeypatch.setattr(conv_layout, "_MEASURED", {})
    full = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 8, 3)).eval()
    x = torch.randn(2, 16, 10, 10)

    def g(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return full(x)

    fresh = dataclasses.replace(options, cache_dir=str(tmp_path))  # lowered, not read back
    c = check(g, x, atol=1e-4, rtol=1e-4, options=fresh)
    assert _conv_input_formats(c, x) == [True, True]
    assert calls == [2]
    monkeypatch.setattr(conv_layout, "_measured_faster", lambda convs, hints=None: pytest.fail("measured twice"))
    assert conv_layout.prefers_channels_last(c_graph(g, x), torch.device("cpu"))
    assert not conv_layout.prefers_channels_last(c_graph(g, x), torch.device("meta"))


def c_graph(fn: Callable[..., Any], *inputs: Any) -> torch.fx.GraphModule:
    """``fn`` traced to ATen with shapes on its nodes, as the inductor receives it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn)(*inputs)


def test_measured_layout_decision_is_a_bool_from_real_timings() -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    from ember.inductor import conv_layout

    conv = nn.Conv2d(8, 8, 3).eval()
    gm = make_fx(lambda x: conv(x))(torch.randn(1, 8, 9, 9))
    nodes = [n for n in gm.graph.nodes if n.target is torch.ops.aten.convolution.default]
    assert conv_layout._measured_faster(nodes) in (True, False)


def _residual_stream_after_a_convolution() -> Callable[[torch.Tensor], torch.Tensor]:
    """Whisper's encoder in small: ``gelu(conv).permute(0, 2, 1) + pos`` starts a residual
    stream that four layer norm + linear layers read and add to."""
    torch.manual_seed(0)
    pos = torch.randn(12, 16)
    norms = [(torch.randn(16), torch.randn(16)) for _ in range(4)]
    linears = [(torch.randn(16, 16) / 4, torch.randn(16)) for _ in range(4)]

    def f(x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(x).permute(0, 2, 1) + pos
        for (w, b), (lw, lb) in zip(norms, linears):
            h = h + torch.nn.functional.linear(torch.nn.functional.layer_norm(h, (16,), w, b), lw, lb)
        return h

    return f


def test_a_transposed_residual_stream_is_computed_once(check: Check, backend: str) -> None:
    """The GELU is evaluated once and the transposed input read by one kernel only, not by
    every layer's kernel (each recomputed the stream from the convolution's output, strided
    and with erf, until more than four inputs were read)."""
    f = _residual_stream_after_a_convolution()
    c = check(f, torch.randn(2, 16, 12), atol=1e-4, rtol=1e-4)
    if backend == "cpp":
        sources = list(c.report.kernel_sources.values())
        assert sum(s.count("ember_erff(") for s in sources) == 1, sources
        assert sum("in_arg0" in s for s in sources) == 1, sources


def test_a_permuted_view_of_row_major_memory_is_stored_row_major(check: Check, backend: str) -> None:
    """A value read by several kernels follows an input's memory order only where that
    memory is itself in another order (channels-last), not through a permuted view."""

    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.sigmoid(x.permute(0, 2, 1) * 3)  # (2, 12, 16) read from (2, 16, 12)
        return h.sum(-1), torch.softmax(h, -1) + y

    c = check(f, torch.randn(2, 16, 12), torch.randn(2, 12, 16), atol=1e-5, rtol=1e-5)
    if backend == "cpp":
        src = "\n".join(c.report.kernel_sources.values())
        assert _strided_vector_stores(src) == [], src


def _bn_relu(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, w: torch.Tensor,
             b: torch.Tensor) -> torch.Tensor:
    return torch.relu(torch.nn.functional.batch_norm(x, mean, var, w, b, False, 0.1, 1e-5))


@pytest.mark.parametrize("channels_last", [True, False])
def test_per_channel_root_is_computed_once_per_channel(
    check: Check, backend: str, channels_last: bool
) -> None:
    # a batch norm's rsqrt(var + eps) read by a loop over a channels-last activation varies
    # along the innermost index: inlined, it ran once per element (ShuffleNet, 37 -> 20 us);
    # over NCHW the compiler hoists it out of the inner loop, and it stays inlined
    x = torch.randn(2, 24, 32, 32)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    stats = [torch.randn(24), torch.rand(24) + 0.5, torch.randn(24), torch.randn(24)]
    c = check(_bn_relu, x, *stats, atol=1e-5, rtol=1e-5)
    if backend != "cpp":
        return
    roots = [src for src in c.report.kernel_sources.values() if "sqrt" in src]
    assert len(roots) == 1, c.report.kernel_sources
    if channels_last:
        assert len(c.report.kernel_sources) == 2 and "x0 < 24;" in roots[0], roots[0]
    else:
        assert len(c.report.kernel_sources) == 1


def _shuffle(x: torch.Tensor) -> torch.Tensor:
    n, ch, h, w = x.shape
    return x.view(n, 2, ch // 2, h, w).transpose(1, 2).contiguous().view(n, ch, h, w)


def _shuffle_blocks(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    for k in range(4):  # ShuffleNetV2's units: half the channels pass, shuffled with the rest
        a, b = x.chunk(2, dim=1)
        x = _shuffle(torch.cat([a, torch.relu(b * w[k])], 1))
    return x


def test_a_part_of_cat_that_selects_by_position_is_stored(check: Check, backend: str) -> None:
    # inlined, each unit's cat read the previous unit's cat through the shuffle: every
    # element tested four levels of masks at permuted indices (ShuffleNet, 9 ns/element)
    x = torch.randn(2, 16, 4, 4)
    c = check(_shuffle_blocks, x, torch.randn(4, 8, 1, 1))
    if backend != "cpp":
        return
    nested = max(line.count("if (tmp") for src in c.report.kernel_sources.values()
                 for line in src.splitlines())
    assert nested <= 1, c.report.kernel_sources


class _ConvReluConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(8, 16, 3, padding=1)
        self.b = nn.Conv2d(16, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x) * 2 + 1))


def test_a_kernel_computing_in_place_of_an_extern_result_takes_it_as_is(
    check: Check, backend: str
) -> None:
    # the relu is computed in place of the convolution's result: the wrapper bound the new
    # buffer to as_strided(result) with the result's own layout (~2 us per convolution)
    from torch.utils._python_dispatch import TorchDispatchMode

    torch.manual_seed(0)
    model = _ConvReluConv().eval()
    x = torch.randn(2, 8, 16, 16)

    def f(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return model(x)

    c = check(f, x, atol=1e-5, rtol=1e-5)
    same: list[tuple[int, ...]] = []

    class Count(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if func is torch.ops.aten.as_strided.default and args[0].dim() == 4 and (
                    tuple(args[1]), tuple(args[2])) == (args[0].shape, args[0].stride()):
                same.append(tuple(args[1]))
            return func(*args, **(kwargs or {}))

    with Count():
        c(x)
    if backend == "cpp":
        assert not same, same
