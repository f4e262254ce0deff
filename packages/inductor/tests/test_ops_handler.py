"""Every handler covers the ops protocol; printing a body shows what it computes."""

from __future__ import annotations

import inspect

import sympy
import torch

from ember.inductor.codegen.cpp import CppKernel, CppOps
from ember.inductor.ops_handler import (
    ALL_OPS,
    BINARY_OPS,
    UNARY_OPS,
    DefaultOps,
    DepsOps,
    OpsHandler,
    PrintOps,
)
from ember.inductor.options import InductorOptions


def test_protocol_lists_every_op() -> None:
    protocol = {
        n for n, _ in inspect.getmembers(OpsHandler, inspect.isfunction) if not n.startswith("_")
    }
    assert protocol == set(ALL_OPS)
    default = {
        n for n, _ in inspect.getmembers(DefaultOps, inspect.isfunction) if not n.startswith("_")
    }
    assert default == set(ALL_OPS)


def test_cpp_handler_emits_every_math_op() -> None:
    kernel = CppKernel(plan=None, options=InductorOptions())  # type: ignore[arg-type]
    ops = CppOps(kernel)
    from ember.inductor.codegen.cpp import CppVar

    for dtype in (torch.float32, torch.float64):
        x = CppVar("a", dtype)
        for name in UNARY_OPS:
            assert getattr(ops, name)(x).expr.startswith("tmp")
        for name in BINARY_OPS:
            assert getattr(ops, name)(x, x).expr.startswith("tmp")
    assert "ember_expf(a)" in "\n".join(kernel.scope.lines)


def test_print_and_deps_handlers() -> None:
    i = sympy.Symbol("i0", integer=True)

    def body(ops: OpsHandler) -> object:
        return ops.add(ops.exp(ops.load("buf0", 8 * i + 1)), ops.constant(1.0, torch.float32))

    assert body(PrintOps()) == "add(exp(load(buf0, 8*i0 + 1)), constant(1.0, float32))"
    deps = DepsOps()
    body(deps)
    assert deps.loads == [("buf0", 8 * i + 1)]
