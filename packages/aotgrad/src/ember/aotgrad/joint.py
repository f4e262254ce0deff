"""Trace a flat function into one functional ATen graph: forward only, or joint.

The joint graph takes ``primals_1..n`` (the function's tensor inputs) and
``tangents_1..k`` (one per differentiable forward output) and returns, in
order:

1. the new values of the inputs the function mutates (``mutated_inputs``),
2. the user outputs that the graph computes (outputs that are views of an
   input are not among them, and outputs that are views of one intermediate
   are returned as that intermediate once: the runtime rebuilds them as views,
   see ``aliasing.py``),
3. the gradients of the inputs that require grad (``grad_inputs``).

Groups 1 and 2 are the *forward outputs*. Without gradients (grad mode off or
no input requiring grad) the graph has no tangents and no group 3.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import _disable_current_modes

from ember.aotgrad.aliasing import copy_aliased_outputs, sized_steps, view_chain
from ember.aotgrad.errors import AotGradError, TraceError, VerifyError
from ember.aotgrad.functionalize import ViewStep, find_mutated_inputs, functionalize
from ember.aotgrad.sizes import SYM_TYPES, expr_of, is_symbolic_tensor
from ember.aotgrad.trace import GraphTracer, storage_key
from ember.ir import DecompTable
from ember.ir.shapes import EagerLayoutFakeMode, symbolic_dispatch


@dataclass(frozen=True, slots=True)
class OutputSlot:
    """Where one flat user output comes from at runtime.

    ``kind`` is ``"graph"`` (the ``index``-th user output the graph computes),
    ``"input"`` (input ``index``) or ``"const"`` (the non-tensor ``value``).
    A graph or input value is then viewed by ``views`` (see ``aliasing.py``):
    an output that eager returns as a view of an input, or as a view of an
    intermediate that another output also views, is rebuilt that way so it
    stays a view. ``requires_grad`` says whether eager's output is in the autograd
    graph (a view made under ``no_grad`` is not, even of a tensor that requires grad);
    views are replayed accordingly.
    """

    kind: str
    index: int = 0
    views: tuple[ViewStep, ...] = ()
    value: Any = None
    requires_grad: bool = True


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
    copied_inputs: tuple[int, ...] = ()  # inputs the graph takes as contiguous copies
    grad_tangents: tuple[tuple[int, ...], ...] = ()  # per gradient: the tangents it reads
    #: (user graph output, eager's strides) where the functional graph lays it out otherwise
    output_strides: tuple[tuple[int, tuple[int, ...]], ...] = ()

    @property
    def num_fw_outputs(self) -> int:
        return len(self.mutated_inputs) + self.num_user_outputs


def _fake_inputs(mode: FakeTensorMode, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [mode.from_tensor(t.detach()) for t in inputs]


def _traced_input(mode: FakeTensorMode, fake: torch.Tensor,
                  real: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """What the trace sees for an input that requires grad: (value, traced as a copy).

    The leaf itself cannot be mutated in place, so the trace runs on a non-leaf copy
    of it, whose gradient is the leaf's. The copy has the input's sizes and strides
    (``view``/``reshape`` choices depend on them; a slice's storage offset does not,
    and outputs aliasing the input are replayed on the real one). Inputs whose
    elements share memory (``expand``) cannot be copied with their strides; they are
    traced as a contiguous copy, and the runtime passes the graph a contiguous copy.
    """
    overlaps = torch._debug_has_internal_overlap(real) == 1  # MemOverlap::Yes
    with mode:
        if overlaps:
            return fake.clone(memory_format=torch.contiguous_format), True
        if is_symbolic_tensor(fake):  # sizes and strides are symbols: a clone keeps them
            return fake.clone(), False
        copy = torch.empty_strided(fake.shape, fake.stride(), dtype=fake.dtype,
                                   device=fake.device)
        return copy.copy_(fake), False


def _is_leaf_view(t: torch.Tensor) -> bool:
    """A leaf that requires grad and is a view of a tensor that does not (``b.expand(...)
    .requires_grad_()``): autograd treats writes to it and its views unlike other leaves."""
    return t.is_leaf and t.requires_grad and t._base is not None


def _plain_leaf_view(real: torch.Tensor, fake: torch.Tensor) -> bool:
    """A leaf view (``_is_leaf_view``) of fixed sizes whose elements do not share memory."""
    return (_is_leaf_view(real) and not is_symbolic_tensor(fake)
            and torch._debug_has_internal_overlap(real) != 1)


def _leaf_view_fake(mode: FakeTensorMode, real: torch.Tensor) -> torch.Tensor:
    """A fake leaf view of ``real``: the same positions in a fake of its root base, made a
    leaf that requires grad. Eager gives a view of such a leaf made under ``no_grad`` its
    root base's ``requires_grad`` (False), where a view of an ordinary leaf requires grad.
    The function cannot write to it in place (autograd refuses, so the trace fails and
    the function runs eagerly, as ``trace_graph`` also says for leaf views it copies)."""
    base = real._base
    assert base is not None
    fake_base = mode.from_tensor(base.detach())
    with mode:
        view = fake_base.as_strided(real.size(), real.stride(), real.storage_offset())
    return view.requires_grad_(True)


def _relocated(traced: torch.Tensor, real: torch.Tensor) -> bool:
    """Whether the copy an input is traced as sits otherwise in its storage than the real
    input (a slice's storage offset, a larger storage, an expanded input's new strides):
    ``as_strided`` takes storage positions, so on it the trace would read or write other
    elements than eager does (fuzz seed 4023)."""
    if is_symbolic_tensor(traced):
        return False
    return (traced.storage_offset() != real.storage_offset()
            or traced.stride() != real.stride()
            or traced.untyped_storage().nbytes() != real.untyped_storage().nbytes())


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
    fake_mode = EagerLayoutFakeMode(allow_non_fake_inputs=True)
    tracer = GraphTracer(decompositions)
    fakes = fake_inputs(fake_mode) if fake_inputs is not None else _fake_inputs(fake_mode, inputs)
    args: list[torch.Tensor] = []
    leaves: list[torch.Tensor | None] = []
    copied: list[int] = []
    for i, (real, fake) in enumerate(zip(inputs, fakes, strict=True)):
        leaf = None
        if joint and real.requires_grad and _plain_leaf_view(real, fake):
            # traced as what it is (a view of a base that does not require grad), so a view
            # made of it under no_grad does not require grad either, as in eager (seed 701)
            leaf = fake = _leaf_view_fake(fake_mode, real)
        elif joint and real.requires_grad:
            leaf = fake.requires_grad_(True)
            fake, as_copy = _traced_input(fake_mode, leaf, real)
            if as_copy:
                copied.append(i)
            if _relocated(fake, real):
                tracer.relocated.add(storage_key(fake))
        args.append(fake)
        leaves.append(leaf)
    for i, a in enumerate(args):
        tracer.placeholder(f"primals_{i + 1}", a)
    input_storage = {storage_key(a): i for i, a in reversed(list(enumerate(args)))}

    symbolic = any(is_symbolic_tensor(a) for a in args)
    with fake_mode, tracer, torch.set_grad_enabled(joint), symbolic_dispatch(symbolic):
        with _torch_failures_as_trace_errors():
            outs = list(fn(*args))
        mutated = find_mutated_inputs(tracer.graph)
        shared = sorted(set(mutated) & set(copied))
        if shared:
            raise TraceError(
                f"input {shared[0]} requires grad, its elements share memory (an expanded "
                "tensor) and the function writes to it in place; a functional graph cannot "
                "express that write. The function runs eagerly"
            )
        leaf_views = [i for i in mutated if joint and _is_leaf_view(inputs[i])]
        if leaf_views:
            raise TraceError(
                f"input {leaf_views[0]} is a leaf that requires grad and is itself a view (an "
                "expanded or sliced tensor made a leaf with requires_grad_()), and the function "
                "writes to it in place: eager then rebuilds the view's history from its base, "
                "which does not require grad, and the leaf gets no gradient (fuzz seed 3165). "
                "The function runs eagerly"
            )
        slots, graph_outs = _output_slots(tracer, outs, input_storage)
        fw_values = [args[i] for i in mutated] + graph_outs
        # an input written only under no_grad gets its new value without autograd history
        with_grad = set(find_mutated_inputs(tracer.graph, with_grad=True))
        tangent_mask = [joint and isinstance(v, torch.Tensor) and v.requires_grad
                        and (k >= len(mutated) or mutated[k] in with_grad)
                        for k, v in enumerate(fw_values)]
        grad_inputs: list[int] = []
        grads: list[torch.Tensor] = []
        if joint and any(tangent_mask):
            with _torch_failures_as_trace_errors():
                grad_inputs, grads = _trace_backward(tracer, fake_mode, leaves, fw_values,
                                                     tangent_mask)
        else:
            tangent_mask = [False] * len(fw_values)
        tracer.graph.output([v if isinstance(v, SYM_TYPES) else tracer.node_of(v)
                             for v in fw_values + grads])
    func = functionalize(tracer.graph_module(), fake_mode)
    placeholders = [n for n in func.gm.graph.nodes if n.op == "placeholder"]
    copy_aliased_outputs(func.gm, range(len(mutated) + len(graph_outs)),
                         {storage_key(n.meta["val"]) for n in placeholders}, dedupe=True)
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
        copied_inputs=tuple(copied),
        grad_tangents=_grad_tangents(func.gm, len(mutated) + len(graph_outs)),
        output_strides=_output_strides(func.gm, len(mutated), graph_outs),
    )
    verify_traced(traced)
    return traced


@contextlib.contextmanager
def _torch_failures_as_trace_errors() -> Iterator[None]:
    """Running the function (or autograd) on fake tensors failed: a ``TraceError``.

    Only torch's own execution is wrapped (an op without a fake kernel, a
    data-dependent shape), so a failure of aotgrad's bookkeeping around it stays
    what it is: an internal error, raised under ``EMBER_STRICT=1``.
    """
    try:
        yield
    except AotGradError:
        raise
    except Exception as e:
        raise TraceError(
            f"tracing failed: {type(e).__name__}: {e}. The function runs eagerly, but not "
            "on fake tensors under ember.aotgrad's tracer (an op without a fake kernel or "
            "a data-dependent shape?)"
        ) from e


def _output_slots(
    tracer: GraphTracer, outs: list[Any], input_storage: dict[int, int]
) -> tuple[list[OutputSlot], list[Any]]:
    """The slot of each user output, and the tensors the graph must return for them.

    An output sharing memory with an input is a replay of its views on that input.
    An output that is a view of an intermediate (and outputs sharing memory with each
    other) is a replay of its views on that base, which the graph returns once.
    """
    placeholders = [n for n in tracer.graph.nodes if n.op == "placeholder"]
    counts: dict[int, int] = {}
    for out in outs:
        if isinstance(out, torch.Tensor):
            counts[storage_key(out)] = counts.get(storage_key(out), 0) + 1
    slots: list[OutputSlot] = []
    graph_outs: list[torch.Tensor | torch.SymInt | torch.SymFloat | torch.SymBool] = []
    base_slot: dict[int, int] = {}
    for i, out in enumerate(outs):
        if isinstance(out, SYM_TYPES) and expr_of(out) is not None:
            # a symbolic size the function returns: the graph computes it
            slots.append(OutputSlot("graph", len(graph_outs)))
            graph_outs.append(out)
            continue
        if not isinstance(out, torch.Tensor):
            slots.append(OutputSlot("const", value=out))
            continue
        key = storage_key(out)
        found = view_chain(tracer.node_of(out))
        if is_symbolic_tensor(out) and found is not None and found[1]:
            # the view's symbolic sizes become graph outputs, read when it is replayed
            found = (found[0], sized_steps(found[1], graph_outs))
        if key in input_storage:
            if found is None or found[0].op != "placeholder":
                raise TraceError(
                    f"output {i} shares memory with input {input_storage[key]} through ops "
                    "ember.aotgrad cannot replay as views; return a copy (.clone()) of it"
                )
            slots.append(OutputSlot("input", placeholders.index(found[0]), found[1],
                                    requires_grad=_has_history(out)))
            continue
        base = found[0].meta.get("val") if found is not None else None
        # a view of an intermediate is returned as that view of it (eager's strides, and
        # outputs viewing one intermediate share its memory)
        # (not when the output is in the autograd graph and its base is not: a view an
        # autograd.Function returned of a value it computed, as DTensor's ``to_local``
        # does; replayed on the base it would lose its gradient)
        if found is not None and isinstance(base, torch.Tensor) and (found[1] or counts[key] > 1) \
                and not (_has_history(out) and not base.requires_grad):
            if key not in base_slot:
                base_slot[key] = len(graph_outs)
                graph_outs.append(base)
            slots.append(OutputSlot("graph", base_slot[key], found[1],
                                    requires_grad=_has_history(out)))
            continue
        slots.append(OutputSlot("graph", len(graph_outs), requires_grad=out.requires_grad))
        graph_outs.append(out)
    return slots, graph_outs


def _has_history(out: torch.Tensor) -> bool:
    """Whether eager's output is part of the autograd graph. A view made under
    ``no_grad`` of a tensor that requires grad still requires grad but has no
    ``grad_fn``: gradients do not flow through it, so it is replayed under no_grad.

    The view's creation mode is read from autograd's own record, not from
    ``grad_fn``: reading ``grad_fn`` of a view that one op returned among several
    (``split``) after an in-place write to its base raises."""
    if not out.requires_grad or not out._is_view():
        return out.requires_grad
    meta = torch._C._autograd._get_creation_meta(out)
    return bool(meta != torch._C._autograd.CreationMeta.NO_GRAD_MODE)


def _output_strides(gm: fx.GraphModule, first: int,
                    graph_outs: Sequence[Any]) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """User graph outputs whose layout in the functional graph is not eager's.

    The trace ran the function's in-place ops, so its outputs have eager's strides;
    functionalization computes a written tensor with out-of-place ops and scatters
    (``v = x.t(); v.add_(1); return x``), which may lay the same values out
    otherwise. The runtime copies such an output into eager's strides (ADR 0029).
    """
    out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    nodes = list(out_node.args[0])
    fixes: list[tuple[int, tuple[int, ...]]] = []
    for k, want in enumerate(graph_outs):
        node = nodes[first + k]
        got = node.meta.get("val") if isinstance(node, fx.Node) else None
        if (not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor)
                or is_symbolic_tensor(want) or is_symbolic_tensor(got)
                or not is_non_overlapping_and_dense_or_false(want)):
            continue
        if not same_strides(want, got):
            fixes.append((k, tuple(int(st) for st in want.stride())))
    return tuple(fixes)


def same_strides(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal strides on the dims that have more than one element (as eager compares)."""
    return all(sa == sb for n, sa, sb in zip(a.shape, a.stride(), b.stride(), strict=True)
               if n > 1)


