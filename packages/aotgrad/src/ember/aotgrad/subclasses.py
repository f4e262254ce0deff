"""DTensor graph inputs desugared into their local tensors (ADR 0069).

A graph ember.dynamo captured over DTensors (tensor parallelism: parameters
sharded by ``parallelize_module``, activations made DTensors by its hooks) is
a torch-level graph whose inputs, parameters and some outputs are DTensors.
aotgrad traces plain tensors only, so the graph is rewritten before tracing
into one over the DTensors' *local* tensors:

- each DTensor input (a placeholder, or a parameter or buffer the graph reads
  with ``get_attr``) becomes a plain placeholder holding its local tensor,
  followed by ``DTensor.from_local(local, mesh, placements, shape=, stride=,
  grad_placements=placements)`` with the input's own metadata;
- each DTensor output ``y`` is returned as ``y.to_local(grad_placements=
  y.placements)``, and the runtime wraps it back with ``from_local`` and the
  traced metadata.

Tracing the rewritten graph then runs DTensor's own ``__torch_dispatch__``
between those two conversions: the recorder declines ops on a wrapper subclass
(``ember.ir.recorder``), DTensor propagates the sharding and runs the op on the
fake local tensors, and a redistribution runs ``_c10d_functional`` collectives
(``all_reduce``, ``all_gather_into_tensor``, ``reduce_scatter_tensor``, each
followed by ``wait_tensor``), which are recorded as ATen nodes like any other.
Because ``from_local`` and ``to_local`` are autograd functions, the joint graph
comes out over local tensors too: the backward's DTensor ops and collectives
are recorded by the same recorder, and the gradient of each local input has the
input's placements (``grad_placements``). At run time the DTensors' local
tensors are taken with ``to_local(grad_placements=placements)``, so autograd
carries the compiled backward's local gradients back into DTensor gradients of
the same placements (what accumulates in ``param.grad``).

This is torch AOTAutograd's subclass desugaring reached at the graph's
boundary: the conversions are DTensor's public autograd functions, so nothing
of the joint-graph machinery below needs to know about subclasses. Only
DTensor is desugared; a graph with another wrapper subclass raises
``TraceError`` (the frontend then runs it eagerly).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from ember.aotgrad.errors import TraceError


def dtensor_class() -> Any:
    """``torch.distributed.tensor.DTensor``, or None where torch.distributed is not built."""
    if not torch.distributed.is_available():
        return None
    from torch.distributed.tensor import DTensor

    return DTensor


def _is_dtensor(value: Any) -> bool:
    cls = dtensor_class()
    return cls is not None and isinstance(value, cls)


def _is_other_subclass(value: Any) -> bool:
    return is_traceable_wrapper_subclass(value) and not _is_dtensor(value)


def has_subclass_inputs(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> bool:
    """Whether ``gm`` takes or reads a traceable wrapper subclass (a DTensor)."""
    if any(is_traceable_wrapper_subclass(t) for t in example_inputs):
        return True
    return any(is_traceable_wrapper_subclass(t)
               for t in (*gm.parameters(), *gm.buffers()))


@dataclass(frozen=True)
class DTensorMeta:
    """What rebuilds a DTensor from its local tensor: mesh, placements, global layout."""

    mesh: Any
    placements: tuple[Any, ...]
    shape: torch.Size
    stride: tuple[int, ...]

    @staticmethod
    def of(t: Any) -> DTensorMeta:
        return DTensorMeta(t.device_mesh, tuple(t.placements), t.shape, tuple(t.stride()))

    def wrap(self, local: torch.Tensor) -> Any:
        cls = dtensor_class()
        assert cls is not None
        return cls.from_local(local, self.mesh, self.placements, run_check=False,
                              shape=self.shape, stride=self.stride,
                              grad_placements=self.placements)


def local_of(t: Any) -> torch.Tensor:
    """The local tensor of DTensor ``t``, differentiable back into a DTensor gradient of
    ``t``'s own placements."""
    local: torch.Tensor = t.to_local(grad_placements=tuple(t.placements))
    return local


def _from_local_fn(meta: DTensorMeta) -> Callable[[torch.Tensor], Any]:
    def dtensor_from_local(local: torch.Tensor) -> Any:
        return meta.wrap(local)

    return dtensor_from_local


def dtensor_to_local(t: Any) -> torch.Tensor:
    """A graph node: DTensor output ``t`` as its local tensor (re-wrapped by the runtime)."""
    return local_of(t)


def _example_of(node: fx.Node) -> Any:
    return node.meta.get("example_value", node.meta.get("val"))


@dataclass
class Desugared:
    """The graph over local tensors, its example inputs, and how a call maps onto it."""

    gm: fx.GraphModule
    example_inputs: list[Any]
    #: positions of the original inputs that are DTensors
    dtensor_inputs: tuple[int, ...]
    #: the DTensor parameters and buffers the graph reads, passed after the inputs
    dtensor_attrs: tuple[Any, ...]
    #: per output: the DTensor it is rebuilt into, or None (a plain value)
    outputs: tuple[DTensorMeta | None, ...]
    #: the graph returns a tuple (else a list)
    tuple_output: bool = True


