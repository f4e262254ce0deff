"""Trace a flat function into one functional ATen graph: forward only, or joint.

The joint graph takes ``primals_1..n`` (the function's tensor inputs) and
``tangents_1..k`` (one per differentiable forward output) and returns, in
order:

1. the new values of the inputs the function mutates (``mutated_inputs``),
2. the user outputs that the graph computes (outputs that are views of an
   input are not among them: the runtime rebuilds those as views of the real
   input, so they stay views),
3. the gradients of the inputs that require grad (``grad_inputs``).

Groups 1 and 2 are the *forward outputs*. Without gradients (grad mode off or
no input requiring grad) the graph has no tangents and no group 3.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import _disable_current_modes

from ember.aotgrad.errors import AotGradError, TraceError, VerifyError
from ember.aotgrad.functionalize import find_mutated_inputs, functionalize
from ember.aotgrad.sizes import SYM_TYPES, expr_of, is_symbolic_tensor
from ember.aotgrad.trace import DecompTable, GraphTracer, layout_of, storage_key


@dataclass(frozen=True, slots=True)
class OutputSlot:
    """Where one flat user output comes from at runtime.

    ``kind`` is ``"graph"`` (the ``index``-th user output the graph computes),
    ``"input"`` (input ``index`` itself), ``"alias"`` (a view of input
    ``index`` with ``layout`` = size, stride, storage offset) or ``"const"``
    (the non-tensor ``value``).
    """

    kind: str
    index: int = 0
    layout: tuple[tuple[int, ...], tuple[int, ...], int] | None = None
    value: Any = None


@dataclass(frozen=True, slots=True)
class TracedGraph:
    """A functional ATen graph plus the bookkeeping the runtime needs."""

    gm: fx.GraphModule
    fake_mode: FakeTensorMode
    num_inputs: int
    mutated_inputs: tuple[int, ...]
    num_user_outputs: int
    outputs: tuple[OutputSlot, ...]
    is_joint: bool
    tangent_mask: tuple[bool, ...]  # per forward output: has a tangent
    grad_inputs: tuple[int, ...]  # inputs whose gradient the graph returns

    @property
    def num_fw_outputs(self) -> int:
        return len(self.mutated_inputs) + self.num_user_outputs


def _fake_inputs(mode: FakeTensorMode, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [mode.from_tensor(t.detach()) for t in inputs]


FakeInputs = Callable[[FakeTensorMode], list[torch.Tensor]]


def trace_graph(
    fn: Callable[..., Sequence[Any]],
    inputs: Sequence[torch.Tensor],
    decompositions: DecompTable,
    *,
    joint: bool,
    fake_inputs: FakeInputs | None = None,
) -> TracedGraph:
    """Trace ``fn(*inputs) -> flat outputs`` into a functional (joint) graph.

    ``fake_inputs(mode)`` makes the fake inputs (default: fakes with the real
    inputs' sizes); give it to trace with symbolic sizes (``ember.aotgrad.sizes``).
    """
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    tracer = GraphTracer(decompositions)
    fakes = fake_inputs(fake_mode) if fake_inputs is not None else _fake_inputs(fake_mode, inputs)
    args: list[torch.Tensor] = []
    leaves: list[torch.Tensor | None] = []
    for real, fake in zip(inputs, fakes):
        leaf = None
        if joint and real.requires_grad:
            leaf = fake.requires_grad_(True)
            with fake_mode:
                # a non-leaf may be mutated in place; gradients are taken w.r.t. the
                # leaf, i.e. the input's value before any mutation
                fake = leaf.clone()
        args.append(fake)
        leaves.append(leaf)
    for i, a in enumerate(args):
        tracer.placeholder(f"primals_{i + 1}", a)
    input_storage = {storage_key(a): i for i, a in reversed(list(enumerate(args)))}

    try:
        with fake_mode, tracer, torch.set_grad_enabled(joint):
            outs = list(fn(*args))
            mutated = find_mutated_inputs(tracer.graph)
            slots: list[OutputSlot] = []
            graph_outs: list[torch.Tensor | torch.SymInt | torch.SymFloat | torch.SymBool] = []
            for out in outs:
                if isinstance(out, SYM_TYPES) and expr_of(out) is not None:
                    # a symbolic size the function returns: the graph computes it
                    slots.append(OutputSlot("graph", len(graph_outs)))
                    graph_outs.append(out)
                    continue
                if not isinstance(out, torch.Tensor):
                    slots.append(OutputSlot("const", value=out))
                    continue
                src = input_storage.get(storage_key(out))
                if src is not None and out is not args[src] and is_symbolic_tensor(out):
                    raise TraceError(
                        "an output is a view of an input with symbolic sizes; ember.aotgrad "
                        "rebuilds such views only with static sizes (the graph runs eagerly)"
                    )
                if src is None:
                    slots.append(OutputSlot("graph", len(graph_outs)))
                    graph_outs.append(out)
                elif out is args[src] and src not in mutated:
                    slots.append(OutputSlot("input", src))
                else:
                    slots.append(OutputSlot("alias", src, layout_of(out)))
            fw_values = [args[i] for i in mutated] + graph_outs
            tangent_mask = [joint and isinstance(v, torch.Tensor) and v.requires_grad
                            for v in fw_values]
            grad_inputs: list[int] = []
            grads: list[torch.Tensor] = []
            if joint and any(tangent_mask):
                grad_inputs, grads = _trace_backward(tracer, fake_mode, leaves, fw_values,
                                                     tangent_mask)
            else:
                tangent_mask = [False] * len(fw_values)
            tracer.graph.output([v if isinstance(v, SYM_TYPES) else tracer.node_of(v)
                                 for v in fw_values + grads])
    except AotGradError:
        raise
    except Exception as e:
        raise TraceError(
            f"tracing failed: {type(e).__name__}: {e}. The function runs eagerly, but not "
            "on fake tensors under ember.aotgrad's tracer (an op without a fake kernel or "
            "a data-dependent shape?)"
        ) from e
    func = functionalize(tracer.graph_module(), fake_mode)
    if list(func.mutated_inputs) != mutated:
        raise TraceError(
            f"functionalization found mutated inputs {list(func.mutated_inputs)} but the "
            f"trace wrote to {mutated}; inputs that share memory are not supported"
        )
    traced = TracedGraph(
        gm=func.gm,
        fake_mode=fake_mode,
        num_inputs=len(inputs),
        mutated_inputs=tuple(mutated),
        num_user_outputs=len(graph_outs),
        outputs=tuple(slots),
        is_joint=bool(grads) or any(tangent_mask),
        tangent_mask=tuple(tangent_mask),
        grad_inputs=tuple(grad_inputs),
    )
    verify_traced(traced)
    return traced


def verify_traced(traced: TracedGraph) -> None:
    """Check the graph's signature against the bookkeeping (see the module doc)."""
    placeholders = [n.name for n in traced.gm.graph.nodes if n.op == "placeholder"]
    want_in = [f"primals_{i + 1}" for i in range(traced.num_inputs)]
    want_in += [f"tangents_{k + 1}" for k in range(sum(traced.tangent_mask))]
    out = next(n for n in traced.gm.graph.nodes if n.op == "output").args[0]
    want_out = traced.num_fw_outputs + len(traced.grad_inputs)
    problems = []
    if placeholders != want_in:
        problems.append(f"graph takes {placeholders}, expected {want_in}")
    if len(out) != want_out:
        problems.append(f"graph returns {len(out)} values, expected {len(traced.mutated_inputs)} "
                        f"mutated inputs + {traced.num_user_outputs} outputs + "
                        f"{len(traced.grad_inputs)} gradients")
    if len(traced.tangent_mask) != traced.num_fw_outputs:
        problems.append("tangent mask does not cover the forward outputs")
    if problems:
        raise VerifyError("invalid traced graph:\n  " + "\n  ".join(problems))


def _trace_backward(
    tracer: GraphTracer,
    fake_mode: FakeTensorMode,
    leaves: list[torch.Tensor | None],
    fw_values: list[torch.Tensor | torch.SymInt | torch.SymFloat | torch.SymBool],
    tangent_mask: list[bool],
) -> tuple[list[int], list[torch.Tensor]]:
    diff = [v for v, m in zip(fw_values, tangent_mask) if m and isinstance(v, torch.Tensor)]
    tangents: list[torch.Tensor] = []
    with _disable_current_modes(), fake_mode:
        for v in diff:
            tangents.append(torch.empty(v.shape, dtype=v.dtype, device=v.device))
    for k, t in enumerate(tangents):
        tracer.placeholder(f"tangents_{k + 1}", t)
    wrt = [(i, leaf) for i, leaf in enumerate(leaves) if leaf is not None]
    if not wrt:
        return [], []
    grads = torch.autograd.grad(diff, [leaf for _, leaf in wrt], tangents, allow_unused=True)
    grad_inputs = [i for (i, _), g in zip(wrt, grads) if g is not None]
    return grad_inputs, [g for g in grads if g is not None]
