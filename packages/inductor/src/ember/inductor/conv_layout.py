"""Which memory format an inference graph's convolutions run in (ADR 0056).

ATen's CPU convolution follows its input's memory format. Measured on this project's
vision zoo (eager, one thread, same process; docs/decisions/0056): a channels-last input
made mobilenetv2 1.44x, efficientnet_b0 1.46x, regnet_y_400mf 1.38x, ghostnet 1.19x and
densenet121 1.16x faster, and resnet18 3x *slower*: its 3x3 convolutions' weights are
stored NCHW, which ATen converts to channels-last on every call, while a 1x1 or depthwise
weight is already both (its size-1 dims make the two layouts the same) and a grouped
convolution's NCHW path is the slow one. So a graph runs its convolutions channels-last
when most of its convolution work (multiply-adds) is in 1x1, depthwise or grouped
convolutions; others keep the layout their inputs have. A backward graph (a
``convolution_backward`` in it) is left as it is; a training step's forward graph is decided
as an inference graph is (what it returns, saved activations included, is copied to eager's
strides where it is stored otherwise; not measured for speed).
"""

from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten


def channels_last_strides(size: tuple[int, ...]) -> tuple[int, int, int, int]:
    n, c, h, w = size
    return (c * h * w, 1, w * c, c)


def prefers_channels_last(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm``'s convolutions should read channels-last inputs (see the module doc)."""
    friendly = total = 0
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is aten.convolution_backward.default:
            return False
        if node.target is not aten.convolution.default:
            continue
        work = _conv_work(node)
        if work is None:
            return False
        macs, is_friendly = work
        total += macs
        friendly += macs if is_friendly else 0
    return total > 0 and 2 * friendly >= total


def _conv_work(node: torch.fx.Node) -> tuple[int, bool] | None:
    """(multiply-adds, 1x1/depthwise/grouped) of a static, 2-d, not transposed convolution."""
    args = node.args
    if len(args) < 9 or args[6]:  # transposed
        return None
    x, w, out = (getattr(a, "meta", {}).get("val") for a in (args[0], args[1], node))
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (x, w, out)):
        return None
    assert isinstance(w, torch.Tensor) and isinstance(out, torch.Tensor)
    shapes = (*w.shape, *out.shape)
    if not all(isinstance(s, int) for s in shapes):
        return None
    groups = args[8]
    if not isinstance(groups, int):
        return None
    c_out, c_in_per_group, kh, kw = (int(s) for s in w.shape)
    macs = int(out.numel()) * c_in_per_group * kh * kw
    return macs, groups > 1 or (kh == 1 and kw == 1)
