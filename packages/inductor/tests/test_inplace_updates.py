"""Outputs that are new values of inputs (``ember.ir.updates``) computed into the inputs.

Each graph here is functional (it returns new values), made by ``make_fx`` from a
function written that way, and named as updating its inputs as aotgrad names a
functionalized graph's mutated inputs. Expected values come from running the
function eagerly on copies.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ember.inductor import CompiledGraph, InductorOptions, compile_graph
from ember.ir.updates import set_input_updates

BACKENDS = ("cpp", "triton")


def _compile(
    fn: Callable[..., Any], inputs: list[torch.Tensor], pairs: list[tuple[int, int]],
    options: InductorOptions,
) -> CompiledGraph:
    gm = make_fx(fn)(*inputs)
    set_input_updates(gm, pairs)
    compiled = compile_graph(gm, inputs, options)
    assert isinstance(compiled, CompiledGraph), compiled.report.eager_reason
    return compiled


def _run(
    fn: Callable[..., Any], inputs: list[torch.Tensor], pairs: list[tuple[int, int]],
    options: InductorOptions,
) -> tuple[CompiledGraph, list[Any], list[torch.Tensor]]:
    """(compiled graph, its outputs, the inputs after the call); checks every output."""
    expected = fn(*[x.clone() for x in inputs])
    compiled = _compile(fn, inputs, pairs, options)
    args = [x.clone() for x in inputs]
    got = compiled(*args)
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e)
    return compiled, got, args


def test_update_is_written_into_the_input(options: InductorOptions) -> None:
    def sgd(p: torch.Tensor, g: torch.Tensor, buf: torch.Tensor) -> tuple[torch.Tensor, ...]:
        new_buf = buf * 0.9 + g
        return p - 0.1 * new_buf, new_buf

    inputs = [torch.randn(64, 33), torch.randn(64, 33), torch.randn(64, 33)]
    compiled, got, args = _run(sgd, inputs, [(0, 0), (1, 2)], options)
    assert got[0] is args[0] and got[1] is args[2]
    assert compiled.report.wrapper_source.count("computed in place") == 2
    assert "empty_strided" not in compiled.report.wrapper_source
    torch.testing.assert_close(args[1], inputs[1])  # the gradient is left alone


def test_read_of_the_old_value_after_the_update_keeps_a_copy(options: InductorOptions) -> None:
    # the second output reads x's old value at other indices (a flip), after x's new value
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2, x.flip(0) + x * 2

    x = torch.randn(16, 8)
    _, got, args = _run(f, [x], [(0, 0)], options)
    assert got[0] is not args[0]
    torch.testing.assert_close(args[0], x)


def test_update_reading_the_input_elsewhere_is_not_in_place(options: InductorOptions) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor]:
        return (x.flip(0) + 1,)

    x = torch.randn(16, 8)
    _, got, args = _run(f, [x], [(0, 0)], options)
    assert got[0] is not args[0]
    torch.testing.assert_close(args[0], x)


def test_returned_old_value_keeps_the_input(options: InductorOptions) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + 1, x

    x = torch.randn(32)
    _, got, args = _run(f, [x], [(0, 0)], options)
    assert got[0] is not args[0] and got[1] is args[0]


@pytest.mark.backends("cpp")
def test_input_read_by_an_extern_call_is_not_updated_in_place(options: InductorOptions) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2, (x @ w).relu()

    x, w = torch.randn(8, 8), torch.randn(8, 8)
    _, got, args = _run(f, [x, w], [(0, 0)], options)
    assert got[0] is not args[0]


@pytest.mark.backends("cpp")
def test_layout_mismatch_and_overlapping_input_are_not_updated_in_place(
    options: InductorOptions,
) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor]:
        return (x.t() * 2,)

    x = torch.randn(8, 4)
    _, got, args = _run(f, [x], [(0, 0)], options)
    assert got[0] is not args[0]
    e = torch.randn(1, 5).expand(4, 5)  # stride 0: one element serves a column
    compiled = _compile(lambda e: (e + 1,), [e], [(0, 0)], options)
    out = compiled(e)
    assert out[0] is not e
    torch.testing.assert_close(out[0], e + 1)


@pytest.mark.backends("cpp")
def test_readers_before_the_writer_share_its_kernel(options: InductorOptions) -> None:
    # Adam-like: scalar bookkeeping read by the tensor update, all updated in place
    def f(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, step: torch.Tensor) -> tuple[Any, ...]:
        new_step = step + 1
        new_m = m * 0.9 + g * 0.1
        scale = -0.01 / (1 - 0.9**new_step)
        return p + scale * new_m, new_m, new_step

    inputs = [torch.randn(40, 24), torch.randn(40, 24), torch.randn(40, 24), torch.tensor(3.0)]
    compiled, got, args = _run(f, inputs, [(0, 0), (1, 2), (2, 3)], options)
    assert got[0] is args[0] and got[1] is args[2] and got[2] is args[3]
    assert compiled.report.kernels == 2  # the scalars once, then one loop over the tensors
    loop = next(src for src in compiled.report.kernel_sources.values() if "for (" in src)
    assert "pow" not in loop  # 0.9 ** step is computed once, not per element


@pytest.mark.backends("cpp")
def test_cpp_call_passes_an_updated_input_once_and_reads_each_pointer_once(
    options: InductorOptions,
) -> None:
    """An input computed in place is one kernel argument (its old and new value are the
    same memory), and a tensor several kernels take has its ``data_ptr()`` read once."""
    def momentum(p: torch.Tensor, g: torch.Tensor, buf: torch.Tensor,
                 b: torch.Tensor, gb: torch.Tensor) -> tuple[torch.Tensor, ...]:
        new_buf = buf * 0.9 + g
        return p - 0.1 * new_buf, new_buf, b - 0.1 * gb * g.sum()

    inputs = [torch.randn(64, 33), torch.randn(64, 33), torch.randn(64, 33), torch.randn(7),
              torch.randn(7)]
    compiled, got, args = _run(momentum, inputs, [(0, 0), (1, 2), (2, 3)], options)
    assert got[0] is args[0] and got[1] is args[2] and got[2] is args[3]
    src = compiled.report.wrapper_source
    assert src.count("computed in place") == 3
    # five tensors (and the reduction's result): one pointer read each
    reads = re.findall(r"(\w+)\.data_ptr\(\)", src)
    assert len(reads) == len(set(reads)), src
    assert "arg1.data_ptr()" in src and src.count("arg1.data_ptr()") == 1, src
    for name, kernel in compiled.report.kernel_sources.items():
        # an in-place pair is one parameter: the input's pointer is the output's
        assert "in_arg0 = out_" in kernel or "in_arg0" not in kernel, (name, kernel)


@pytest.mark.backends("cpp")
def test_small_buffers_only_kernels_touch_share_one_scratch_block(
    options: InductorOptions,
) -> None:
    """Adam's bias corrections: 0-d values computed once per parameter and read by the
    parameter's loop. They live in one block the call allocates, not one tensor each."""
    def adam_like(p1: torch.Tensor, p2: torch.Tensor, g1: torch.Tensor, g2: torch.Tensor,
                  s1: torch.Tensor, s2: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n1, n2 = s1 + 1, s2 + 1
        c1, c2 = 1 - 0.9 ** n1, 1 - 0.9 ** n2
        return n1, n2, p1 - 0.1 * g1 / c1, p2 - 0.1 * g2 / c2

    inputs = [torch.randn(300, 200), torch.randn(300), torch.randn(300, 200), torch.randn(300),
              torch.tensor(3.0), torch.tensor(5.0)]
    compiled, got, args = _run(adam_like, inputs, [(0, 4), (1, 5), (2, 0), (3, 1)], options)
    src = compiled.report.wrapper_source
    assert "_scratch = empty_strided(" in src, src
    assert "empty_strided(()" not in src, src  # no 0-d tensor per value
    for _ in range(3):  # the block is fresh each call: values stay eager's
        expected = adam_like(*[a.clone() for a in args])
        got = compiled(*args)
        for e, g in zip(expected, got, strict=True):
            torch.testing.assert_close(g, e)
