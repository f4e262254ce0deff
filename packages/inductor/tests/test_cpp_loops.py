"""The C++ loop skeleton: what runs once per outer index instead of once per element.

An index read through an indirect access (an embedding row) is the same for every
element of the inner loop; computed inside it, gcc kept its bounds check there and
vectorized the loop with gathers. These tests check results against eager and that
the check sits outside the vectorized loop.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from ember.inductor import CompiledGraph, KernelIndexError

Check = Callable[..., CompiledGraph]


def _checks_inside_simd_loops(src: str) -> list[str]:
    """``ember_check_index`` lines inside the body of an ``omp simd`` loop."""
    return [
        line.strip()
        for body in _simd_bodies(src)
        for line in body.splitlines()
        if "ember_check_index(" in line
    ]


def _src(c: CompiledGraph) -> str:
    return "\n".join(c.report.kernel_sources.values())


def test_embedding_then_layer_norm_checks_each_row_index_once(check: Check) -> None:
    weight, pos = torch.randn(50, 64), torch.randn(16, 64)
    ln_w, ln_b = torch.randn(64), torch.randn(64)
    ids = torch.randint(0, 50, (2, 16))

    def f(ids: torch.Tensor) -> torch.Tensor:
        h = F.embedding(ids, weight) + pos
        return F.layer_norm(h, (64,), ln_w, ln_b)

    c = check(f, ids, atol=1e-5, rtol=1e-5)
    src = _src(c)
    assert "ember_check_index(" in src, src
    assert _checks_inside_simd_loops(src) == [], src


def test_pointwise_gather_checks_each_row_index_once(check: Check) -> None:
    weight = torch.randn(30, 48)
    ids = torch.randint(-30, 30, (5, 7))

    def f(ids: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(weight[ids] * 2)

    c = check(f, ids)
    src = _src(c)
    assert "ember_check_index(" in src, src
    assert _checks_inside_simd_loops(src) == [], src


def test_a_row_index_out_of_range_still_raises(compile_fn: Callable[..., CompiledGraph]) -> None:
    weight, ln_w = torch.randn(10, 32), torch.randn(32)

    def f(ids: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(F.embedding(ids, weight), (32,), ln_w)

    c = compile_fn(f, torch.randint(0, 10, (3, 4)))
    good = torch.randint(0, 10, (3, 4))
    torch.testing.assert_close(c(good), f(good), atol=1e-5, rtol=1e-5)
    bad = good.clone()
    bad[1, 2] = 10
    with pytest.raises(KernelIndexError):
        c(bad)
    torch.testing.assert_close(c(good), f(good), atol=1e-5, rtol=1e-5)


def test_values_computed_in_the_loop_stay_in_it(check: Check) -> None:
    """A running sum, the row's values and what depends on them are not moved; the
    finished sum of an earlier loop is read by a later one."""

    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        rows = x[idx] * 3  # (4, 24)
        s = rows.sum(1, keepdim=True)
        c = rows - s / 24
        return c / (c * c).sum(1, keepdim=True).sqrt()

    x, idx = torch.rand(6, 24) + 0.5, torch.tensor([3, 0, 5, 1])
    c = check(f, x, idx, atol=1e-5, rtol=1e-5)
    assert _checks_inside_simd_loops(_src(c)) == [], _src(c)


def _simd_bodies(src: str) -> list[str]:
    """The body text of every ``omp simd`` loop."""
    bodies: list[str] = []
    lines = src.splitlines()
    for i, line in enumerate(lines):
        if "#pragma omp simd" not in line:
            continue
        depth, body = 0, []
        for text in lines[i + 1 :]:
            depth += text.count("{") - text.count("}")
            body.append(text)
            if depth <= 0:
                break
        bodies.append("\n".join(body[1:]))
    return bodies


def test_a_border_mask_that_is_the_same_along_the_vector_loop_is_versioned(check: Check) -> None:
    """A channels-last max pool: whether a window row or column falls in the padding does
    not depend on the channel (the vectorized index), so the loop over channels is copied
    once per value of those masks, and in each copy the loads are plain (gcc 12 left the
    loop with the masked loads scalar)."""
    x = torch.randn(2, 24, 9, 8).to(memory_format=torch.channels_last)

    def f(x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(torch.relu(x), 3, 2, 1)

    c = check(f, x)
    src = _src(c)
    bodies = _simd_bodies(src)
    assert any("if (true)" in b for b in bodies), src
    assert any(re.search(r"\bif \(tmp\d+\)", b) is None for b in bodies if "if (true)" in b), src


def test_versioned_loops_match_eager_at_every_border(check: Check) -> None:
    """Padding on both sides of both spatial dims, a reduction kernel reading a padded
    value, and parts of a cat along an outer dim: every combination of masks runs."""
    x = torch.randn(2, 5, 7, 6).to(memory_format=torch.channels_last)

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        p = F.pad(torch.sigmoid(x), (2, 1, 1, 3), value=0.5)
        c = torch.cat([p[:, :, :4] * 2, torch.exp(p[:, :, 4:])], 2)
        return c + 1, p.sum(1)

    check(f, x, atol=1e-5, rtol=1e-5)
