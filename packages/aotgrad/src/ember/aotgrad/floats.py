"""Dynamic Python floats as graph inputs (ADR 0044).

ember.dynamo passes a Python float that changes between calls to its graph as a
placeholder whose example value is a symbolic float (``torch.SymFloat`` over an
``f<N>`` symbol). aotgrad's plans take tensors only, so, as torch.compile does,
the float travels as a 0-d float64 tensor: :func:`lift_floats` rewrites the
graph to take that tensor and read the float from it (:func:`float_input`),
and wraps the compiled callable to make the tensor from the call's float.

While tracing, :func:`float_input` returns the symbolic float itself, so the
ATen ops record it as a scalar argument (``aten.mul.Tensor(x, f0)``), exactly
where eager passes the Python float. The tensor's fake carries the symbol
(``FLOAT_SYMBOL``); ``sizes.bind_sizes`` then computes ``f0`` in each graph as
``aten._local_scalar_dense(primals_k)`` (a float64 holds a Python float
exactly), and float arithmetic in the order it was traced (``SymNode.recipe``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.fx as fx

#: attribute of a (fake) 0-d float64 tensor naming the float symbol it holds
FLOAT_SYMBOL = "_ember_float_symbol"

_TRACING: list[dict[str, torch.SymFloat]] = []


def float_input(t: torch.Tensor, name: str) -> Any:
    """The Python float held by the 0-d float64 tensor ``t`` (graph input ``name``); while
    aotgrad traces, the symbolic float standing for it."""
    for table in reversed(_TRACING):
        if name in table:
            return table[name]
    return t.item()


@contextlib.contextmanager
def tracing_floats(table: dict[str, torch.SymFloat]) -> Iterator[None]:
    _TRACING.append(table)
    try:
        yield
    finally:
        _TRACING.pop()


def symbolic_floats(gm: fx.GraphModule) -> dict[int, torch.SymFloat]:
    """Placeholder position -> its symbolic float, for ember.dynamo's dynamic floats."""
    out: dict[int, torch.SymFloat] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):
        value = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(value, torch.SymFloat) and getattr(value.node, "env", None) is not None:
            out[i] = value
    return out


def lift_floats(
    gm: fx.GraphModule, example_inputs: Sequence[Any], floats: dict[int, torch.SymFloat]
) -> tuple[fx.GraphModule, list[Any], dict[str, torch.SymFloat]]:
    """``gm`` taking a 0-d float64 tensor where it took each float of ``floats``, its
    example inputs, and the symbolic float of each such placeholder (by name)."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    table: dict[str, torch.SymFloat] = {}
    examples = list(example_inputs)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    reads: list[tuple[fx.Node, fx.Node]] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder" and placeholders.index(node) in floats:
            i = placeholders.index(node)
            ph = graph.placeholder(node.name)
            real = torch.tensor(float(examples[i]), dtype=torch.float64)
            setattr(real, FLOAT_SYMBOL, floats[i].node.expr)
            ph.meta["example_value"] = real
            examples[i] = real
            table[node.name] = floats[i]
            reads.append((node, ph))
            continue
        if node.op != "placeholder" and reads:
            for old, ph in reads:  # the floats are read right after the placeholders
                value = graph.call_function(float_input, (ph, old.name))
                value.meta["example_value"] = floats[placeholders.index(old)]
                env[old] = value
            reads = []
        env[node] = graph.node_copy(node, lambda n: env[n])
    lifted = fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    lifted.meta.update(gm.meta)
    return lifted, examples, table


def with_float_tensors(fn: Callable[..., Any], positions: Sequence[int]) -> Callable[..., Any]:
    """``fn`` called with each float at ``positions`` as a 0-d float64 tensor."""
    where = tuple(positions)

    def run(*args: Any) -> Any:
        values = list(args)
        for i in where:
            values[i] = torch.scalar_tensor(values[i], dtype=torch.float64)
        return fn(*values)

    return run


__all__ = ["FLOAT_SYMBOL", "float_input", "lift_floats", "symbolic_floats", "tracing_floats",
           "with_float_tensors"]
