"""Functionalization: mutations leave the graph, but their effects match eager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from ember.aotgrad import FunctionalizationError, aot_function, nop_compiler, trace_graph

aten = torch.ops.aten


def _clone_all(args: list[torch.Tensor]) -> list[torch.Tensor]:
    return [a.detach().clone().requires_grad_(a.requires_grad) for a in args]


def run_both(fn: Callable[..., Any], args: list[torch.Tensor]) -> tuple[Any, Any, list, list]:
    eager_args = _clone_all(args)
    comp_args = _clone_all(args)
    compiled = aot_function(fn, nop_compiler)
    return fn(*eager_args), compiled(*comp_args), eager_args, comp_args


def _assert_no_mutation(fn: Callable[..., Any], args: list[torch.Tensor]) -> None:
    traced = trace_graph(lambda *a: [fn(*a)], args, {}, joint=False)
    for node in traced.gm.graph.nodes:
        if node.op == "call_function" and hasattr(node.target, "_schema"):
            schema = node.target._schema
            assert not any(a.alias_info is not None and a.alias_info.is_write
                           for a in schema.arguments), f"{node.format_node()} mutates"


def add_to_input(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.add_(y)
    return x * 2


def mutate_through_view(x: torch.Tensor) -> torch.Tensor:
    x[1].mul_(3)
    x[:, 0].add_(1)
    return x.sum(0)


def mutate_intermediate_view(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y.view(-1)[::2].zero_()
    y.t()[0].fill_(7)
    return y + 1


def copy_into_buffer(x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    buf.copy_(x.mean(0))
    return x - buf


def split_and_write(x: torch.Tensor) -> torch.Tensor:
    a, b = x.split(2, dim=0)
    b.mul_(10)
    return x.clone()


def dtype_changing_inplace(x: torch.Tensor) -> torch.Tensor:
    i = torch.zeros(x.shape)  # float32: add_ keeps it, add would give float64
    i.add_(x.double() * 3)
    assert i.dtype == torch.float32
    return i


@pytest.mark.parametrize("fn,shapes", [
    (add_to_input, [(3, 4), (3, 4)]),
    (mutate_through_view, [(3, 4)]),
    (mutate_intermediate_view, [(4, 4)]),
    (copy_into_buffer, [(5, 3), (3,)]),
    (split_and_write, [(4, 3)]),
    (dtype_changing_inplace, [(3, 3)]),
])
def test_mutations_match_eager_and_graph_is_functional(fn: Callable[..., Any], shapes: list) -> None:
    torch.manual_seed(0)
    args = [torch.randn(s) for s in shapes]
    out_e, out_c, args_e, args_c = run_both(fn, args)
    torch.testing.assert_close(out_c, out_e)
    for a_c, a_e in zip(args_c, args_e):
        torch.testing.assert_close(a_c, a_e)  # input mutations were applied back
    _assert_no_mutation(fn, args)


def test_mutated_inputs_are_reported_and_returned_first() -> None:
    traced = trace_graph(lambda x, y: [add_to_input(x, y)], [torch.randn(2), torch.randn(2)], {},
                         joint=False)
    assert traced.mutated_inputs == (0,)
    assert traced.num_fw_outputs == 2


def test_mutating_a_non_leaf_input_that_requires_grad_backprops_like_eager() -> None:
    torch.manual_seed(0)
    w = torch.randn(3, 3, requires_grad=True)

    def f(x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x.sin()

    compiled = aot_function(f, nop_compiler)
    results = []
    for run in (f, compiled):
        w.grad = None
        x = w * 1.5  # non-leaf, requires grad
        out = run(x)
        (out.sum() + x.pow(2).sum()).backward()  # x has the mutated value and history
        results.append((out.detach(), x.detach(), w.grad.clone()))
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want)


def test_outputs_that_are_views_of_inputs_stay_views() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return x.view(-1), x.t(), x

    x = torch.randn(3, 4)
    compiled = aot_function(f, nop_compiler)
    flat, t, same = compiled(x)
    assert flat._base is x and t._base is x and same is x
    x.add_(1)  # writes through the input show up in the outputs, as in eager
    torch.testing.assert_close(flat, x.view(-1))
    torch.testing.assert_close(t, x.t())


@pytest.mark.parametrize("op", ["unsafe_chunk", "unsafe_split", "unsafe_split_with_sizes"])
def test_outputs_of_unsafe_splits_share_the_input_as_in_eager(op: str) -> None:
    """``unsafe_split`` & co. return views whose schema does not say so; the compiled
    function returns them sharing the input's memory, as eager does (it used to refuse the
    graph: "shares memory with input 0 through ops ember.aotgrad cannot replay")."""
    arg = [2, 2] if op == "unsafe_split_with_sizes" else 2

    def f(x: torch.Tensor) -> Any:
        return getattr(torch, op)(x, arg)

    x = torch.randn(4, 3, requires_grad=True)
    eager, got = f(x), aot_function(f, nop_compiler)(x)
    assert len(got) == len(eager) == 2
    for e, g in zip(eager, got):
        torch.testing.assert_close(g, e)
        assert g.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    (g0, g1), (e0, e1) = got, eager
    (gx,) = torch.autograd.grad((g0 * 2).sum() + g1.sum(), x)
    (ex,) = torch.autograd.grad((e0 * 2).sum() + e1.sum(), x)
    torch.testing.assert_close(gx, ex)


def test_view_output_of_mutated_input_sees_new_value_and_gradient() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x[0]

    base = torch.randn(3, 2, requires_grad=True)
    xs = [base * 1, base * 1]
    out_e = f(xs[0])
    compiled = aot_function(f, nop_compiler)
    out_c = compiled(xs[1])
    torch.testing.assert_close(out_c, out_e)
    assert out_c._base is xs[1]
    g_e, = torch.autograd.grad(out_e.sum() * 3, base)
    g_c, = torch.autograd.grad(out_c.sum() * 3, base)
    torch.testing.assert_close(g_c, g_e)


def test_metadata_mutation_is_a_clear_error() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 1
        y.t_()
        return y

    with pytest.raises(FunctionalizationError, match=r"changes the shape or strides .* in "
                       r"place; metadata mutations are not supported"):
        aot_function(f, nop_compiler)(torch.randn(2, 3))


def test_out_variant_becomes_functional() -> None:
    def f(x: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
        out = torch.empty(3)
        torch.sin(x, out=out)
        torch.mul(x, 2, out=buf)
        return out + buf

    x, buf = torch.randn(3), torch.zeros(3)
    out = aot_function(f, nop_compiler)(x, buf)
    torch.testing.assert_close(out, x.sin() + 2 * x)
    torch.testing.assert_close(buf, 2 * x)


def test_out_variant_that_resizes_is_a_clear_error() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(0)
        torch.sin(x, out=out)
        return out

    with pytest.raises(FunctionalizationError, match=r"resizes its out= tensor from \(0,\) "
                       r"to \(3,\)"):
        aot_function(f, nop_compiler)(torch.randn(3))


def test_random_inplace_on_transposed_tensor_draws_like_eager() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x.t()).bernoulli_(0.3) * x.t()

    x = torch.randn(5, 7)
    compiled = aot_function(f, nop_compiler)
    torch.manual_seed(3)
    want = f(x)
    torch.manual_seed(3)
    got = compiled(x)
    torch.testing.assert_close(got, want)


# -- issue 29: writes and restrides that eager makes on fresh-but-aliased tensors ------------


def _compiled_matches_eager(fn: Callable[..., Any], args: list[torch.Tensor]) -> None:
    """``fn`` through aot_function (functionalized, no eager fallback) equals eager: outputs
    and, for inputs that require grad, their gradients; the traced graph writes nothing."""
    eager_args, comp_args = _clone_all(args), _clone_all(args)
    out_e = fn(*eager_args)
    out_c = aot_function(fn, nop_compiler)(*comp_args)
    torch.testing.assert_close(out_c, out_e)
    assert out_c.stride() == out_e.stride()
    if any(a.requires_grad for a in args):
        out_e.pow(2).sum().backward()
        out_c.pow(2).sum().backward()
        for a_c, a_e in zip(comp_args, eager_args):
            if a_e.requires_grad:
                torch.testing.assert_close(a_c.grad, a_e.grad)
    _assert_no_mutation(fn, [a.detach() for a in args])


def pool_channels_last(x: torch.Tensor) -> torch.Tensor:
    """ATen's ``adaptive_avg_pool2d`` to one pixel of a channels-last tensor: ``mean``, then
    ``as_strided_`` to keep the memory format (timm's and torchvision's ConvNeXt heads)."""
    y = (x * 2).contiguous(memory_format=torch.channels_last)
    return torch.nn.functional.adaptive_avg_pool2d(y, 1) + 1


def matmul_then_add_(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A 3-d ``matmul`` result written in place (MobileBERT's ``h = h.matmul(w); h += b``):
    ATen returns ``mm``'s result through ``_unsafe_view``, which shares its memory."""
    h = h.matmul(w)
    h += b
    return h * 2


