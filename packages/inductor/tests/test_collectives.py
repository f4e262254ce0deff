"""Functional collectives (``torch.ops._c10d_functional``) in an ATen graph: extern calls
in graph order, each ``wait_tensor`` before the first reader of its result (ADR 0069).

On a gloo group of one rank in this process; the two-process tensor-parallel graphs are
compiled by ``integration_tests/test_tp.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
import torch.distributed as dist

from ember.inductor import CompiledGraph

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed with gloo is not built"
)
BACKENDS = ("cpp",)


@pytest.fixture
def group_name() -> Iterator[str]:
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD.group_name
    finally:
        dist.destroy_process_group()


def test_all_reduce_and_wait_are_extern_calls_in_order(
    group_name: str, compile_fn: Callable[..., CompiledGraph]
) -> None:
    c10d = torch.ops._c10d_functional

    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        reduced = c10d.wait_tensor(c10d.all_reduce(x * 2, "sum", group_name))
        gathered = c10d.wait_tensor(c10d.all_gather_into_tensor(y.relu(), 1, group_name))
        return reduced.sin() + 1, gathered * reduced.sum()

    x, y = torch.randn(8, 4), torch.randn(3, 4)
    compiled = compile_fn(f, x, y)
    got, want = compiled(x, y), f(x, y)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    assert compiled.report.extern_calls == 4
    source: str = compiled.report.wrapper_source
    lines = source.splitlines()

    def first(text: str) -> int:
        return next(i for i, line in enumerate(lines) if text in line)

    reduce_line, wait_line = first("_c10d_functional::all_reduce"), first("_c10d_functional::wait_tensor")
    assert reduce_line < wait_line
    waited = lines[wait_line].split("=")[0].strip()
    # every kernel reading the reduced value comes after its wait and reads the wait's result
    readers = [i for i, line in enumerate(lines) if i != wait_line and waited in line]
    assert readers and min(readers) > wait_line
