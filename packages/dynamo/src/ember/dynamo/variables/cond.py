"""``torch.cond(pred, true_fn, false_fn, operands)`` captured as one graph node.

Each branch is traced like any inlined call, on the operands' trackers, into
the graph being built; the nodes it added are then moved out into a
``GraphModule`` of their own (``extract_subgraph``), whose inputs are the operands and
every other tensor the branch read from outside (parameters, closed-over
tensors, new frame inputs stay in the outer graph and are passed in). The
pair is registered with ``cond_op`` and the outer graph gets one node calling
``ember_dynamo::cond``: an opaque op every backend runs, that runs the branch
``pred`` selects (see ``cond_op``).

A branch must compute tensors only: one that changes Python state, changes
an operand in place, uses a non-tensor value computed outside it (other than
a size, read again inside), or returns anything
but a tensor or a tuple/list of tensors is a graph break that says so, as is
a pair whose outputs differ in number, shape or dtype. A constant ``pred``
just traces the branch it selects.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from .. import cond_op
from ..errors import Unsupported
from ..trace_rules import GraphCallable
from .base import VariableTracker
from .lists import BaseListVariable, ListVariable, TupleVariable
from .tensor import TensorVariable

if TYPE_CHECKING:
    from ..translator_core import TranslatorCore as Tx


def _bind(
    args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> tuple[VariableTracker, VariableTracker, VariableTracker, VariableTracker]:
    names = ("pred", "true_fn", "false_fn", "operands")
    bound = dict(zip(names, args, strict=False))
    for k, v in kwargs.items():
        if k not in names or k in bound:
            raise Unsupported(f"torch.cond with argument `{k}`")
        bound[k] = v
    if len(args) > len(names) or set(bound) != set(names):
        raise Unsupported("torch.cond without (pred, true_fn, false_fn, operands)")
    return bound["pred"], bound["true_fn"], bound["false_fn"], bound["operands"]


def tensors_of(result: VariableTracker, what: str) -> tuple[list[TensorVariable], bool]:
    """The branch's output tensors, and whether it returned one tensor (not a sequence)."""
    if isinstance(result, TensorVariable):
        return [result], True
    if isinstance(result, BaseListVariable) and all(isinstance(i, TensorVariable) for i in result.items):
        return [i for i in result.items if isinstance(i, TensorVariable)], False
    raise Unsupported(f"{what} returns {result.describe()} (tensors only)")


#: modules whose functions FX prints by name, so a graph's code pins what they do
PRINTED_BY_NAME = frozenset({"torch", "_operator", "operator", "builtins", "math"})


def _versions(graph: torch.fx.Graph) -> dict[torch.fx.Node, int]:
    found = {}
    for n in graph.nodes:
        ex = n.meta.get("example_value")
        if isinstance(ex, torch.Tensor):
            found[n] = ex._version
    return found


def trace_subgraph(
    tx: Tx,
    fn: VariableTracker,
    args: list[VariableTracker],
    what: str,
    may_change: Callable[[], Collection[torch.fx.Node]] | None = None,
) -> tuple[list[torch.fx.Node], VariableTracker]:
    """Trace ``fn(*args)`` into the outer graph: (the nodes it added, its result).
    ``fn`` must compute tensors only (module doc); only the tensors of the nodes
    ``may_change()`` names after the call (an autograd.Function's ``mark_dirty``
    inputs) may be changed in place."""
    output = tx.output
    before = set(output.graph.nodes)
    versions = _versions(output.graph)
    writes = output.trail.writes
    saved = output.inline_leaves
    output.inline_leaves = True  # a leaf module's call_module node would hide its parameters
    try:
        result = fn.call_function(tx, list(args), {})
    finally:
        output.inline_leaves = saved
    if output.trail.writes != writes:  # every observable change goes through the trail
        raise Unsupported(f"{what} changes Python state")
    allowed = set(may_change()) if may_change is not None else set()
    for n, v in versions.items():
        if n.meta["example_value"]._version != v and n not in allowed:
            raise Unsupported(f"{what} changes a tensor in place")
    return [n for n in output.graph.nodes if n not in before], result


