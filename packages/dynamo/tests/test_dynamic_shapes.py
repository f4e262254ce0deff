"""Dynamic shapes in capture: symbolic dimensions, their guards, automatic dynamic, the API.

Every compiled call is compared with eager; graph counts are asserted.
"""

from __future__ import annotations

import logging

import pytest
import torch

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounter
from ember.ir import GuardKind


@pytest.fixture(autouse=True)
def _reset() -> None:
    ed.reset()


def run_sizes(fn, make, sizes, **compile_kw):  # type: ignore[no-untyped-def]
    cnt = CompileCounter()
    compiled = ed.compile(fn, backend=cnt, **compile_kw)
    for n in sizes:
        args = make(n)
        torch.testing.assert_close(compiled(*args), fn(*args))
    return cnt, compiled


def arith(x: torch.Tensor) -> torch.Tensor:
    b, s = x.shape[0], x.size(1)
    heads = 4
    y = x.view(b, s, heads, x.size(-1) // heads).transpose(1, 2)
    z = y.reshape(b * heads, s, -1) * (x.shape[1] * 2)
    return z.sum(-1) + torch.arange(s) + x.new_zeros(b * heads, s)


SIZES = [(2, 3), (3, 5), (4, 7), (5, 9), (6, 11), (7, 13)]


def test_automatic_dynamic_recompiles_once() -> None:
    cnt, _ = run_sizes(arith, lambda bs: (torch.randn(bs[0], bs[1], 16),), SIZES)
    assert cnt.frame_count == 2
    assert not any(isinstance(v, torch.SymInt) for v in cnt.graphs[0].graph.nodes)  # first: static
    first = [n for n in cnt.graphs[1].graph.nodes if n.op == "placeholder"][0]
    shape = first.meta["example_value"].shape
    assert [str(s) for s in shape] == ["s0", "s1", "16"]


def test_dynamic_true_compiles_one_graph() -> None:
    cnt, _ = run_sizes(arith, lambda bs: (torch.randn(bs[0], bs[1], 16),), SIZES, dynamic=True)
    assert cnt.frame_count == 1


def test_mark_dynamic_compiles_one_graph() -> None:
    def make(bs: tuple[int, int]) -> tuple[torch.Tensor]:
        x = torch.randn(bs[0], bs[1], 16)
        ed.mark_dynamic(x, 0)
        ed.mark_dynamic(x, 1)
        return (x,)

    cnt, _ = run_sizes(arith, make, SIZES)
    assert cnt.frame_count == 1


def test_dynamic_false_keeps_specializing() -> None:
    cnt, _ = run_sizes(arith, lambda bs: (torch.randn(bs[0], bs[1], 16),), SIZES[:4], dynamic=False)
    assert cnt.frame_count == 4


def test_mark_static_wins_over_dynamic_true() -> None:
    def make(n: int) -> tuple[torch.Tensor]:
        x = torch.randn(n, 8)
        ed.mark_static(x, 0)
        return (x,)

    cnt, _ = run_sizes(lambda x: x * 2, make, [3, 4, 5], dynamic=True)
    assert cnt.frame_count == 3


def test_mark_dynamic_bounds_are_guarded() -> None:
    def make(n: int) -> tuple[torch.Tensor]:
        x = torch.randn(n, 8)
        ed.mark_dynamic(x, 0, min=3, max=6)
        return (x,)

    cnt, _ = run_sizes(lambda x: x.sum(0) * x.shape[0], make, [3, 4, 6, 9])
    assert cnt.frame_count == 2  # 9 is past max=6


def test_branch_on_a_size_guards_it_and_recompiles_on_the_other_side(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 4:
            return x * 2
        return x - 1

    ed.set_logs(recompiles=True)
    try:
        with caplog.at_level(logging.INFO, logger="ember.recompiles"):
            cnt, compiled = run_sizes(f, lambda n: (torch.randn(n, 3),), [6, 7, 8, 9, 2, 3])
    finally:
        ed.set_logs()
    assert cnt.frame_count == 3  # 6 static, then s0 > 4 dynamic, then s0 <= 4 dynamic
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "L['x'].size()[0] was 7, the graph assumed 6" in text
    assert "compiling" not in text or "dynamic dimensions: s0 = L['x'].size()[0]" in text
    assert "L['x'].size()[0] was 2; the graph assumed L['x'].size()[0] > 4" in text
    assert "the program branched on it at" in text and "`if x.shape[0] > 4:`" in text


def test_shape_guards_are_shape_expr_with_sources() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y

    x, y = torch.randn(5, 3), torch.randn(5, 3)
    ed.mark_dynamic(x, 0)
    ed.mark_dynamic(y, 0)
    out = ed.explain(f)(x, y)
    guards = [g for gs in out.out_guards for g in gs.guards]
    tensor = {g.source.expr(): g.payload for g in guards if g.kind is GuardKind.TENSOR_MATCH}
    assert tensor["L['x']"]["sizes"] == [None, 3] and tensor["L['x']"]["strides"] == [3, 1]
    shape = {g.payload["expr"]: g.payload for g in guards if g.kind is GuardKind.SHAPE_EXPR}
    assert shape["s0 >= 2"]["symbols"] == {"s0": "L['x'].size()[0]"}
    assert "Eq(s0_1, s0)" in shape  # duck sizing: y's dim 0 has x's size
    assert shape["Eq(s0_1, s0)"]["symbols"] == {"s0": "L['x'].size()[0]", "s0_1": "L['y'].size()[0]"}


def test_duck_sizing_splits_when_sizes_differ() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.sum() + y.sum() * y.shape[0]

    cnt, _ = run_sizes(f, lambda n: (torch.randn(n), torch.randn(n if n < 6 else 7)),
                       [4, 5, 6, 8], dynamic=True)
    assert cnt.frame_count == 2  # equal sizes shared a symbol; unequal ones need their own


def test_symbolic_strides_are_guarded() -> None:
    cnt = CompileCounter()
    compiled = ed.compile(lambda x: x.reshape(-1) * 2, backend=cnt, dynamic=True)
    x = torch.randn(4, 6)
    torch.testing.assert_close(compiled(x), x.reshape(-1) * 2)
    t = torch.randn(6, 4).t()  # same sizes, transposed strides
    torch.testing.assert_close(compiled(t), t.reshape(-1) * 2)
    assert cnt.frame_count == 2


def test_range_over_a_size_specializes() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        total = x[0]
        for i in range(1, x.shape[0]):
            total = total + x[i]
        return total

    cnt, _ = run_sizes(f, lambda n: (torch.randn(n, 3),), [3, 3, 4, 4], dynamic=True)
    assert cnt.frame_count == 2  # the loop length is a guarded constant


def test_size_returned_from_the_frame_is_computed_by_the_graph() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, int, torch.Size]:
        return x * 2, x.shape[0] * 3, x.shape

    cnt = CompileCounter()
    compiled = ed.compile(f, backend=cnt, dynamic=True)
    for n in (3, 5, 8):
        out, k, shape = compiled(torch.ones(n, 2))
        assert k == 3 * n and shape == torch.Size([n, 2]) and type(shape) is torch.Size
    assert cnt.frame_count == 1


def test_shapes_compare_and_format() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        assert x.shape == y.shape, f"shapes {x.shape} differ"
        return x + y + len(x)

    cnt, _ = run_sizes(f, lambda n: (torch.randn(n, 2), torch.randn(n, 2)), [3, 4, 5], dynamic=True)
    assert cnt.frame_count == 1


def test_slicing_with_a_symbolic_bound() -> None:
    def f(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x + mask[:, : x.shape[1]]

    cnt, _ = run_sizes(
        f, lambda n: (torch.randn(2, n), torch.randn(2, 16)), [3, 5, 7, 9], dynamic=True
    )
    assert cnt.frame_count == 1


def test_mark_static_address_is_accepted() -> None:
    x = torch.randn(3)
    ed.mark_static_address(x)
    assert ed.compile(lambda t: t + 1, backend="eager")(x).shape == (3,)


def test_mark_dynamic_rejects_a_bad_dimension() -> None:
    with pytest.raises(IndexError, match="dimension 2 is out of range for a 2-d tensor"):
        ed.mark_dynamic(torch.randn(2, 2), 2)


def test_dynamic_true_does_not_warn() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ed.compile(lambda x: x, backend="eager", dynamic=True)


def test_constant_tuple_plus_a_symbolic_shape() -> None:
    # GPT-2's `output_shape = (-1,) + input_shape[1:] + (hidden_states.size(-1),)`
    def f(x: torch.Tensor) -> torch.Tensor:
        shape = (-1,) + x.shape[1:] + (x.size(-1),)
        return x.unsqueeze(-1).expand(*x.shape, x.size(-1)).reshape(shape) * 2

    cnt, _ = run_sizes(f, lambda n: (torch.randn(2, n, 3),), [4, 5, 7], dynamic=True)
    assert cnt.frame_count == 1 and len(cnt.graphs) == 1


def sliced_by_size(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n = y.shape[0]
    out = x.clone()
    out[1:n] = 0.0  # STORE_SLICE on 3.12+
    return x[:n] * 2, out  # BINARY_SLICE on 3.12+


def test_slicing_by_a_symbolic_size_does_not_recompile() -> None:
    """``x[a:b]`` compiles to BINARY_SLICE/STORE_SLICE on Python 3.12+, which read the
    bounds as constants: every new length recompiled there (5 graphs for 5 lengths)."""
    cnt, _ = run_sizes(sliced_by_size, lambda n: (torch.randn(12), torch.randn(n)), [3, 4, 5, 6, 7])
    assert cnt.frame_count == 2


def fill_a_view(x: torch.Tensor) -> torch.Tensor:
    x.permute(1, 0).masked_fill_(x.t() > 0, 1.0)
    return x * 2


def test_a_computed_input_stays_a_computed_tensor_with_symbolic_sizes() -> None:
    """An input computed from a leaf (``w * 1``) may be written through a view; its fake
    tensor with symbolic sizes was a leaf, where that raises, so every grown call broke
    the graph (fuzz seed 34 under ``tools/fuzz.py recompiles``)."""
    compiled = ed.compile(fill_a_view, backend="aot_eager", fullgraph=True)
    for n in (3, 4, 5, 6):
        w_e = torch.randn(n, n + 1, requires_grad=True)
        w_c = w_e.detach().clone().requires_grad_()
        out_e, out_c = fill_a_view(w_e * 1), compiled(w_c * 1)
        torch.testing.assert_close(out_c, out_e)
        out_e.sum().backward()
        out_c.sum().backward()
        torch.testing.assert_close(w_c.grad, w_e.grad)


def rank_by_branch(x: torch.Tensor, flat: bool) -> tuple[torch.Tensor, int]:
    y = x.flatten() if flat else x * 2
    print("a graph break: `y` is a local of the resume function")
    return y + 1, y.shape[0]


def test_a_local_of_two_ranks_still_goes_dynamic(capsys: pytest.CaptureFixture[str]) -> None:
    """One local, a 1-d tensor on one branch and a 2-d one on the other: its size history
    was replaced on each change of rank, so it never went dynamic and every new size
    recompiled (fuzz seed 218 under ``tools/fuzz.py recompiles``)."""
    cnt = CompileCounter()
    compiled = ed.compile(rank_by_branch, backend=cnt)
    for flat in (False, True):
        x = torch.randn(3, 4)
        assert compiled(x, flat)[1] == rank_by_branch(x, flat)[1]
    before = cnt.frame_count
    for n in (5, 6, 7, 8):
        x = torch.randn(n, 4)
        for got, want in zip(compiled(x, False), rank_by_branch(x, False), strict=True):
            torch.testing.assert_close(got, want)
    # the function and its resume function recompile once each, both dynamic at once
    assert cnt.frame_count == before + 2
