"""Outputs that alias: found in the literal trace, regenerated at runtime by replaying views.

Eager returns a *view* when a function returns ``x.t()``, ``x[1:]`` or
``x.split(2)[0]`` of an input ``x``, or two outputs that are views of one
intermediate (``y, y[0]``): later writes through one are seen through the
other. A functional graph cannot return views, so aotgrad keeps such outputs
out of the graph and rebuilds them at runtime from their *base* (the real
input, or one graph output standing for the intermediate) by running the same
view ops again (``view_chain`` records them from the trace, ``replay`` runs
them). Replaying the ops, not an ``as_strided`` of a recorded layout, gives
eager's sizes, strides and storage offset exactly, however the base was laid
out (a slice with an offset, a transposed or gapped tensor, an input traced
through a clone because it requires grad), and gives the view eager's autograd
history (``TBackward``, ``SliceBackward``) as well.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_map

from ember.aotgrad.functionalize import ViewStep, written_args
from ember.aotgrad.sizes import SYM_TYPES, expr_of
from ember.aotgrad.trace import storage_key
from ember.ir.shapes import python_value

#: ops whose results share their input's memory without saying so in their schema (the
#: "unsafe" of ``unsafe_split``: autograd does not track them as views); eager returns
#: views, so an output reached through them is replayed as one
_UNDECLARED_VIEWS = frozenset({
    torch.ops.aten.unsafe_split.Tensor,
    torch.ops.aten.unsafe_split_with_sizes.default,
    torch.ops.aten.unsafe_chunk.default,
})


def _is_view_op(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload) and (
        bool(target.is_view) or target in _UNDECLARED_VIEWS
    )


def _plain(value: Any) -> bool:
    """Arguments a view step may carry: no tensors or graph nodes."""
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return not isinstance(value, (fx.Node, torch.Tensor))


def _fresh_storage(node: fx.Node) -> bool:
    """Whether a view op's result has another storage than its input in the trace:
    ``lift_fresh`` of a constant built in the graph (``torch.tensor([...])``) returns a
    tensor of its own, so a write through views of it must not be replayed on the
    constant (fuzz seed 3455)."""
    src = node.args[0] if node.args else None
    mine, theirs = node.meta.get("storage"), getattr(src, "meta", {}).get("storage")
    return mine is not None and theirs is not None and mine != theirs


def view_chain(node: fx.Node) -> tuple[fx.Node, tuple[ViewStep, ...]] | None:
    """(the base node, the view ops leading from it to ``node``) in a literal trace.

    In-place ops and ``out=`` ops are looked through (they return the tensor
    they wrote); the walk stops at the first node that owns its storage (a
    placeholder, a constant, an op's fresh result). None when some step cannot
    be replayed (its arguments hold tensors).
    """
    steps: list[ViewStep] = []
    while node.op == "call_function":
        target: Any = node.target
        if target is operator.getitem:
            parent = node.args[0]
            index = node.args[1]
            if not (isinstance(parent, fx.Node) and _is_view_op(parent.target)
                    and isinstance(index, int)):
                break
            step = ViewStep(parent.target, tuple(parent.args[1:]),
                            tuple(parent.kwargs.items()), index,
                            parent.meta.get("grad_enabled") is False)
            node = parent.args[0]  # type: ignore[assignment]
        elif _is_view_op(target):
            if _fresh_storage(node):
                break  # a view op that owns its storage (``lift_fresh`` of a constant)
            step = ViewStep(target, tuple(node.args[1:]), tuple(node.kwargs.items()),
                            no_grad=node.meta.get("grad_enabled") is False)
            node = node.args[0]  # type: ignore[assignment]
        else:
            writes = written_args(target)
            if writes == [0] and isinstance(node.args[0], fx.Node):
                node = node.args[0]
                continue
            outs = [a.name for a in target._schema.arguments if a.is_out] if writes else []
            if len(outs) == 1 and isinstance(node.kwargs.get(outs[0]), fx.Node):
                node = node.kwargs[outs[0]]  # type: ignore[assignment]
                continue
            break
        if not (_plain(step.args) and _plain(step.kwargs)):
            return None
        steps.append(step)
    return node, tuple(reversed(steps))


@dataclass(frozen=True, slots=True)
class SizeRef:
    """A symbolic size among a view step's arguments (``view(x, [s0, 4, s1 // 4])``): the
    graph computes it as its ``index``-th user output, and :func:`replay` reads it there."""

    index: int


def sized_steps(steps: Sequence[ViewStep], graph_outs: list[Any]) -> tuple[ViewStep, ...]:
    """``steps`` with each symbolic size replaced by a :class:`SizeRef` to a new graph output
    (appended to ``graph_outs``), so views of tensors with symbolic sizes replay at runtime
    with this call's sizes."""

    def ref(a: Any) -> Any:
        if not isinstance(a, SYM_TYPES):
            return a
        if expr_of(a) is None:
            return python_value(a)  # a constant: no guard
        graph_outs.append(a)
        return SizeRef(len(graph_outs) - 1)

    return tuple(ViewStep(s.op, tuple(tree_map(ref, list(s.args))),
                          tuple((k, tree_map(ref, v)) for k, v in s.kwargs), s.index, s.no_grad)
                 for s in steps)


def replay(base: torch.Tensor, steps: Sequence[ViewStep],
           sizes: Sequence[Any] = ()) -> torch.Tensor:
    """``base`` viewed by ``steps``, as the traced function viewed it; a :class:`SizeRef`
    argument is read from ``sizes`` (the graph's user outputs of this call)."""

    def resolve(a: Any) -> Any:
        # view arguments are ints, SizeRefs and lists of them: no pytree walk (it cost
        # ~5 us per step on every call)
        kind = type(a)
        if kind is SizeRef:
            return sizes[a.index]
        if kind is int:
            return a
        # (lists in FX nodes' arguments are torch.fx's immutable_list, a list subclass)
        if isinstance(a, (list, tuple)):
            items = [resolve(x) for x in a]
            return tuple(items) if isinstance(a, tuple) else items
        if kind is dict:
            return {k: resolve(v) for k, v in a.items()}
        return a

    value = base
    for step in steps:
        args: Any = step.args
        if sizes and args:
            args = resolve(args)
        kwargs = {k: resolve(v) if sizes else v for k, v in step.kwargs} if step.kwargs else {}
        if step.no_grad and torch.is_grad_enabled():
            # a view made under no_grad: eager's views of it pass no gradient (seed 3730)
            with torch.no_grad():
                value = step.op(value, *args, **kwargs)
                if step.index is not None:
                    value = value[step.index]
            continue
        value = step.op(value, *args, **kwargs)
        if step.index is not None:
            value = value[step.index]
    return value


def copy_aliased_outputs(gm: fx.GraphModule, positions: Iterable[int], storages: set[int],
                         *, dedupe: bool) -> None:
    """Clone the outputs at ``positions`` that share memory with ``storages``.

    Used on the functional graph's forward outputs (``v1[:] = x.t(); return v1``
    becomes ``return t(x)``, which the user must see as a fresh tensor; with
    ``dedupe`` an output also may not share memory with an earlier one), and on saved
    values that alias an input the runtime overwrites after the forward (the
    backward needs the value from before).
    """
    out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    outs = list(out_node.args[0])
    seen = set(storages)
    changed = False
    for k in positions:
        node = outs[k]
        if not isinstance(node, fx.Node) or not isinstance(node.meta.get("val"), torch.Tensor):
            continue
        val = node.meta["val"]
        key = storage_key(val)
        if key not in seen:
            if dedupe:
                seen.add(key)
            continue
        with gm.graph.inserting_before(out_node):
            copy = gm.graph.call_function(torch.ops.aten.clone.default, (node,))
        mode = getattr(val, "fake_mode", None)
        with mode if mode is not None else contextlib.nullcontext():
            copy.meta["val"] = val.clone()
        outs[k] = copy
        changed = True
    if changed:
        out_node.args = (outs,)
        gm.recompile()


# --- the plan cache's encoding ------------------------------------------------------------


def steps_json(steps: Sequence[ViewStep]) -> list[dict[str, Any]]:
    import ember.ir as ir

    return [{"op": ir.target_name(s.op), "args": ir.encode_value(list(s.args)),
             "kwargs": ir.encode_value(dict(s.kwargs)), "index": s.index,
             "no_grad": s.no_grad} for s in steps]


def steps_from_json(data: list[dict[str, Any]]) -> tuple[ViewStep, ...]:
    import ember.ir as ir

    out = []
    for d in data:
        args: Any = ir.decode_value(d["args"])
        kwargs: Any = ir.decode_value(d["kwargs"])
        index = d["index"]
        out.append(ViewStep(ir.resolve_target(d["op"]), tuple(args), tuple(kwargs.items()),
                            None if index is None else int(index), bool(d.get("no_grad", False))))
    return tuple(out)
