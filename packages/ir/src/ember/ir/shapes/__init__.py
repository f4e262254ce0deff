"""ember.ir.shapes: symbolic sizes and fake tensors at run time (ADR 0066).

Not part of the contracts (the graph and guard IR say how a size is *written*:
``ember.ir.symbolic``); this is the machinery every stage that *traces* with symbolic
sizes shares, so that ember.dynamo, ember.aotgrad, ember.inductor and ember.ir's own
``from_fx`` make equal symbols and agree on every decision about them:

* :class:`ShapeEnv`: size symbols, their hints and ranges, and the guards the answers
  it gave became; :class:`SymNode` is what a ``torch.SymInt`` of ember holds.
* :class:`EagerLayoutFakeMode`: the fake tensor mode every stage traces with (eager's
  strides and checks where torch's meta kernels differ; unbacked sizes and values).
* Helpers over symbolic values: :func:`python_value`, :func:`size_relation`,
  :func:`float_int_pow`, :func:`symbolic_dispatch`, :func:`has_symbols`.

This ``__init__`` is the public surface; ``shapes.shape_env`` and ``shapes.fake_mode``
are private to ember.ir (``tools/check_imports.py`` refuses them elsewhere).
"""

from ember.ir.shapes.fake_mode import (
    ITEM_VALUE_TYPES,
    EagerLayoutFakeMode,
    has_symbols,
    index_strides,
    symbolic_dispatch,
)
from ember.ir.shapes.shape_env import (
    MIN_SIZE,
    UNBACKED_HINT,
    DataDependentError,
    ShapeEnv,
    ShapeGuard,
    SymNode,
    float_int_pow,
    python_value,
    size_relation,
    symint_expr,
)

__all__ = [
    "ITEM_VALUE_TYPES",
    "MIN_SIZE",
    "UNBACKED_HINT",
    "DataDependentError",
    "EagerLayoutFakeMode",
    "ShapeEnv",
    "ShapeGuard",
    "SymNode",
    "float_int_pow",
    "has_symbols",
    "index_strides",
    "python_value",
    "size_relation",
    "symbolic_dispatch",
    "symint_expr",
]