def extract_subgraph(
    added: list[torch.fx.Node], outs: list[TensorVariable], operands: list[TensorVariable], what: str
) -> tuple[torch.fx.GraphModule, list[torch.fx.Node], bool]:
    """Move the branch's op nodes into a graph of their own: (the graph, the outer
    nodes it takes as inputs, in order, whether its code is all it does)."""
    sub = torch.fx.Graph()
    body = [n for n in added if n.op not in ("placeholder", "get_attr")]
    inside: dict[torch.fx.Node, torch.fx.Node] = {}
    inputs: list[torch.fx.Node] = []
    pure = True

    def outer(n: torch.fx.Node) -> torch.fx.Node:
        if n in inside:
            return inside[n]
        if n.op == "call_method" and n.target == "size" and isinstance(n.args[0], torch.fx.Node):
            # a symbolic size read before the branch: read it again inside
            inside[n] = sub.node_copy(n, outer)
            return inside[n]
        if not isinstance(n.meta.get("example_value"), torch.Tensor):
            raise Unsupported(
                f"{what} uses `{n.name}`, a non-tensor value from outside it"
            )
        ph = sub.placeholder(f"arg{len(inputs)}")
        ph.meta = dict(n.meta)
        inside[n] = ph
        inputs.append(n)
        return ph

    for o in operands:
        outer(o.node)
    for n in body:
        if n.op == "call_module":
            raise Unsupported(f"{what} calls a module as one node")
        if n.op == "call_function" and not isinstance(n.target, torch._ops.OpOverload):
            module = str(getattr(n.target, "__module__", "") or "")
            if isinstance(n.target, GraphCallable) or module.split(".")[0] not in PRINTED_BY_NAME:
                pure = False
        inside[n] = sub.node_copy(n, outer)
    sub.output(tuple(outer(o.node) for o in outs))
    gm = torch.fx.GraphModule(torch.nn.Module(), sub, class_name="CondBranch")
    return gm, inputs, pure


def _same_outputs(a: list[TensorVariable], b: list[TensorVariable]) -> None:
    if len(a) != len(b):
        raise Unsupported(f"torch.cond branches return {len(a)} and {len(b)} tensors")
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        ex, ey = x.example, y.example
        if ex.dtype != ey.dtype or ex.device != ey.device:
            raise Unsupported(f"torch.cond branches' output {i}: {ex.dtype} and {ey.dtype}")
        if [str(s) for s in ex.shape] != [str(s) for s in ey.shape]:
            raise Unsupported(
                f"torch.cond branches' output {i} has shapes {tuple(ex.shape)} and {tuple(ey.shape)}"
            )


def erase_moved(tx: Tx, nodes: list[torch.fx.Node]) -> None:
    for n in reversed(nodes):
        if n.op not in ("placeholder", "get_attr"):
            tx.output.graph.erase_node(n)


def cond_call(tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    pred, true_fn, false_fn, operands_var = _bind(args, kwargs)
    if not isinstance(operands_var, BaseListVariable):
        raise Unsupported(f"torch.cond with operands {operands_var.describe()} (a tuple or list is needed)")
    operands = list(operands_var.items)
    if pred.is_python_constant():
        chosen = true_fn if pred.as_python_constant() else false_fn
        return chosen.call_function(tx, operands, {})
    if not isinstance(pred, TensorVariable):
        raise Unsupported(f"torch.cond with predicate {pred.describe()} (a tensor or a constant is needed)")
    if pred.example.numel() != 1:
        raise Unsupported(f"torch.cond with a predicate of shape {tuple(pred.example.shape)}")
    tensor_operands = [o for o in operands if isinstance(o, TensorVariable)]
    if len(tensor_operands) != len(operands) and not all(
        isinstance(o, TensorVariable) or o.is_python_constant() for o in operands
    ):
        raise Unsupported("torch.cond with operands other than tensors and constants")
    pairs = []
    for fn, name in ((true_fn, "true_fn"), (false_fn, "false_fn")):
        what = f"torch.cond branch `{name}`"
        added, result = trace_subgraph(tx, fn, operands, what)
        outs, single = tensors_of(result, what)
        gm, inputs, pure = extract_subgraph(added, outs, tensor_operands, what)
        erase_moved(tx, added)
        pairs.append((gm, inputs, pure, outs, single))
    (t_gm, t_in, t_pure, t_outs, t_single), (f_gm, f_in, f_pure, f_outs, f_single) = pairs
    _same_outputs(t_outs, f_outs)
    if t_single != f_single:
        raise Unsupported("torch.cond branches return a tensor and a sequence")
    union = list(dict.fromkeys([*t_in, *f_in]))
    index = {n: i for i, n in enumerate(union)}
    key = cond_op.register(
        cond_op.Branch(t_gm, tuple(index[n] for n in t_in)),
        cond_op.Branch(f_gm, tuple(index[n] for n in f_in)),
        t_pure and f_pure,
    )
    target = GraphCallable(_Call(key), f"cond_{key[:8]}")
    with tx.output.fake_mode:
        example = target(pred.example, [n.meta["example_value"] for n in union])
    node = tx.output.graph.call_function(target, (pred.node, union))
    result = tx.output.wrap_result(node, example, [])
    assert isinstance(result, ListVariable)
    if t_single:
        return result.items[0]
    return TupleVariable(list(result.items))


class _Call:
    """The cond node's function: the op with its branches' key bound."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self, pred: torch.Tensor, operands: list[torch.Tensor]) -> Any:
        return cond_op.call_cond(self.key, pred, operands)

