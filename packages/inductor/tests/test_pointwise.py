"""Pointwise ops, type promotion and views, compiled vs eager."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from ember.inductor import CompiledGraph

Check = Callable[..., CompiledGraph]
#: every test here runs with both code generators (Triton in its interpreter)
BACKENDS = ("cpp", "triton")


def test_readme_chain_is_one_kernel(check: Check) -> None:
    x, y = torch.randn(1000, 1000), torch.randn(1000, 1000)
    c = check(lambda a, b: torch.relu(torch.cos(a) + torch.sin(b)) * 2, x, y)
    assert c.report.kernels == 1
    assert c.report.extern_calls == 0


def test_math_and_promotion(check: Check) -> None:
    x = torch.randn(64, 33)
    i = torch.randint(-5, 5, (64, 33))
    b = torch.rand(64, 33) > 0.5

    def f(x, i, b):
        return (
            torch.exp(x) - torch.tanh(x) * torch.sigmoid(x),
            x + i,
            i * 3 + i // 2,
            torch.where(b, x, -x),
            (x > 0) & b,
            torch.remainder(i, 3),
            torch.clamp(x, -0.5, 0.5),
            i.to(torch.float32) / 7,
            torch.erf(x) + torch.log1p(x.abs()),
            torch.maximum(x, torch.zeros_like(x)),
            x.masked_fill(b, 0.0),
            torch.rsqrt(x.abs() + 1),
            torch.nn.functional.gelu(x) + torch.nn.functional.silu(x),
        )

    check(f, x, i, b, atol=1e-5, rtol=1e-4)


def test_nan_propagation(check: Check) -> None:
    x = torch.tensor([1.0, float("nan"), -2.0, float("inf")])
    y = torch.tensor([0.0, 1.0, float("nan"), 2.0])
    check(
        lambda a, b: (
            torch.maximum(a, b),
            torch.minimum(a, b),
            torch.relu(a),
            a.amax(),
            a.argmax(),
        ),
        x,
        y,
    )


def test_float64_and_int_division(check: Check) -> None:
    x = torch.randn(10, 10, dtype=torch.float64)
    i = torch.randint(1, 9, (10, 10))
    check(
        lambda x, i: (
            x.sin() * 2,
            torch.div(i, 3, rounding_mode="floor"),
            torch.div(-i, 4, rounding_mode="trunc"),
        ),
        x,
        i,
    )


def test_views_are_index_math(check: Check) -> None:
    x = torch.randn(8, 16, 4)

    def f(x):
        a = x.permute(2, 0, 1).reshape(4, 128) + 1
        b = x.transpose(0, 1)[2:10:2].sum(-1)
        c = x[:, 3].unsqueeze(1).expand(8, 5, 4).contiguous()
        d = x.view(8, 64).t() * 2
        return a, b, c, d, x.select(2, 1).squeeze()

    check(f, x)


def test_output_strides_match_eager(check: Check) -> None:
    x = torch.randn(6, 7)
    c = check(lambda x: (x.t().cos(), x.t()), x)
    assert c.report.kernels == 1


def test_cat_stack_pad(check: Check) -> None:
    x, y = torch.randn(4, 3), torch.randn(4, 5)

    def f(x, y):
        return (
            torch.cat([x, y], 1).exp(),
            torch.stack([x, x + 1], 0),
            torch.nn.functional.pad(x, (1, 2, 0, 1), value=3.0),
        )

    check(f, x, y)


def test_gather_embedding_index(check: Check) -> None:
    w = torch.randn(50, 8)
    idx = torch.randint(0, 50, (4, 6))
    g = torch.randint(0, 8, (50, 3))

    def f(w, idx, g):
        return (
            torch.nn.functional.embedding(idx, w) * 2,
            torch.gather(w, 1, g),
            w[idx[0]],
            torch.index_select(w, 0, idx[1]),
            w[-idx[2]],
        )

    check(f, w, idx, g)


@pytest.mark.parametrize("op", ["embedding", "index", "index_select"])
def test_out_of_range_index_raises_like_eager(
    compile_fn: Callable[..., CompiledGraph], backend: str, op: str
) -> None:
    # eager raises on an out-of-range index; a generated kernel must too, never read past the end
    w = torch.randn(50, 8)
    fns: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
        "embedding": lambda w, i: torch.nn.functional.embedding(i, w) * 2,
        "index": lambda w, i: w[i] + 1,
        "index_select": lambda w, i: torch.index_select(w, 0, i.flatten()) + 1,
    }
    fn = fns[op]
    good = torch.randint(0, 50, (4, 6))
    compiled = compile_fn(fn, w, good)
    assert compiled.report.extern_calls == 0  # the index is read by generated code, not ATen
    check = {"cpp": "ember_check_index(", "triton": "err_ptr"}[backend]
    assert any(check in src for src in compiled.report.kernel_sources.values())
    torch.testing.assert_close(compiled(w, good), fn(w, good))
    bad = good.clone()
    bad[2, 3] = 50
    with pytest.raises((IndexError, RuntimeError)):
        fn(w, bad)
    with pytest.raises(IndexError, match="out of range"):
        compiled(w, bad)
    torch.testing.assert_close(compiled(w, good), fn(w, good))  # the flag was reset


def test_out_of_range_gather_raises(compile_fn: Callable[..., CompiledGraph]) -> None:
    w = torch.randn(50, 8)
    fn = lambda w, g: torch.gather(w, 1, g) + 1  # noqa: E731
    good = torch.randint(0, 8, (50, 3))
    compiled = compile_fn(fn, w, good)
    assert compiled.report.extern_calls == 0
    torch.testing.assert_close(compiled(w, good), fn(w, good))
    bad = good.clone()
    bad[7, 1] = 8
    with pytest.raises(RuntimeError):
        fn(w, bad)
    with pytest.raises(RuntimeError, match="out of range"):
        compiled(w, bad)


def test_creation_ops(check: Check) -> None:
    x = torch.randn(5, 4)
    check(
        lambda x: (
            x + torch.arange(4),
            torch.ones(5, 4) * x,
            torch.full((3,), 2.5),
            torch.arange(0, 1, 0.25),
        ),
        x,
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_dtypes_roundtrip(check: Check, dtype: torch.dtype) -> None:
    x = torch.randint(0, 3, (7, 9)).to(dtype)
    check(lambda x: (x.clone(), x.to(torch.float64), x == x), x)


def test_cat_of_four_parts_reduced_reads_each_part_only_in_its_range(check: Check) -> None:
    """Swin's patch merging: ``cat`` of four parts along the last dim, then a variance over
    it. Each part's load ran wherever the position was below the part's end, so a middle
    part was read before its start (out of bounds; the select dropped the value), and
    gcc's vectorized masked loads turned that into a wrong variance (1.39 off)."""
    parts = [torch.randn(2, 8, 8, 16) for _ in range(4)]

    def f(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        x = torch.cat([a, b, c, d], -1).view(2, -1, 64)
        return torch.ops.aten.var_mean.correction(x, [2], correction=0, keepdim=True)[0]

    check(f, *parts, atol=1e-5, rtol=1e-5)


def test_small_integer_powers_are_multiplications(check: Check) -> None:
    # GELU's tanh form has x ** 3: ATen computes (x * x) * x and 1 / x for -1, and a
    # libm pow call in the kernel would keep its loop from vectorizing
    x = torch.randn(4, 33) + 0.1
    c = check(lambda x: (x.pow(3.0), torch.pow(x, 3), x.pow(-1), x.pow(2)), x, atol=0, rtol=0)
    assert c.report.kernels == 1 and c.report.extern_calls == 0


def test_graph_constants_are_read(check: Check) -> None:
    x = torch.randn(3, 4)
    check(lambda x: x * torch.tensor([1.0, 2.0, 3.0, 4.0]) + 1, x)


@pytest.mark.backends("cpp")  # the C++ prelude's inline expf
def test_inline_expf_special_values_and_accuracy(check: Check) -> None:
    # the kernels' inline expf: within 1 ulp of the correctly rounded result over the
    # whole normal range; inf/-inf/nan as eager; results below FLT_MIN flushed to 0
    x = torch.cat(
        [
            torch.linspace(-87.3, 88.7, 200_001),
            torch.tensor([float("nan"), float("inf"), float("-inf"), 88.8, -100.0, 0.0]),
        ]
    )
    c = check(lambda x: x.exp(), x, atol=1.2e-38, rtol=1.2e-7)
    got = c(x)
    ref = x.double().exp()
    f32 = torch.finfo(torch.float32)
    normal = torch.isfinite(ref) & (ref >= f32.tiny) & (ref <= f32.max)
    near = ref[normal].float()
    spacing = (torch.nextafter(near, torch.tensor(float("inf"))) - near).double()
    ulps = (got[normal].double() - ref[normal]).abs() / spacing
    assert float(ulps.max()) <= 1.0
    assert got[-2] == 0.0  # exp(-100) = 3.8e-44 is a denormal: flushed
    assert torch.isnan(got[-6]) and got[-5] == float("inf") and got[-4] == 0.0


def _recurrence(k: torch.Tensor, v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A per-step loop writing ``out[:, t] = ...`` (HF RWKV's CPU attention in small), as
    functionalization hands it over: a chain of select_scatters."""
    out = torch.zeros_like(k)
    s = torch.zeros_like(k[:, 0])
    for t in range(k.shape[1]):
        e = torch.exp(k[:, t] - w)
        s = s * 0.5 + e * v[:, t]
        out = torch.select_scatter(out, s / (1 + e), 1, t)
    return out


def test_a_loop_writing_one_position_per_step_computes_each_step_once(
    check: Check, backend: str
) -> None:
    """``out[:, t] = value`` per step is a chain of select_scatters; each step's value was
    computed at every position and the select kept one (O(T^2) exps)."""
    k, v, w = torch.randn(2, 6, 16), torch.randn(2, 6, 16), torch.randn(16)
    c = check(_recurrence, k, v, w, atol=1e-5, rtol=1e-5)
    if backend == "cpp":
        sources = c.report.kernel_sources.values()
        assert sum(s.count("ember_expf(") for s in sources) == 6, list(sources)


@pytest.mark.parametrize("dim,index", [(0, 2), (1, -1), (2, 0), (-1, 3)])
def test_select_scatter_matches_eager(check: Check, dim: int, index: int) -> None:
    x = torch.randn(3, 4, 5)
    src = torch.randn(*(s for d, s in enumerate(x.shape) if d != dim % 3))

    def f(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return torch.select_scatter(x * 2, torch.tanh(src) + 1, dim, index)

    check(f, x, src)


def test_stack_of_costly_parts_computes_each_once(check: Check, backend: str) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.stack([torch.exp(x[i] * (i + 1)) for i in range(5)], 1)

    c = check(f, torch.randn(5, 8, 3), atol=1e-5, rtol=1e-5)
    if backend == "cpp":
        # the parts are stored and the stack only reads them: a kernel without any exp
        # (inlined, the masked parts became one loop that if-converted every part's exp)
        sources = list(c.report.kernel_sources.values())
        assert sum(s.count("ember_expf(") for s in sources) == 5, sources
        assert any("ember_expf(" not in s for s in sources), sources


def test_scalar_overloads_take_alpha_positionally(check: Check) -> None:
    """``add.Scalar(self, other, alpha)`` / ``sub.Scalar`` / ``rsub.Scalar`` have ``alpha``
    positional (the ``.Tensor`` overloads keyword-only); diffusers' Flux graph has one."""
    aten = torch.ops.aten
    x = torch.randn(8, 5)
    c = check(lambda t: aten.add.Scalar(t, 2.0, 3) + aten.sub.Scalar(t, 1.5, 2) + aten.rsub.Scalar(t, 4.0, 0.5), x)
    assert c.report.kernels == 1
