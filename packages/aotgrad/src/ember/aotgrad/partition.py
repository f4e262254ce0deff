"""Split a functional joint graph into a forward and a backward graph.

Both partitioners decide only *which forward values are saved* for the
backward; :func:`split_joint` then builds the two graphs from that choice:

- the forward computes the forward outputs, every saved value and every random
  op (so the RNG advances exactly as in eager), and returns
  ``forward outputs + saved values``;
- the backward takes ``saved values + tangents`` and recomputes anything else
  it needs from the saved values.

:func:`default_partition` saves every forward value the backward reads.
:func:`min_cut_rematerialization_partition` chooses the saved set with a
minimum cut (networkx) that weighs each value by its bytes, lets the backward
recompute cheap pointwise/view ops, and never recomputes matmuls,
convolutions, reductions or random ops (see :func:`op_category`).

Both honour activation-checkpointing regions (``regions.py``): a value marked
``meta["recompute"]`` is never saved; the backward recomputes it, matmuls
included, from the values that flow into its region (:func:`must_recompute`).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
import torch.fx as fx

from ember.aotgrad.errors import PartitionError, VerifyError
from ember.aotgrad.regions import region_of
from ember.aotgrad.sizes import hint, read_unbacked_producers

aten = torch.ops.aten


class OpCategory(Enum):
    """How the min-cut partitioner treats an op when deciding what to recompute."""

    VIEW = "view"  # free: recompute
    POINTWISE = "pointwise"  # cheap, memory bound: recompute
    CHEAP = "cheap"  # constructors, casts, cat, copies: recompute
    REDUCTION = "reduction"  # never recompute
    MATMUL = "matmul"  # matmul and convolution: never recompute
    RANDOM = "random"  # never recompute: the RNG would advance differently
    OTHER = "other"  # anything unknown: never recompute


RECOMPUTABLE = frozenset({OpCategory.VIEW, OpCategory.POINTWISE, OpCategory.CHEAP})

_MATMUL = {"mm", "addmm", "bmm", "baddbmm", "matmul", "convolution", "convolution_backward",
           "_convolution", "addbmm", "dot", "mv", "_scaled_dot_product_flash_attention",
           "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention_for_cpu"}
_REDUCTION = {"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "var", "var_mean",
              "std", "prod", "logsumexp", "_softmax", "_log_softmax", "native_layer_norm",
              "native_batch_norm", "_native_batch_norm_legit_functional", "cumsum", "norm",
              "linalg_vector_norm", "any", "all", "native_group_norm", "topk", "sort"}
_CHEAP = {"full", "full_like", "zeros", "zeros_like", "ones", "ones_like", "empty",
          "empty_like", "empty_strided", "scalar_tensor", "_to_copy", "clone", "cat",
          "where", "arange", "iota", "fill", "copy", "lift_fresh_copy", "constant_pad_nd",
          "slice_scatter", "select_scatter", "index_select", "masked_fill"}


def op_category(target: Any) -> OpCategory:
    """The recompute category of an FX node target."""
    if target is operator.getitem:
        return OpCategory.VIEW
    if not isinstance(target, torch._ops.OpOverload):
        return OpCategory.OTHER
    if torch.Tag.nondeterministic_seeded in target.tags:
        return OpCategory.RANDOM
    name = target.overloadpacket.__name__
    if name in _MATMUL:
        return OpCategory.MATMUL
    if name in _REDUCTION:
        return OpCategory.REDUCTION
    if target.is_view:
        return OpCategory.VIEW
    if name in _CHEAP:
        return OpCategory.CHEAP
    if torch.Tag.pointwise in target.tags:
        return OpCategory.POINTWISE
    return OpCategory.OTHER


@dataclass(frozen=True, slots=True)
class Partition:
    """A forward/backward pair cut from a joint graph.

    ``forward(*primals) -> (*fw_outputs, *saved)`` and
    ``backward(*saved, *tangents) -> grads``; ``saved`` names the saved values.
    """

    forward: fx.GraphModule
    backward: fx.GraphModule
    saved: tuple[str, ...]
    num_fw_outputs: int


def _is_tangent(node: fx.Node) -> bool:
    return node.op == "placeholder" and node.name.startswith("tangents")


def _joint_parts(joint: fx.GraphModule, num_fw_outputs: int) -> tuple[list[Any], list[Any]]:
    out = next(n for n in joint.graph.nodes if n.op == "output")
    values = list(out.args[0])
    return values[:num_fw_outputs], values[num_fw_outputs:]


def _ancestors(roots: Iterable[Any], stop: set[fx.Node] | None = None) -> set[fx.Node]:
    seen: set[fx.Node] = set()
    stack = [r for r in roots if isinstance(r, fx.Node)]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if stop is not None and node in stop:
            continue
        stack.extend(node.all_input_nodes)
    return seen


def _tangent_dependent(joint: fx.GraphModule) -> set[fx.Node]:
    dep: set[fx.Node] = set()
    for node in joint.graph.nodes:
        if _is_tangent(node) or any(a in dep for a in node.all_input_nodes):
            dep.add(node)
    return dep


def default_partition(joint: fx.GraphModule, *, num_fw_outputs: int) -> Partition:
    """Save every forward value (input or intermediate) that the backward reads."""
    fw_outs, grads = _joint_parts(joint, num_fw_outputs)
    primals = [n for n in joint.graph.nodes if n.op == "placeholder" and not _is_tangent(n)]
    forward = _ancestors(fw_outs) | set(primals)
    # a multi-output op is saved through its items, never as a tuple
    forward |= {u for n in forward for u in n.users if u.target is operator.getitem}
    backward = _ancestors(grads) - forward
    saved = [n for n in joint.graph.nodes if n in forward and (
        any(u in backward for u in n.users) or n in grads)]
    saved = _outside_regions(joint, saved, _tangent_dependent(joint))
    return split_joint(joint, saved, num_fw_outputs=num_fw_outputs)


def must_recompute(node: fx.Node, backward: set[fx.Node]) -> bool:
    """Whether ``node`` is a forward value of a checkpointed region (``regions.py``) that
    the backward recomputes instead of saving: not a random op (recomputing it would
    draw other numbers), not a value the backward compares exactly (see
    :func:`_compared_exactly`); ``backward`` holds the tangent-dependent nodes."""
    if region_of(node) is None or node.op != "call_function" or node in backward:
        return False
    if op_category(node.target) is OpCategory.RANDOM:
        return False
    val = node.meta.get("val")
    exact = isinstance(val, torch.Tensor) and val.dtype.is_floating_point and any(
        isinstance(u.target, torch._ops.OpOverload) and u in backward
        and u.target.overloadpacket.__name__ in _EXACT_COMPARISONS for u in node.users)
    return not exact


def _outside_regions(joint: fx.GraphModule, saved: list[fx.Node], backward: set[fx.Node]) -> list[fx.Node]:
    """``saved`` with each checkpointed value replaced by the values its region reads
    from outside, which the backward recomputes it from."""
    out: set[fx.Node] = set()
    seen: set[fx.Node] = set()
    stack = list(saved)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        inputs = node.all_input_nodes
        # a multi-output op outside the region is saved through its items, never as a tuple
        if must_recompute(node, backward) and not any(
            isinstance(a.meta.get("val"), (tuple, list)) and not must_recompute(a, backward) for a in inputs
        ):
            stack.extend(inputs)
        else:
            out.add(node)
    order = {n: i for i, n in enumerate(joint.graph.nodes)}
    return sorted(out, key=order.__getitem__)


def node_bytes(node: fx.Node) -> int:
    """Bytes of memory keeping ``node``'s value alive costs (its whole storage)."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return 0
    try:
        return hint(val.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return hint(val.numel()) * val.element_size()


_BERNOULLI = {aten.bernoulli.p, aten.bernoulli.default}


def _with_bool_masks(joint: fx.GraphModule) -> tuple[fx.GraphModule, list[fx.Node]]:
    """A copy of ``joint`` where each float Bernoulli draw (a dropout mask, 0s and 1s)
    also exists as a 1-byte bool tensor that the float one is recomputed from.

    The conversions are exact, so the cut may save the bool mask instead of the
    float one: a quarter of the bytes for float32.
    """
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    out = graph.graph_copy(joint.graph, env)
    graph.output(out)
    masks = []
    for node in list(graph.nodes):
        val = node.meta.get("val")
        if node.target not in _BERNOULLI or not isinstance(val, torch.Tensor):
            continue
        if not val.dtype.is_floating_point:
            continue
        with graph.inserting_after(node):
            mask = graph.call_function(aten._to_copy.default, (node,), {"dtype": torch.bool})
        with graph.inserting_after(mask):
            back = graph.call_function(aten._to_copy.default, (mask,), {"dtype": val.dtype})
        mask.meta["val"] = aten._to_copy.default(val, dtype=torch.bool)
        back.meta["val"] = aten._to_copy.default(mask.meta["val"], dtype=val.dtype)
        for user in [u for u in node.users if u is not mask]:
            user.replace_input_with(node, back)
        masks.append(mask)
    return fx.GraphModule(joint, graph), masks


def min_cut_rematerialization_partition(
    joint: fx.GraphModule, *, num_fw_outputs: int
) -> Partition:
    """Choose the saved values by a minimum cut weighted by bytes (see module doc).

    Dropout masks drawn as floats may be saved as bools (:func:`_with_bool_masks`);
    that variant is used only when the cut actually saves a bool mask.
    """
    packed, masks = _with_bool_masks(joint)
    if masks:
        part = _min_cut(packed, num_fw_outputs=num_fw_outputs)
        if set(part.saved) & {m.name for m in masks}:
            return part
    return _min_cut(joint, num_fw_outputs=num_fw_outputs)


def _min_cut(joint: fx.GraphModule, *, num_fw_outputs: int) -> Partition:
    import networkx as nx  # here, not at module level: its import (~0.5 s) is only paid by a cut

    fw_outs, grads = _joint_parts(joint, num_fw_outputs)
    required_fw = _ancestors(fw_outs)
    tangent_dep = _tangent_dependent(joint)
    required_bw = tangent_dep | {g for g in grads if isinstance(g, fx.Node)}
    outputs = {o for o in fw_outs if isinstance(o, fx.Node)}
    flow = nx.DiGraph()
    for node in joint.graph.nodes:
        if node.op == "output":
            continue
        if node in required_bw:
            flow.add_edge(node.name + "_in", "sink", capacity=math.inf)
            continue
        is_input = node.op in ("placeholder", "get_attr")
        # a checkpointed value (``regions.py``) is recomputed whatever its op costs
        recompute = not is_input and must_recompute(node, tangent_dep)
        banned = not is_input and not recompute and (
            op_category(node.target) not in RECOMPUTABLE or _compared_exactly(node, required_fw))
        if is_input or (banned and node in required_fw):
            # inputs exist in the forward; banned ops must run there, never again
            flow.add_edge("source", node.name + "_in", capacity=math.inf)
        val = node.meta.get("val")
        weight = _save_cost(node, outputs) if isinstance(val, torch.Tensor) and not recompute else math.inf
        flow.add_edge(node.name + "_in", node.name + "_out", capacity=weight)
        for user in node.users:
            if user.op != "output":
                flow.add_edge(node.name + "_out", user.name + "_in", capacity=math.inf)
    if "source" not in flow or "sink" not in flow:
        return default_partition(joint, num_fw_outputs=num_fw_outputs)
    try:
        _, (reachable, _) = nx.minimum_cut(flow, "source", "sink")
    except nx.NetworkXUnbounded:
        raise PartitionError(
            "min-cut found no finite cut: some value the backward needs can be neither "
            "saved nor recomputed (a non-tensor value between forward and backward?)"
        ) from None
    names = {n.name: n for n in joint.graph.nodes}
    saved = []
    for u in reachable:
        if u.endswith("_in") and u != "source":
            node = names.get(u[:-3])
            if node is not None and (node.name + "_out") not in reachable:
                saved.append(node)
    order = {n: i for i, n in enumerate(joint.graph.nodes)}
    saved.sort(key=order.__getitem__)
    return split_joint(joint, saved, num_fw_outputs=num_fw_outputs)


def _save_cost(node: fx.Node, outputs: set[fx.Node]) -> int:
    """The capacity of ``node``'s edge in the cut: twice its bytes, one less for a forward
    output. An output the caller holds until the backward (the loss reads it) costs nothing
    more when it is saved too; the graph cannot know that it is held, so among values of
    equal bytes the cut saves the output (``tanh``'s backward can read its output or
    ``1 - out**2``, computed in the forward: the second was an extra activation, ADR 0063)."""
    return 2 * node_bytes(node) - (1 if node in outputs else 0)


_EXACT_COMPARISONS = {"eq", "ne"}


def _compared_exactly(node: fx.Node, required_fw: set[fx.Node]) -> bool:
    """Whether the backward compares ``node``'s float value for equality (the backward
    of ``max``: ``x == max(x)``). A recomputed value may differ in the last bit from the
    forward's (a vectorized ``erf`` is not the scalar one), and then no element equals
    the saved maximum: the value must come from the forward, not be recomputed."""
    val = node.meta.get("val")
    if node not in required_fw or not isinstance(val, torch.Tensor):
        return False
    if not val.dtype.is_floating_point:
        return False
    return any(isinstance(u.target, torch._ops.OpOverload) and u not in required_fw
               and u.target.overloadpacket.__name__ in _EXACT_COMPARISONS for u in node.users)


def split_joint(
    joint: fx.GraphModule, saved: list[fx.Node], *, num_fw_outputs: int
) -> Partition:
    """Build the forward and backward graphs that exchange exactly ``saved``."""
    fw_outs, grads = _joint_parts(joint, num_fw_outputs)
    randoms = [n for n in joint.graph.nodes if n.op == "call_function"
               and op_category(n.target) is OpCategory.RANDOM]
    tangent_dep = _tangent_dependent(joint)
    randoms = [n for n in randoms if n not in tangent_dep]
    # an op making an unbacked size that either graph reads as a number runs in the forward
    # (the forward computes the size from its result; the backward gets it as a saved int)
    sizes = [n for n in read_unbacked_producers(joint) if n not in tangent_dep]
    fw_nodes = _ancestors([*fw_outs, *saved, *randoms, *sizes])
    if fw_nodes & tangent_dep:
        bad = next(iter(fw_nodes & tangent_dep))
        raise PartitionError(f"forward would need '{bad.name}', which depends on a tangent")
    fw_graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in joint.graph.nodes:
        if node in fw_nodes or (node.op == "placeholder" and not _is_tangent(node)):
            env[node] = fw_graph.node_copy(node, env.__getitem__)
    fw_graph.output([_lookup(env, v) for v in (*fw_outs, *saved)])

    saved_set = set(saved)
    bw_nodes = _ancestors(grads, stop=saved_set)
    bw_graph = fx.Graph()
    benv: dict[fx.Node, fx.Node] = {}
    for node in saved:
        ph = bw_graph.placeholder(node.name)
        ph.meta.update(node.meta)
        benv[node] = ph
    for node in joint.graph.nodes:
        if _is_tangent(node):
            benv[node] = bw_graph.node_copy(node, benv.__getitem__)
    for node in joint.graph.nodes:
        if node in benv or node not in bw_nodes or node.op == "output":
            continue
        if node.op == "placeholder":
            raise PartitionError(
                f"backward needs input '{node.name}' but the partitioner did not save it"
            )
        benv[node] = bw_graph.node_copy(node, benv.__getitem__)
    bw_graph.output([_lookup(benv, g) for g in grads])
    partition = Partition(
        forward=fx.GraphModule(joint, fw_graph),
        backward=fx.GraphModule(joint, bw_graph),
        saved=tuple(n.name for n in saved),
        num_fw_outputs=num_fw_outputs,
    )
    verify_partition(joint, partition)
    return partition


def _lookup(env: dict[fx.Node, fx.Node], value: Any) -> Any:
    return env[value] if isinstance(value, fx.Node) else value


def verify_partition(joint: fx.GraphModule, part: Partition) -> None:
    """Check the split's signature against the joint graph's (Autodidax part 4).

    forward inputs = primals; forward outputs = forward outputs + saved values;
    backward inputs = saved values + tangents; backward outputs = gradients.
    """
    primals = [n for n in joint.graph.nodes if n.op == "placeholder" and not _is_tangent(n)]
    tangents = [n for n in joint.graph.nodes if _is_tangent(n)]
    _, grads = _joint_parts(joint, part.num_fw_outputs)
    fw_in = [n for n in part.forward.graph.nodes if n.op == "placeholder"]
    fw_out = next(n for n in part.forward.graph.nodes if n.op == "output").args[0]
    bw_in = [n for n in part.backward.graph.nodes if n.op == "placeholder"]
    bw_out = next(n for n in part.backward.graph.nodes if n.op == "output").args[0]
    problems = []
    if len(fw_in) != len(primals):
        problems.append(f"forward takes {len(fw_in)} inputs, the joint has {len(primals)} primals")
    if len(fw_out) != part.num_fw_outputs + len(part.saved):
        problems.append(
            f"forward returns {len(fw_out)} values, expected {part.num_fw_outputs} outputs "
            f"+ {len(part.saved)} saved values")
    want_bw = [*part.saved, *(t.name for t in tangents)]
    if [n.name for n in bw_in] != want_bw:
        problems.append(f"backward takes {[n.name for n in bw_in]}, expected saved values + "
                        f"tangents {want_bw}")
    if len(bw_out) != len(grads):
        problems.append(f"backward returns {len(bw_out)} gradients, the joint {len(grads)}")
    tangent_dep = {n.name for n in _tangent_dependent(joint)}
    for node in part.backward.graph.nodes:
        if node.op == "call_function" and op_category(node.target) is OpCategory.RANDOM and (
            node.name not in tangent_dep
        ):
            problems.append(f"backward recomputes random op '{node.name}' ({node.target})")
    if problems:
        raise VerifyError("invalid forward/backward split:\n  " + "\n  ".join(problems))
