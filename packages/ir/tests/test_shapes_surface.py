"""ember.ir.shapes is the public home of the shape machinery (ADR 0066); the old module
paths still import, as the very same modules, for released stages (ember-* 0.1.x)."""

from __future__ import annotations

import importlib

import ember.ir
import ember.ir.shapes as shapes


def test_public_names_are_the_implementations() -> None:
    from ember.ir.shapes import fake_mode, shape_env

    assert shapes.ShapeEnv is shape_env.ShapeEnv
    assert shapes.SymNode is shape_env.SymNode
    assert shapes.EagerLayoutFakeMode is fake_mode.EagerLayoutFakeMode
    assert ember.ir.shapes is shapes
    for name in shapes.__all__:
        assert getattr(shapes, name) is not None


def test_old_paths_are_the_same_modules() -> None:
    old_env = importlib.import_module("ember.ir.shape_env")
    old_fake = importlib.import_module("ember.ir.fake_mode")
    assert old_env is importlib.import_module("ember.ir.shapes.shape_env")
    assert old_fake is importlib.import_module("ember.ir.shapes.fake_mode")
    # what released ember-dynamo / -aotgrad / -inductor 0.1.x import from them
    from ember.ir.fake_mode import (
        ITEM_VALUE_TYPES,
        EagerLayoutFakeMode,
        has_symbols,
        symbolic_dispatch,
    )
    from ember.ir.shape_env import (
        MIN_SIZE,
        DataDependentError,
        ShapeEnv,
        SymNode,
        float_int_pow,
        python_value,
        size_relation,
    )

    assert ShapeEnv is shapes.ShapeEnv and EagerLayoutFakeMode is shapes.EagerLayoutFakeMode
    assert (MIN_SIZE, DataDependentError, SymNode, float_int_pow, python_value, size_relation) == (
        shapes.MIN_SIZE, shapes.DataDependentError, shapes.SymNode, shapes.float_int_pow,
        shapes.python_value, shapes.size_relation)
    assert (ITEM_VALUE_TYPES, has_symbols, symbolic_dispatch) == (
        shapes.ITEM_VALUE_TYPES, shapes.has_symbols, shapes.symbolic_dispatch)
