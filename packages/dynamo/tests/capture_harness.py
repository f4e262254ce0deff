"""Shared driver for the capture corpus: compile, compare with eager, count.

A ``Case`` is a function (or module) plus ``make(n)``, which builds fresh
arguments for size ``n``. ``check_case`` runs it compiled twice at one size
(the second call must hit the cache) and once at another size (exactly one
recompile), comparing every result, every mutated argument and the
function's global side effects with eager PyTorch.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounter


@dataclass
class Case:
    name: str
    fn: Callable[..., Any]
    make: Callable[[int], tuple[Any, ...]]
    ops: int | None = None  # exact op count per graph, when pinned
    graphs: int = 1  # graphs per compile
    recompiles: int = 1  # compiles triggered by the new size
    atol: float = 1e-5


def assert_same(got: Any, want: Any, where: str = "result", atol: float = 1e-5) -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{where}: expected a tensor, got {type(got)}"
        assert got.shape == want.shape, f"{where}: shape {got.shape} != {want.shape}"
        assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} != {want.dtype}"
        assert got.requires_grad == want.requires_grad, f"{where}: requires_grad differs"
        torch.testing.assert_close(got, want, atol=atol, rtol=1e-4, equal_nan=True, msg=where)
        return
    if isinstance(want, (list, tuple)):
        assert type(got) is type(want), f"{where}: {type(got)} != {type(want)}"
        assert len(got) == len(want), f"{where}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{where}[{i}]", atol)
        return
    if isinstance(want, dict):
        assert type(got) is type(want) and list(got) == list(want), f"{where}: keys differ"
        for k in want:
            assert_same(got[k], want[k], f"{where}[{k!r}]", atol)
        return
    assert got == want, f"{where}: {got!r} != {want!r}"


def clone_args(args: tuple[Any, ...]) -> tuple[Any, ...]:
    def one(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            c = a.detach().clone()
            c.requires_grad_(a.requires_grad)
            return c
        if isinstance(a, torch.nn.Module):
            return copy.deepcopy(a)
        return a

    return tuple(pytree.tree_map(one, list(args)))


def run_pair(
    fn: Callable[..., Any], compiled: Callable[..., Any], args: tuple[Any, ...], atol: float
) -> None:
    eager_args = clone_args(args)
    torch.manual_seed(0)
    want = fn(*eager_args)
    torch.manual_seed(0)
    got = compiled(*args)
    assert_same(got, want, "result", atol)
    for i, (a, b) in enumerate(zip(args, eager_args, strict=True)):
        if isinstance(b, (torch.Tensor, list, dict)):
            assert_same(a, b, f"argument {i} after the call", atol)


def tensor_ops(gm: torch.fx.GraphModule) -> int:
    """Call nodes of ``gm`` other than symbolic size arithmetic."""
    return sum(
        1 for n in gm.graph.nodes
        if n.op in ("call_function", "call_method", "call_module")
        and not isinstance(n.meta.get("example_value"), (torch.SymInt, torch.SymFloat, torch.SymBool))
    )


def check_case(case: Case) -> CompileCounter:
    ed.reset()
    cnt = CompileCounter()
    compiled = ed.compile(case.fn, backend=cnt, fullgraph=True)
    # A stateful module (buffers, attributes) runs eagerly on its own copy,
    # so both sides see the same sequence of calls.
    eager = copy.deepcopy(case.fn) if isinstance(case.fn, torch.nn.Module) else case.fn
    torch.manual_seed(1)
    run_pair(eager, compiled, case.make(4), case.atol)
    assert cnt.frame_count == case.graphs, f"{case.name}: {cnt.frame_count} graphs, want {case.graphs}"
    first_ops = cnt.op_count
    if case.ops is not None:
        assert first_ops == case.ops, f"{case.name}: {first_ops} ops, want {case.ops}"
    if case.graphs:
        assert first_ops > 0, f"{case.name}: graph has no ops"
    torch.manual_seed(2)
    run_pair(eager, compiled, case.make(4), case.atol)
    assert cnt.frame_count == case.graphs, f"{case.name}: second call recompiled (cache miss)"
    torch.manual_seed(3)
    run_pair(eager, compiled, case.make(6), case.atol)
    want_graphs = case.graphs * (1 + case.recompiles)
    assert cnt.frame_count == want_graphs, (
        f"{case.name}: {cnt.frame_count} graphs after a new shape, want {want_graphs}"
    )
    if case.graphs and case.recompiles:
        # the recompile is dynamic (automatic dynamic shapes): besides the same
        # tensor ops it reads the symbolic sizes it uses (``x.size(0)``, arithmetic)
        first, last = cnt.graphs[: case.graphs], cnt.graphs[case.graphs :]
        assert sum(map(tensor_ops, last)) == sum(map(tensor_ops, first)), (
            f"{case.name}: recompiled graph has other ops"
        )
    return cnt
