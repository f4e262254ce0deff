"""Fusion decisions, buffer elision and reuse, read from the generated wrapper and kernels."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ember.inductor import CompiledGraph

Check = Callable[..., CompiledGraph]
#: every test here runs with both code generators (Triton in its interpreter)
BACKENDS = ("cpp", "triton")


def test_horizontal_fusion_of_siblings(check: Check) -> None:
    x = torch.randn(256, 64)
    c = check(lambda x: (x.sin(), x.cos() * 2, x + 1), x)
    assert c.report.kernels == 1


def test_intermediates_stay_in_registers(check: Check) -> None:
    x = torch.randn(128, 128)
    c = check(lambda x: ((x * 2).exp() + 1).relu(), x)
    assert c.report.wrapper_source.count("empty_strided") == 1


def test_reduction_epilogue_and_prologue_fuse(check: Check) -> None:
    x = torch.randn(64, 100)
    c = check(
        lambda x: (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-5),
        x,
        atol=1e-4,
        rtol=1e-4,
    )
    assert c.report.kernels == 1


def test_dead_buffer_is_reused(check: Check) -> None:
    x = torch.randn(64, 64)
    w = torch.randn(64, 64)

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        a = (x.exp() @ w).sin()
        b = (a.cos() @ w).tanh()
        return (b.sigmoid() @ w) * 3

    c = check(f, x, w, atol=1e-4, rtol=1e-4)
    assert "# reuses" in c.report.wrapper_source


def test_extern_between_kernels_keeps_order(check: Check) -> None:
    x, w = torch.randn(32, 16), torch.randn(16, 16)
    c = check(lambda x, w: torch.relu(x.exp() @ w) @ w.t(), x, w, atol=1e-4, rtol=1e-4)
    assert c.report.extern_calls == 2 and c.report.fallbacks == {"aten::mm": 2}


def test_fusion_cycle_check_follows_kernels_not_only_nodes() -> None:
    # CLIP's backward: node 4 reads node 3; kernel [1, 3] has one member (1) reading
    # kernel [0] and another (3) that node 4 needs. Putting 4 into [0] makes [0, 4] and
    # [1, 3] depend on each other, though no chain of single nodes leads from 0 to 3.
    from ember.inductor.fusion import _creates_cycle

    users = [{1}, set(), set(), {4}, set()]
    groups = [[0], [1, 3], [2]]
    group_of = {0: 0, 1: 1, 3: 1, 2: 2}
    assert _creates_cycle({0}, {3}, users, group_of, groups)
    # with 1 and 3 in separate kernels there is no cycle
    groups = [[0], [1], [2], [3]]
    group_of = {0: 0, 1: 1, 2: 2, 3: 3}
    assert not _creates_cycle({0}, {3}, users, group_of, groups)