def desugar(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Desugared:
    """``gm`` rewritten over the local tensors of its DTensor inputs (module doc)."""
    for t in (*example_inputs, *gm.parameters(), *gm.buffers()):
        if _is_other_subclass(t):
            raise TraceError(
                f"graph input of tensor subclass `{type(t).__qualname__}`: ember.aotgrad "
                "desugars DTensor only"
            )
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    examples: list[Any] = []
    dt_inputs: list[int] = []
    wraps: list[tuple[fx.Node, fx.Node, DTensorMeta]] = []  # (original, placeholder, meta)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise TraceError("graph inputs and example inputs differ in number")
    for i, (node, value) in enumerate(zip(placeholders, example_inputs, strict=True)):
        new = graph.placeholder(node.name + ("_local" if _is_dtensor(value) else ""))
        new.meta = dict(node.meta)
        if _is_dtensor(value):
            dt_inputs.append(i)
            new.meta.pop("example_value", None)
            examples.append(_local_example(value))
            wraps.append((node, new, DTensorMeta.of(value)))
        else:
            examples.append(value)
            env[node] = new
    attrs: list[Any] = []
    seen: dict[str, fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        value = _read_attr(gm, str(node.target))
        if not _is_dtensor(value):
            continue
        if str(node.target) in seen:  # the same attribute read twice: one input
            continue
        name = str(node.target).replace(".", "_") + "_local"
        new = graph.placeholder(name)
        attrs.append(value)
        examples.append(_local_example(value))
        wraps.append((node, new, DTensorMeta.of(value)))
        seen[str(node.target)] = new
    for orig, placeholder, meta in wraps:
        wrapped = graph.call_function(_from_local_fn(meta), (placeholder,))
        wrapped.meta = dict(orig.meta)
        env[orig] = wrapped
        if orig.op == "get_attr":
            seen[str(orig.target)] = wrapped
    outputs: list[DTensorMeta | None] = []
    tuple_output = True
    for node in gm.graph.nodes:
        if node.op == "placeholder" or node in env:
            continue
        if node.op == "get_attr" and str(node.target) in seen:
            env[node] = seen[str(node.target)]
            continue
        if node.op == "output":
            result = node.args[0]
            tuple_output = isinstance(result, tuple)
            items = list(result) if isinstance(result, (tuple, list)) else [result]
            new_items: list[Any] = []
            for item in items:
                value = _example_of(item) if isinstance(item, fx.Node) else None
                if isinstance(item, fx.Node) and value is None:
                    raise TraceError(f"graph output `{item.name}` has no example value "
                                     "(meta['example_value'] or meta['val']): whether it is "
                                     "a DTensor is not known")
                mapped = env[item] if isinstance(item, fx.Node) else item
                if isinstance(item, fx.Node) and _is_dtensor(value):
                    outputs.append(DTensorMeta.of(value))
                    mapped = graph.call_function(dtensor_to_local, (mapped,))
                else:
                    outputs.append(None)
                new_items.append(mapped)
            graph.output(tuple(new_items) if tuple_output else new_items)
            continue
        env[node] = graph.node_copy(node, lambda n: env[n])
    flat = fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    return Desugared(flat, examples, tuple(dt_inputs), tuple(attrs), tuple(outputs), tuple_output)


def _local_example(t: Any) -> torch.Tensor:
    """The example of a DTensor's local input: its local tensor, requiring grad as the
    DTensor does (what decides whether the graph is traced with a backward)."""
    local: torch.Tensor = t._local_tensor.detach()
    return local.requires_grad_(t.requires_grad)


def _read_attr(gm: torch.nn.Module, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def compile_desugared(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    backend: Callable[[fx.GraphModule, list[Any]], Callable[..., Any]],
) -> Callable[..., Any]:
    """``backend`` applied to ``gm`` desugared; the callable takes and returns DTensors."""
    plan = desugar(gm, example_inputs)
    inner = backend(plan.gm, plan.example_inputs)
    dt_inputs = frozenset(plan.dtensor_inputs)
    attrs = plan.dtensor_attrs
    outputs = plan.outputs

    def run(*args: Any) -> Any:
        flat = [local_of(a) if i in dt_inputs else a for i, a in enumerate(args)]
        flat.extend(local_of(a) for a in attrs)
        got = inner(*flat)
        result = [o if meta is None else meta.wrap(o) for o, meta in zip(got, outputs, strict=True)]
        return tuple(result) if plan.tuple_output else result

    run.__qualname__ = f"{getattr(gm, '__qualname__', type(gm).__name__)} (DTensors desugared)"
    return run


__all__ = ["DTensorMeta", "Desugared", "compile_desugared", "desugar", "dtensor_class",
           "has_subclass_inputs", "local_of"]