def chunk_after_write(x: torch.Tensor, wq: torch.Tensor) -> torch.Tensor:
    """Longformer's sliding-window ``_chunk``: a projection scaled in place, transposed and
    reshaped, then ``as_strided`` into overlapping chunks of its storage."""
    q = x.transpose(0, 1).matmul(wq)  # (seq, batch, d)
    q /= 4.0
    s, b, d = q.shape
    q = q.view(s, b, 2, d // 2).transpose(0, 1).transpose(1, 2).reshape(b * 2, s, d // 2)
    q = q.view(q.size(0), s // 4, 4, q.size(2))
    size = list(q.size())
    size[1] = size[1] * 2 - 1
    stride = list(q.stride())
    stride[1] = stride[1] // 2
    chunks = q.as_strided(size=size, stride=stride)
    return chunks.sum(-1)


@pytest.mark.parametrize("grad", [False, True])
def test_as_strided_inplace_restride_of_a_fresh_result(grad: bool) -> None:
    x = torch.randn(2, 8, 4, 4, requires_grad=grad)
    _compiled_matches_eager(pool_channels_last, [x])


@pytest.mark.parametrize("grad", [False, True])
def test_inplace_write_to_a_3d_matmul_result(grad: bool) -> None:
    args = [torch.randn(2, 3, 4, requires_grad=grad), torch.randn(4, 5, requires_grad=grad),
            torch.randn(5, requires_grad=grad)]
    _compiled_matches_eager(matmul_then_add_, args)


@pytest.mark.parametrize("grad", [False, True])
def test_as_strided_of_a_view_written_in_place(grad: bool) -> None:
    args = [torch.randn(2, 16, 8, requires_grad=grad), torch.randn(8, 8, requires_grad=grad)]
    _compiled_matches_eager(chunk_after_write, args)


def test_as_strided_inplace_on_an_input_is_still_refused() -> None:
    """An input's storage is the caller's: restriding it in place is not functionalized."""
    def f(x: torch.Tensor) -> torch.Tensor:
        x.as_strided_((2, 2), (1, 2))
        return x + 1

    with pytest.raises(FunctionalizationError, match="metadata mutations are not supported"):
        aot_function(f, nop_compiler)(torch.randn(2, 2))
