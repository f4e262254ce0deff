"""Partitioners: what is saved, what is recomputed, and the split's invariants."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ember.aotgrad import (
    OpCategory,
    Partition,
    VerifyError,
    default_partition,
    min_cut_rematerialization_partition,
    op_category,
    split_joint,
    trace_graph,
)
from ember.aotgrad.partition import node_bytes, verify_partition

aten = torch.ops.aten


@pytest.mark.parametrize("op,category", [
    (aten.add.Tensor, OpCategory.POINTWISE),
    (aten.gelu.default, OpCategory.POINTWISE),
    (aten.view.default, OpCategory.VIEW),
    (aten.t.default, OpCategory.VIEW),
    (aten.expand.default, OpCategory.VIEW),
    (aten.mm.default, OpCategory.MATMUL),
    (aten.addmm.default, OpCategory.MATMUL),
    (aten.bmm.default, OpCategory.MATMUL),
    (aten.convolution.default, OpCategory.MATMUL),
    (aten.sum.dim_IntList, OpCategory.REDUCTION),
    (aten.native_layer_norm.default, OpCategory.REDUCTION),
    (aten._softmax.default, OpCategory.REDUCTION),
    (aten.var_mean.correction, OpCategory.REDUCTION),
    (aten.native_dropout.default, OpCategory.RANDOM),
    (aten.bernoulli.p, OpCategory.RANDOM),
    (aten.rand_like.default, OpCategory.RANDOM),
    (aten.full.default, OpCategory.CHEAP),
    (aten._to_copy.default, OpCategory.CHEAP),
    (aten.native_batch_norm_backward.default, OpCategory.OTHER),
])
def test_op_category_table(op: object, category: OpCategory) -> None:
    assert op_category(op) is category


def _joint(fn, *args):
    traced = trace_graph(lambda *a: [fn(*a)], list(args), {}, joint=True)
    assert traced.is_joint
    return traced


def _saved_bytes(part: Partition) -> int:
    placeholders = {n.name: n for n in part.backward.graph.nodes if n.op == "placeholder"}
    return sum(node_bytes(placeholders[name]) for name in part.saved)


def _targets(gm: torch.fx.GraphModule) -> list[object]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def pointwise_chain(x: torch.Tensor) -> torch.Tensor:
    return x.sin().cos().exp().tanh()


def test_min_cut_saves_less_than_default_on_a_pointwise_chain() -> None:
    x = torch.randn(64, 64, requires_grad=True)
    traced = _joint(pointwise_chain, x)
    default = default_partition(traced.gm, num_fw_outputs=traced.num_fw_outputs)
    min_cut = min_cut_rematerialization_partition(traced.gm, num_fw_outputs=traced.num_fw_outputs)
    assert _saved_bytes(min_cut) < _saved_bytes(default)
    assert min_cut.saved == ("primals_1",)  # everything else is recomputed from x
    assert aten.sin.default in _targets(min_cut.backward)


def test_min_cut_never_recomputes_matmul_or_reductions() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = (x @ w).relu()
        return torch.softmax(h, dim=-1).sum(-1, keepdim=True) * h.amax(-1, keepdim=True).sin()

    traced = _joint(f, torch.randn(8, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True))
    part = min_cut_rematerialization_partition(traced.gm, num_fw_outputs=traced.num_fw_outputs)
    # node names survive the split: a forward node recomputed in the backward
    # appears in both graphs under its joint name
    forward = {n.name: n for n in part.forward.graph.nodes if n.op == "call_function"}
    recomputed = [n for n in part.backward.graph.nodes
                  if n.op == "call_function" and n.name in forward]
    assert recomputed, "expected cheap ops (relu, sin) to be recomputed"
    for node in recomputed:
        assert op_category(node.target) in (OpCategory.POINTWISE, OpCategory.VIEW,
                                            OpCategory.CHEAP), node.format_node()


def test_dropout_mask_is_saved_not_recomputed() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x.sin(), 0.5, training=True).cos()

    traced = _joint(f, torch.randn(32, 32, requires_grad=True))
    for part_fn in (default_partition, min_cut_rematerialization_partition):
        part = part_fn(traced.gm, num_fw_outputs=traced.num_fw_outputs)
        assert not any(op_category(t) is OpCategory.RANDOM for t in _targets(part.backward))
        assert any(op_category(t) is OpCategory.RANDOM for t in _targets(part.forward))


def test_split_signature_forward_outputs_and_backward_inputs() -> None:
    x = torch.randn(4, 4, requires_grad=True)
    traced = _joint(pointwise_chain, x)
    part = default_partition(traced.gm, num_fw_outputs=traced.num_fw_outputs)
    fw_out = next(n for n in part.forward.graph.nodes if n.op == "output").args[0]
    assert len(fw_out) == 1 + len(part.saved)
    bw_in = [n.name for n in part.backward.graph.nodes if n.op == "placeholder"]
    assert bw_in == [*part.saved, "tangents_1"]
    # running the pair gives the joint's results
    fw = part.forward(x.detach())
    grads = part.backward(*fw[1:], torch.ones(4, 4))
    x2 = x.detach().clone().requires_grad_(True)
    pointwise_chain(x2).sum().backward()
    torch.testing.assert_close(grads[0], x2.grad)
    torch.testing.assert_close(fw[0], pointwise_chain(x.detach()))


def test_verify_rejects_a_split_that_drops_a_saved_value() -> None:
    x = torch.randn(4, 4, requires_grad=True)
    traced = _joint(pointwise_chain, x)
    good = default_partition(traced.gm, num_fw_outputs=traced.num_fw_outputs)
    bad = Partition(good.forward, good.backward, good.saved[:-1], good.num_fw_outputs)
    with pytest.raises(VerifyError, match="forward returns .* values, expected 1 outputs"):
        verify_partition(traced.gm, bad)


def test_split_joint_with_too_little_saved_is_a_clear_error() -> None:
    from ember.aotgrad import PartitionError

    x = torch.randn(4, 4, requires_grad=True)
    traced = _joint(pointwise_chain, x)
    with pytest.raises(PartitionError, match="backward needs input 'primals_1'"):
        split_joint(traced.gm, [], num_fw_outputs=traced.num_fw_outputs)


def test_min_cut_saves_dropout_masks_as_bools() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x.sin(), 0.5, training=True).cos()

    x = torch.randn(32, 32, requires_grad=True)
    traced = _joint(f, x)
    default = default_partition(traced.gm, num_fw_outputs=traced.num_fw_outputs)
    min_cut = min_cut_rematerialization_partition(traced.gm, num_fw_outputs=traced.num_fw_outputs)
    saved = {n.name: n.meta["val"] for n in min_cut.backward.graph.nodes if n.op == "placeholder"}
    assert any(v.dtype == torch.bool for v in saved.values())
    assert _saved_bytes(min_cut) < _saved_bytes(default)
    # and the pair still computes eager's result under the same seed
    torch.manual_seed(0)
    fw = min_cut.forward(x.detach())
    grads = min_cut.backward(*fw[1:], torch.ones(32, 32))
    x2 = x.detach().clone().requires_grad_(True)
    torch.manual_seed(0)
    out = f(x2)
    out.sum().backward()
    torch.testing.assert_close(fw[0], out.detach())
    torch.testing.assert_close(grads[0], x2.grad)


def test_min_cut_prefers_saving_the_small_tensor() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        s = x.sum(1, keepdim=True)  # 64 floats, a reduction: never recomputed
        big = s.expand(64, 64).cos()  # 4096 floats, cheap to recompute from s
        return big.sin()

    traced = _joint(f, torch.randn(64, 64, requires_grad=True))
    part = min_cut_rematerialization_partition(traced.gm, num_fw_outputs=traced.num_fw_outputs)
    # s itself or its free expand view (same 256-byte storage); never the 16 KiB cos
    assert _saved_bytes(part) == 64 * 4
    assert not any(name.startswith("cos") for name in part.saved)
    default = default_partition(traced.gm, num_fw_outputs=traced.num_fw_outputs)
    assert _saved_bytes(default) > 64 * 64 * 4


def test_min_cut_saves_the_output_rather_than_a_value_of_equal_size() -> None:
    """With ``tanh``'s backward decomposed (as inductor's table does), the backward reads
    ``1 - y*y``, which the forward can compute, or ``y`` itself: the same bytes, but ``y`` is
    the forward's output, alive anyway where the caller keeps it for the loss (ADR 0063)."""
    decompositions = {aten.tanh_backward.default: lambda g, y: g * (1 - y * y)}
    x = torch.randn(32, 32)
    w = torch.randn(32, 32, requires_grad=True)
    traced = trace_graph(lambda w: [torch.tanh(x @ w)], [w], decompositions, joint=True)
    part = min_cut_rematerialization_partition(traced.gm, num_fw_outputs=traced.num_fw_outputs)
    fw_out = next(n for n in part.forward.graph.nodes if n.op == "output").args[0]
    assert fw_out[0] in fw_out[part.num_fw_outputs:], part.saved  # the output itself is saved
    assert not any(name.startswith("rsub") for name in part.saved), part.saved
    # the output and the constant x (as its transpose, for the weight's gradient)
    assert len(part.saved) == 2 and _saved_bytes(part) == 2 * 32 * 32 * 4, part.saved
