"""Which memory format an inference graph's convolutions run in (ADR 0056).

ATen's CPU convolution follows its input's memory format. Measured on this project's
vision zoo (eager, one thread, same process; docs/decisions/0056): a channels-last input
made mobilenetv2 1.44x, efficientnet_b0 1.46x, regnet_y_400mf 1.38x, ghostnet 1.19x and
densenet121 1.16x faster, and resnet18 3x *slower*: its 3x3 convolutions' weights are
stored NCHW, which ATen converts to channels-last on every call, while a 1x1 or depthwise
weight is already both (its size-1 dims make the two layouts the same) and a grouped
convolution's NCHW path is the slow one. So a graph runs its convolutions channels-last
when most of its convolution work (multiply-adds) is in 1x1, depthwise or grouped
convolutions; a graph whose work is mostly full convolutions is decided by timing its
convolutions both ways on this machine, once per process and set of shapes (SqueezeNet's
small-channel 3x3 fire modules run 1.7x faster channels-last in eager, ResNet's 3x
slower: the same kind of convolution goes either way; ADR 0059). A backward graph (a
``convolution_backward`` in it) is left as it is; a training step's forward graph is decided
as an inference graph is (what it returns, saved activations included, is copied to eager's
strides where it is stored otherwise; not measured for speed).
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
import torch.fx

from .sizes import Size, SizeHints, as_sizes

aten = torch.ops.aten


def channels_last_strides(size: tuple[Size, ...]) -> tuple[Size, Size, Size, Size]:
    n, c, h, w = size
    return (c * h * w, 1, w * c, c)


#: measured decisions of this process, by the graph's convolution signatures
_MEASURED: dict[tuple[object, ...], bool] = {}
#: wall seconds one measurement may take; past it the graph keeps its layouts
MEASURE_BUDGET_S = 1.0


def prefers_channels_last(
    gm: torch.fx.GraphModule, device: torch.device | None = None, hints: SizeHints | None = None
) -> bool:
    """Whether ``gm``'s convolutions should read channels-last inputs (see the module doc).
    Symbolic sizes count by their ``hints`` (the values of the inputs at hand)."""
    hints = hints if hints is not None else SizeHints()
    convs: list[torch.fx.Node] = []
    friendly = total = 0
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is aten.convolution_backward.default:
            return False
        if node.target is not aten.convolution.default:
            continue
        work = _conv_work(node, hints)
        if work is None:
            return False
        macs, is_friendly = work
        convs.append(node)
        total += macs
        friendly += macs if is_friendly else 0
    if total == 0:
        return False
    if 2 * friendly >= total:
        return True
    if device is None or device.type != "cpu":
        return False
    try:
        key = tuple(_signature(n, hints) for n in convs)
    except ValueError:  # a size without a value for these inputs
        return False
    if key not in _MEASURED:
        _MEASURED[key] = _measured_faster(convs, hints)
    return _MEASURED[key]


def _signature(node: torch.fx.Node, hints: SizeHints) -> tuple[object, ...]:
    x, w = (a.meta["val"] for a in node.args[:2])  # type: ignore[union-attr]
    return (_hinted(x.shape, hints), _hinted(w.shape, hints), node.args[2] is not None,
            *node.args[3:])


def _hinted(shape: Any, hints: SizeHints) -> tuple[int, ...]:
    return hints.hints_of(as_sizes(shape))


def _measured_faster(convs: list[torch.fx.Node], hints: SizeHints | None = None) -> bool:
    """Whether ATen runs these convolutions (random data of their shapes, NCHW weights as
    the graph passes them, this process's threads) at least 10% faster on channels-last
    inputs than on NCHW ones: a graph of mostly full 3x3 convolutions goes either way
    (SqueezeNet's small-channel fire modules 1.7x faster channels-last in eager, ResNet's
    3x slower). Interleaved, best of three; over ``MEASURE_BUDGET_S`` it gives up (NCHW)."""
    hints = hints if hints is not None else SizeHints()
    start = time.perf_counter()
    times = {False: 0.0, True: 0.0}
    with torch.no_grad():
        for node in convs:
            x, w = (a.meta["val"] for a in node.args[:2])  # type: ignore[union-attr]
            inp = torch.randn(_hinted(x.shape, hints), dtype=x.dtype)
            weight = torch.randn(_hinted(w.shape, hints), dtype=w.dtype)
            bias = torch.randn(weight.shape[0], dtype=w.dtype) if node.args[2] is not None else None
            rest = node.args[3:]
            both = {False: inp, True: inp.contiguous(memory_format=torch.channels_last)}
            best = {False: math.inf, True: math.inf}
            for rep in range(4):
                for cl, a in both.items():
                    t0 = time.perf_counter()
                    aten.convolution.default(a, weight, bias, *rest)
                    if rep:  # the first run of each is a warm-up
                        best[cl] = min(best[cl], time.perf_counter() - t0)
            for cl in times:
                times[cl] += best[cl]
            if time.perf_counter() - start > MEASURE_BUDGET_S:
                return False
    return times[True] < 0.9 * times[False]


def _conv_work(node: torch.fx.Node, hints: SizeHints) -> tuple[int, bool] | None:
    """(multiply-adds, 1x1/depthwise/grouped) of a 2-d, not transposed convolution (its
    symbolic sizes by their ``hints``)."""
    args = node.args
    if len(args) < 9 or args[6]:  # transposed
        return None
    x, w, out = (getattr(a, "meta", {}).get("val") for a in (args[0], args[1], node))
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (x, w, out)):
        return None
    assert isinstance(w, torch.Tensor) and isinstance(out, torch.Tensor)
    try:
        wshape, oshape = _hinted(w.shape, hints), _hinted(out.shape, hints)
    except ValueError:  # a size without a value for these inputs
        return None
    groups = args[8]
    if not isinstance(groups, int):
        return None
    c_out, c_in_per_group, kh, kw = wshape
    macs = math.prod(oshape) * c_in_per_group * kh * kw
    return macs, groups > 1 or (kh == 1 and kw == 1)
