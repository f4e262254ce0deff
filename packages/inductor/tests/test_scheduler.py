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
    # a dead buffer's memory taken by a later kernel, or a matmul's result overwritten by
    # the pointwise kernel reading it for the last time (``memory_plan._dying_operand``)
    source = c.report.wrapper_source
    assert "# reuses" in source or "# in place of" in source, source


def test_dead_buffer_no_later_kernel_can_take_is_freed_at_once(check: Check) -> None:
    """A dead buffer goes to the reuse pool only while a later kernel output of its size is
    still to come; otherwise it is dropped when it dies, not held to the end of the call
    (densenet's concatenations, each size once, peaked at 3.6x eager's memory)."""
    x, w = torch.randn(16, 16), torch.randn(16, 16)

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        a = x.exp() @ w  # the exp's buffer dies here; no later kernel output is 16x16
        b = torch.cat([a, a * 2], 1) @ torch.cat([w, w])  # cheap parts: not stored apart
        return b.sum(1)

    c = check(f, x, w, atol=1e-4, rtol=1e-4)
    src = c.report.wrapper_source
    lines = src.splitlines()
    exp_buf = next(ln.split(" = ")[0].strip() for ln in lines if "empty_strided((16, 16)" in ln)
    dies = next(i for i, ln in enumerate(lines) if "_c[" in ln and f"({exp_buf}," in ln)
    assert f"del {exp_buf}" in "\n".join(lines[dies:dies + 4]), src


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
