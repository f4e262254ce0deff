"""Symbolic sizes: one compiled graph (and its C++ kernels) serves every size.

ATen graphs are built by hand as ember.aotgrad binds sizes: placeholders whose
fake values have ember size symbols (``ember.ir.shapes``), ``sym_size``
nodes and ``operator`` arithmetic for the sizes ops take. Results are
compared with eager at several sizes; kernels must take the sizes as
``int64_t`` arguments.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

from ember.inductor import InductorOptions, compile_graph
from ember.inductor.errors import InputMismatchError
from ember.ir.shapes import ShapeEnv

aten = torch.ops.aten


class Builder:
    """An ATen graph over symbolic fake inputs; each call records its fake result."""

    def __init__(self) -> None:
        self.env = ShapeEnv()
        self.mode = FakeTensorMode(allow_non_fake_inputs=True)
        self.graph = fx.Graph()
        self.inputs: list[Any] = []
        self.syms: dict[str, Any] = {}

    def input(self, name: str, sizes: list[Any], hints: dict[str, int], device: str = "cpu") -> fx.Node:
        for n, h in hints.items():
            self.syms.setdefault(n, self.env.new_symbol(h))
        shape = [self.syms[s] if isinstance(s, str) else s for s in sizes]
        strides: list[Any] = []
        acc: Any = 1
        for s in reversed(shape):
            strides.insert(0, acc)
            acc = acc * s
        fake = self.env.fake_tensor(self.mode, shape, strides, torch.float32, torch.device(device))
        node = self.graph.placeholder(name)
        node.meta["val"] = fake
        self.inputs.append(fake)
        return node

    def call(self, fn: Callable[..., Any], *args: Any) -> fx.Node:
        node = self.graph.call_function(fn, args)
        vals = fx.node.map_arg(args, lambda a: a.meta["val"])
        with self.mode:
            node.meta["val"] = fn(*vals)
        return node

    def module(self, *outputs: fx.Node) -> fx.GraphModule:
        self.graph.output(list(outputs))
        return fx.GraphModule(torch.nn.Module(), self.graph)


def opts(tmp_path: Any) -> InductorOptions:
    return InductorOptions(cache_dir=str(tmp_path), graph_cache=False)


def test_pointwise_reduction_and_view_for_every_size(tmp_path: Any) -> None:
    b = Builder()
    x = b.input("x", ["a", "b"], {"a": 4, "b": 6})
    n = b.call(aten.sym_size.int, x, 0)
    m = b.call(aten.sym_size.int, x, 1)
    nm = b.call(operator.mul, n, m)
    y = b.call(aten.mul.Tensor, x, 2.0)
    s = b.call(aten.sum.dim_IntList, y, [1])
    mean = b.call(aten.mean.dim, x, [1], True)
    flat = b.call(aten.view.default, b.call(aten.sub.Tensor, x, mean), [nm])
    gm = b.module(s, flat, nm)
    compiled = compile_graph(gm, b.inputs, opts(tmp_path))
    kernels = "\n".join(compiled.report.kernel_sources.values())
    assert compiled.report.eager_reason is None and compiled.report.kernels >= 1
    assert "const int64_t s0" in kernels and "const int64_t s1" in kernels
    for shape in [(4, 6), (2, 3), (9, 17), (33, 5)]:
        t = torch.randn(*shape)
        got = compiled(t)
        # a sum over up to 2000 values in another order: judged against float64 (float32
        # rounding alone reaches 1e-5 where the sum nearly cancels)
        torch.testing.assert_close(got[0].double(), (t.double() * 2).sum(1), atol=1e-4, rtol=1e-5)
        torch.testing.assert_close(got[1], (t - t.mean(1, keepdim=True)).reshape(-1))
        assert got[2] == shape[0] * shape[1]


def test_symbolic_size_input_and_wrong_shapes(tmp_path: Any) -> None:
    b = Builder()
    x = b.input("x", ["a", 8], {"a": 5})
    size = b.graph.placeholder("size")
    size.meta["val"] = b.inputs[0].shape[0]
    b.inputs.append(b.inputs[0].shape[0])
    e = b.call(aten.expand.default, b.call(aten.sum.dim_IntList, x, [0], True), [size, 8])
    gm = b.module(b.call(aten.add.Tensor, e, x))
    compiled = compile_graph(gm, b.inputs, opts(tmp_path))
    assert compiled.report.eager_reason is None
    for n in (5, 2, 7):
        t = torch.randn(n, 8)
        torch.testing.assert_close(compiled(t, n)[0], t.sum(0, keepdim=True) + t)
    with pytest.raises(InputMismatchError, match=r"input 0 has size \(3, 9\)"):
        compiled(torch.randn(3, 9), 3)


def test_non_contiguous_input_is_copied_into_the_compiled_layout(tmp_path: Any) -> None:
    b = Builder()
    x = b.input("x", ["a", "b"], {"a": 4, "b": 6})
    gm = b.module(b.call(aten.relu.default, x))
    compiled = compile_graph(gm, b.inputs, opts(tmp_path))
    t = torch.randn(7, 3).t()
    torch.testing.assert_close(compiled(t)[0], t.relu())


def test_triton_kernels_take_sizes_as_arguments(tmp_path: Any) -> None:
    """The Triton backend compiles a symbolic graph once (ADR 0050): element counts and size
    symbols are kernel arguments, a reduction has a looped and a persistent variant chosen
    per call, and every size matches eager, across the persistent/looped boundary too."""
    pytest.importorskip("triton")
    b = Builder()
    x = b.input("x", ["a", "b"], {"a": 4, "b": 6})
    y = b.call(aten.mul.Tensor, x, 2.0)
    s = b.call(aten.sum.dim_IntList, y, [1])
    mean = b.call(aten.mean.dim, x, [1], True)
    t_ = b.call(aten.permute.default, b.call(aten.sub.Tensor, x, mean), [1, 0])
    gm = b.module(s, b.call(aten.add.Tensor, t_, 1.0), b.call(aten.amax.default, x, [0]))
    options = InductorOptions(
        cache_dir=str(tmp_path), graph_cache=False, cpu_backend="triton", fallback_on_error=False
    )
    compiled = compile_graph(gm, b.inputs, options)
    assert compiled.report.eager_reason is None
    sources = "\n".join(compiled.report.kernel_sources.values())
    assert "def kernel_persistent(" in sources and "for r0offset in range(0, r0numel, RBLOCK)" in sources
    assert re.search(r"def kernel\([^)]*\bs1\b", sources)  # a size symbol is an argument
    for shape in [(4, 6), (2, 3), (9, 17), (33, 5), (3, 2000), (5, 1025)]:
        t = torch.randn(*shape)
        got = compiled(t)
        # a sum over up to 2000 values in another order: judged against float64 (float32
        # rounding alone reaches 1e-5 where the sum nearly cancels)
        torch.testing.assert_close(got[0].double(), (t.double() * 2).sum(1), atol=1e-4, rtol=1e-5)
        torch.testing.assert_close(got[1], (t - t.mean(1, keepdim=True)).t() + 1)
        torch.testing.assert_close(got[2], t.amax(0))


def test_a_decomposed_op_reads_its_symbolic_size_argument_on_every_call(tmp_path: Any) -> None:
    # slice_backward(grad, [32, 8], 0, 0, s0, 1) decomposes into a slice_scatter that runs as
    # an extern op: its ``end`` is s0 evaluated for each call, not the size compiled at (12)
    b = Builder()
    size = b.graph.placeholder("size")
    g = b.input("g", ["n", 8], {"n": 12})
    size.meta["val"] = b.inputs[0].shape[0]
    b.inputs.insert(0, b.inputs[0].shape[0])
    gm = b.module(b.call(aten.slice_backward.default, g, [32, 8], 0, 0, size, 1))
    compiled = compile_graph(gm, b.inputs, opts(tmp_path))
    for n in (12, 16, 20, 3):
        t = torch.randn(n, 8)
        want = torch.zeros(32, 8)
        want[:n] = t
        torch.testing.assert_close(compiled(n, t)[0], want)


def test_a_kernel_computing_with_a_size_takes_it_as_an_argument(tmp_path: Any) -> None:
    # mean over the symbolic dim, then a loop over the 8 static columns dividing by s0
    b = Builder()
    x = b.input("x", ["a", 8], {"a": 5})
    mean = b.call(aten.mean.dim, x, [0])
    gm = b.module(b.call(aten.sum.default, b.call(aten.mul.Tensor, mean, mean)))
    compiled = compile_graph(gm, b.inputs, opts(tmp_path))
    assert compiled.report.eager_reason is None
    for n in (5, 9, 2):
        t = torch.randn(n, 8)
        torch.testing.assert_close(compiled(t)[0], t.mean(0).pow(2).sum())


def test_a_dense_input_reaches_a_graph_compiled_for_an_expanded_layout(tmp_path: Any) -> None:
    # a backward compiled for a saved ``expand`` (stride 0) that the forward returned dense
    b = Builder()
    a = b.env.new_symbol(3)
    fake = b.env.fake_tensor(b.mode, [a, 4, 2], [2, 0, 1], torch.float32, torch.device("cpu"))
    x = b.graph.placeholder("x")
    x.meta["val"] = fake
    b.inputs.append(fake)
    gm = b.module(b.call(aten.mul.Tensor, x, 3.0))
    compiled = compile_graph(gm, b.inputs, opts(tmp_path))
    for n in (3, 6):
        base = torch.randn(n, 1, 2)
        for t in (base.expand(n, 4, 2), base.expand(n, 4, 2).contiguous()):
            torch.testing.assert_close(compiled(t)[0], t * 3)


def test_floor_divisions_are_only_dropped_when_exact_for_every_size() -> None:
    # Buffer sizes and strides go through exact_divisions/simplify_size: a floor division
    # dropped where it is not exact allocates one number of elements and fills another
    # (fuzz seed 843: 8*((s0 + 1)//2) became 4*s0 + 4, a heap overflow at even s0).
    import random

    import sympy

    from ember.inductor.sizes import exact_divisions, simplify_size

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    rng = random.Random(0)
    for _ in range(300):
        a, b, c = rng.randint(0, 6), rng.randint(-3, 7), rng.randint(1, 6)
        k = rng.randint(1, 9)
        num = a * s0 + b * s1 + rng.randint(0, 5) + sympy.Mod(rng.randint(1, 5) * s0, c)
        expr = k * sympy.floor(num / c)
        for f in (exact_divisions, simplify_size):
            got = f(expr)
            for v0 in range(1, 14):
                for v1 in (1, 2, 5):
                    env = {s0: v0, s1: v1}
                    assert got.subs(env) == expr.subs(env), (expr, got, env)
    # and where the division is exact it is dropped (the reason the rewrite exists)
    p = s0 + sympy.Mod(6 * s0, 7)
    assert simplify_size(sympy.floor(p / sympy.floor(p / 7))) == 7
    assert simplify_size(3 * sympy.floor((4 * s0 + 2) / 2)) == 6 * s0 + 3