def _grad_tangents(gm: fx.GraphModule, num_fw_outputs: int) -> tuple[tuple[int, ...], ...]:
    """For each gradient the joint graph returns, the tangents it depends on.

    A gradient none of whose tangents arrive (the outputs they belong to were not used
    by the loss) is ``None`` in eager, not zeros; the runtime needs this to match.
    """
    out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    tangents = {n: k for k, n in enumerate(
        n for n in gm.graph.nodes if n.op == "placeholder" and n.name.startswith("tangents_"))}
    deps: dict[fx.Node, frozenset[int]] = {}
    for node in gm.graph.nodes:
        if node in tangents:
            deps[node] = frozenset({tangents[node]})
        else:
            deps[node] = frozenset().union(*(deps[a] for a in node.all_input_nodes))
    result = []
    for grad in list(out_node.args[0])[num_fw_outputs:]:
        result.append(tuple(sorted(deps[grad])) if isinstance(grad, fx.Node) else ())
    return tuple(result)


def copy_saved_aliases(forward: fx.GraphModule, traced: TracedGraph) -> None:
    """Clone saved values of a partitioned forward that alias a mutated input: the
    runtime overwrites that input after the forward, the backward needs the old value."""
    if not traced.mutated_inputs:
        return
    primals = {n.name: n for n in forward.graph.nodes if n.op == "placeholder"}
    storages = {storage_key(primals[f"primals_{i + 1}"].meta["val"])
                for i in traced.mutated_inputs if f"primals_{i + 1}" in primals}
    out_node = next(n for n in reversed(forward.graph.nodes) if n.op == "output")
    n_out = len(out_node.args[0])
    copy_aliased_outputs(forward, range(traced.num_fw_outputs, n_out), storages, dedupe=False)


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
