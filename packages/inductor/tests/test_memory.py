"""What a compiled call holds while it runs (``memory_plan.py``, ``codegen/wrapper.py``, ADR 0063).

Each test measures the call's peak with torch's profiler (every allocation and free of
the CPU allocator, in order; the bench's ``peak MB`` column counts the same way) and
compares it with the sizes of the tensors that must be alive at the peak.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from ember.inductor import CompiledGraph
from ember.inductor.testing import peak_cpu_bytes

BACKENDS = ("cpp", "triton")

N = 256  # x: N x N float32, 256 KiB




def _three_matmuls(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.mm(torch.mm(torch.mm(x, w), w), w)


@pytest.mark.backends("cpp")  # Triton on CPU runs in its interpreter, which copies its arguments
def test_a_boxed_call_frees_each_input_after_its_last_use(
    compile_fn: Callable[..., CompiledGraph],
) -> None:
    """``x`` is read by the first matmul only: handed over (``call_boxed``), it is freed
    there, so the third matmul's output is allocated while two N x N values are alive
    (its input and itself), not three. Called plainly, the caller holds ``x`` throughout."""
    w = torch.randn(N, N) / N**0.5
    compiled = compile_fn(_three_matmuls, torch.randn(N, N), w)
    size = N * N * 4
    result: list[torch.Tensor] = []

    def boxed() -> None:
        args = [torch.randn(N, N), w]  # allocated inside the profile: its free is seen
        result.append(compiled.call_boxed(args))
        assert args == []  # handed over: the caller holds nothing

    peak = peak_cpu_bytes(boxed)
    # x (alive before the call), then at most two N x N values at once
    assert peak <= 2 * size + size // 8, peak / size

    x = torch.randn(N, N)
    torch.testing.assert_close(result[0].shape, torch.Size([N, N]))
    torch.testing.assert_close(compiled.call_boxed([x.clone(), w]), _three_matmuls(x, w))
    torch.testing.assert_close(compiled(x, w), _three_matmuls(x, w))  # a plain call as before


def _reuse_chain(x: torch.Tensor, w: torch.Tensor, wide: torch.Tensor) -> torch.Tensor:
    a = x.sin()
    b = torch.mm(a, w)
    c = b.cos()  # a is dead: c takes its memory
    d = torch.mm(c, w)
    return torch.mm(d, wide)  # c is dead: its memory must be free before this allocation


def test_a_reused_buffer_is_freed_with_the_buffer_that_took_it(
    compile_fn: Callable[..., CompiledGraph], backend: str,
) -> None:
    """``c`` reuses the memory of ``a``; once ``c`` is dead nothing may hold that memory
    (the name ``a`` stayed bound and held it to the end of the call)."""
    w = torch.randn(N, N) / N**0.5
    wide = torch.randn(N, 4 * N) / N**0.5
    x = torch.randn(N, N)
    compiled = compile_fn(_reuse_chain, x, w, wide)
    source = compiled.report.wrapper_source
    reuses = re.findall(r"(buf\d+) = .*# (?:reuses|in place of) (buf\d+)", source)
    assert reuses, source  # the graph does reuse a dead buffer
    lines = source.splitlines()
    for new, old in reuses:
        at = next(i for i, ln in enumerate(lines) if f"{new} = " in ln and f" {old}" in ln)
        assert any(ln.strip() == f"del {old}" for ln in lines[at:]), (old, source)
    if backend == "cpp":  # Triton on CPU runs in its interpreter, which copies its arguments
        size = N * N * 4
        peak = peak_cpu_bytes(lambda: compiled(x, w, wide))
        # at the last matmul: d and the 4x wide output (x, w, wide are the caller's)
        assert peak <= 5 * size + size // 8, peak / size
    torch.testing.assert_close(compiled(x, w, wide), _reuse_chain(x, w, wide), rtol=1e-4, atol=1e-4)


def _scaled_matmul(a: torch.Tensor, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    g = torch.mm(a, w)
    h = g * x.sigmoid()  # g read for the last time, element by element: h overwrites it
    return torch.mm(h, w)


def test_a_pointwise_kernel_computes_in_place_of_a_value_it_reads_last(
    compile_fn: Callable[..., CompiledGraph], backend: str,
) -> None:
    a, w, x = torch.randn(N, N), torch.randn(N, N) / N**0.5, torch.randn(N, N)
    compiled = compile_fn(_scaled_matmul, a, w, x)
    assert "# in place of" in compiled.report.wrapper_source, compiled.report.wrapper_source
    torch.testing.assert_close(compiled(a, w, x), _scaled_matmul(a, w, x), rtol=1e-4, atol=1e-4)
    if backend == "cpp":
        size = N * N * 4
        # g (then h in its memory) and the last matmul's output; not g, h and the output
        assert peak_cpu_bytes(lambda: compiled(a, w, x)) <= 2 * size + size // 8


def _transposed(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    g = torch.mm(a, w)
    return torch.mm(g.t() + g, w)  # element (i, j) reads g[i, j] and g[j, i]: not in place


def _read_after_write(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    g = torch.mm(a, w)
    s1 = g * 2
    s2 = g + s1  # reads g after s1 is computed: s1 may not overwrite g
    return torch.mm(s1, w) + torch.mm(s2, w)


@pytest.mark.parametrize("fn", [_transposed, _read_after_write])
def test_a_value_read_elsewhere_or_later_is_not_overwritten(
    compile_fn: Callable[..., CompiledGraph], fn: Callable[..., torch.Tensor],
) -> None:
    a, w = torch.randn(N, N), torch.randn(N, N) / N**0.5
    compiled = compile_fn(fn, a, w)
    torch.testing.assert_close(compiled(a, w), fn(a, w), rtol=1e-4, atol=1e-4)
    if fn is _transposed:
        assert "# in place of" not in compiled.report.wrapper_source


def _two_gradients(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.mm(a, w) + torch.mm(b, w)  # a tied weight's two gradients, added


def test_a_graph_output_is_computed_in_place_of_a_value_it_reads_last(
    compile_fn: Callable[..., CompiledGraph], backend: str,
) -> None:
    """The sum returned takes the memory of one of the two products: the caller keeps it
    (nobody else holds it). A fresh output buffer made the peak three N x N values, not
    two: a tied embedding's gradients in a training step (ADR 0063's vit_gpt2_train)."""
    a, w, b = torch.randn(N, N), torch.randn(N, N) / N**0.5, torch.randn(N, N)
    compiled = compile_fn(_two_gradients, a, w, b)
    assert "# in place of" in compiled.report.wrapper_source, compiled.report.wrapper_source
    out = compiled(a, w, b)
    torch.testing.assert_close(out, _two_gradients(a, w, b), rtol=1e-4, atol=1e-4)
    if backend == "cpp":
        size = N * N * 4
        assert peak_cpu_bytes(lambda: compiled(a, w, b)) <= 2 * size + size // 8
        again = compiled(a, w, b)  # each call's output is its own memory
        assert again.data_ptr() != out.data_ptr() and torch.equal(again, out)


def test_a_kernel_never_computes_in_place_of_what_an_in_place_extern_returned(
    tmp_path: Path,
) -> None:
    """``x.mul_(2)`` runs as an ATen call returning ``x`` itself: a later kernel reading its
    result for the last time must not take that memory (it is the caller's input). The
    in-place kernels of ADR 0063 overwrote ``x`` with ``x * 2 + y``."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from ember.inductor import InductorOptions, compile_graph

    def fn(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        x.mul_(2)
        z = x + y
        return [torch.mm(z.view(2, 2), torch.eye(2)).view(4) * 3]

    gm = make_fx(fn)(torch.randn(4), torch.randn(4))
    c = compile_graph(gm, [torch.randn(4), torch.randn(4)],
                      InductorOptions(cache_dir=str(tmp_path), fallback_on_error=False))
    x, y = torch.randn(4), torch.randn(4)
    x_ref, y_ref = x.clone(), y.clone()
    want = fn(x_ref, y_ref)
    got = c(x, y)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(x, x_ref)  # the caller's x holds x * 2, as eager leaves it
