"""``op_table.OPS`` is the one place an elementwise op is added: every row has each backend's
syntax (its column, or the handler's ``op_<name>`` method), its ATen ops lowered, and the
functions its syntax calls exist in each backend's runtime."""

from __future__ import annotations

import re

import pytest
import torch

from ember.inductor.codegen.cpp_ops import CppKernel, CppOps
from ember.inductor.codegen.cpp_prelude import MVEC_FUNCS, prelude
from ember.inductor.codegen.triton_ops import TritonKernel, TritonOps
from ember.inductor.lowering import find_lowering
from ember.inductor.op_table import BY_NAME, OPS
from ember.inductor.ops_handler import BINARY_OPS, UNARY_OPS, DefaultOps, OpsHandler
from ember.inductor.options import InductorOptions


def test_every_row_has_each_backends_syntax() -> None:
    for op in OPS:
        for column, handler in (("cpp", CppOps), ("triton", TritonOps)):
            assert getattr(op, column) is not None or hasattr(handler, f"op_{op.name}"), (
                f"ops.{op.name} has no {column} syntax"
            )
        assert op.arity in (1, 2)
        assert hasattr(DefaultOps, op.name) and hasattr(OpsHandler, op.name)
    assert set(BY_NAME) == set(UNARY_OPS) | set(BINARY_OPS)


def test_rows_lower_their_aten_ops() -> None:
    from ember.inductor.lowering import pointwise

    del pointwise  # imported for its registrations
    aten = torch.ops.aten
    for op in OPS:
        for packet in op.aten:
            overloads = [getattr(getattr(aten, packet), ov) for ov in op.overloads
                         if hasattr(getattr(aten, packet), ov)]
            assert overloads, f"{op.name}: aten.{packet} has none of {op.overloads}"
            for target in overloads:
                assert find_lowering(target) is not None, f"{target} (ops.{op.name}) is not lowered"


def test_the_functions_the_syntax_calls_exist() -> None:
    """C++: libmvec functions are declared by the prelude; Triton: ``libdevice`` calls have a
    numpy version for the interpreter."""
    pytest.importorskip("numpy")
    from ember.inductor.codegen import triton_libdevice

    text = prelude(True) + prelude(False)
    for name in MVEC_FUNCS:
        assert f"ember_{name}(" in text and f"ember_{name}f(" in text
    for op in OPS:
        for fn in re.findall(r"libdevice\.(\w+)\(", op.triton or ""):
            assert hasattr(triton_libdevice, fn), f"ops.{op.name}: libdevice.{fn} has no numpy version"


def test_triton_handler_emits_every_op() -> None:
    kernel = TritonKernel()
    ops = TritonOps(kernel)
    from ember.inductor.codegen.common import Var

    for dtype in (torch.float32, torch.int64, torch.bool):
        x = Var("a", dtype)
        for name in UNARY_OPS:
            assert isinstance(getattr(ops, name)(x), Var)
        for name in BINARY_OPS:
            assert isinstance(getattr(ops, name)(x, x), Var)
    assert "tl.exp(a)" in "\n".join(kernel.scope.lines)


def test_cpp_handler_reads_the_table_column() -> None:
    kernel = CppKernel(plan=None, options=InductorOptions())  # type: ignore[arg-type]
    ops = CppOps(kernel)
    from ember.inductor.codegen.common import Var

    x = Var("a", torch.float64)
    assert ops.expm1(x).expr == "tmp1" and kernel.scope.lines[-1] == "double tmp1 = ember_expm1(a);"
    assert ops.relu(x) and kernel.scope.lines[-1] == "double tmp2 = a < 0 ? 0.0 : a;"
    assert ops.lt(x, x).dtype == torch.bool
