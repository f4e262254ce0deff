"""Dynamic Python floats as 0-d tensor operands, so graphs reading them compile (ADR 0055).

ember.dynamo passes a Python float that changes between calls as a 0-d float64 tensor
input, read back by ``aten._local_scalar_dense`` (a ``SymFloat``) and used as the Scalar
operand of ATen ops (``mul.Tensor(x, f0)``, ``add.Tensor(y, f0)``; ADR 0044). Kernels
take no float arguments, but every such use can read the value from memory instead:
:func:`floats_as_tensors` replaces the ``SymFloat`` operand by the 0-d tensor itself,
converted to the dtype ATen computes that op in (the op's result dtype, float32 for
float16/bfloat16, which ATen computes in float32; for a comparison, the dtype of its
floating operand, or the default dtype), which is the value ATen's kernel converts the
Python scalar to. A ``.Scalar`` overload whose ``.Tensor`` twin takes a tensor there is
switched to it. The kernels then load the value: no host sync, no recompile per value.

A graph where some use of the float is not such an operand (size arithmetic,
``sym_float``, an op without a tensor overload) is left as it is and runs eagerly, with
the reason ``compile_fx`` logs. The float tensor must be on the graph's device (a CPU
float with CUDA tensors still runs eagerly: ``_eager_reason`` refuses mixed devices).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

aten = torch.ops.aten

__all__ = ["floats_as_tensors"]


def _positions(user: fx.Node, value: fx.Node) -> list[int | str]:
    """Where ``value`` is an operand of ``user`` (argument index or keyword)."""
    out: list[int | str] = [i for i, a in enumerate(user.args) if a is value]
    out += [k for k, a in user.kwargs.items() if a is value]
    return out


def _schema_index(op: Any, pos: int | str) -> int | None:
    args = op._schema.arguments
    if isinstance(pos, int):
        return pos if pos < len(args) else None
    return next((i for i, a in enumerate(args) if a.name == pos), None)


def _takes_tensor(op: Any, positions: list[int | str]) -> bool:
    for pos in positions:
        i = _schema_index(op, pos)
        if i is None or not isinstance(op._schema.arguments[i].type, torch.TensorType):
            return False
    return True


#: ops whose Python-float operand ATen reads as a "CPU scalar" in the op's computation
#: dtype, whether it is a wrapped number or a 0-d tensor of that dtype: elementwise
#: arithmetic and comparisons. Others (``lerp``'s weight must have the input's dtype,
#: ``pow`` takes fast paths for some constant exponents, ``add``'s ``alpha``) are left alone.
_BINARY = frozenset({"add", "sub", "rsub", "mul", "div", "eq", "ne", "lt", "le", "gt", "ge"})


def _tensor_overload(op: Any, positions: list[int | str]) -> Any | None:
    """``op``, or the overload of its packet that takes a tensor at ``positions`` and has
    the same arguments otherwise (``mul.Scalar`` -> ``mul.Tensor``); None if there is none
    or ``op`` is not an elementwise binary op of ``_BINARY``."""
    if op._schema.name.split("::")[-1] not in _BINARY or any(p not in (0, 1, "other") for p in positions):
        return None
    if _takes_tensor(op, positions):
        return op
    packet = op.overloadpacket
    mine = op._schema.arguments
    for name in packet.overloads():
        other = getattr(packet, name)
        theirs = other._schema.arguments
        if len(theirs) != len(mine) or [a.name for a in theirs] != [a.name for a in mine]:
            continue
        fixed = {_schema_index(op, p) for p in positions}
        if all(i in fixed or str(a.type) == str(b.type) for i, (a, b) in enumerate(zip(mine, theirs))) \
                and _takes_tensor(other, positions):
            return other
    return None


def _compute_dtype(user: fx.Node, value: fx.Node) -> torch.dtype | None:
    """The dtype ATen converts a Python float operand of ``user`` to."""
    out = user.meta.get("val")
    if not isinstance(out, torch.Tensor) or out.is_complex():
        return None
    if out.dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    if out.dtype.is_floating_point:
        return out.dtype
    operands = [a.meta.get("val") for a in (*user.args, *user.kwargs.values())
                if isinstance(a, fx.Node) and a is not value]
    for t in operands:
        if isinstance(t, torch.Tensor) and t.dtype.is_floating_point:
            return torch.float32 if t.dtype in (torch.float16, torch.bfloat16) else t.dtype
    if any(isinstance(t, torch.Tensor) and t.is_complex() for t in operands):
        return None
    return torch.get_default_dtype()


def floats_as_tensors(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` with each dynamic float operand read from its 0-d tensor (a new module), or
    ``gm`` itself when it has none or some use of one cannot be rewritten."""
    reads = [
        n for n in gm.graph.nodes
        if n.target is aten._local_scalar_dense.default and isinstance(n.meta.get("val"), torch.SymFloat)
    ]
    if not reads:
        return gm
    # (float read, its user, the user's new overload (None: a scalar_tensor replaced whole),
    # the float's positions among the user's operands, the dtype it is converted to)
    plan: list[tuple[fx.Node, fx.Node, Any, list[int | str], torch.dtype]] = []
    for read in reads:
        source = read.args[0]
        if not isinstance(source, fx.Node) or not isinstance(source.meta.get("val"), torch.Tensor):
            return gm
        for user in read.users:
            if user.op != "call_function" or not isinstance(user.target, torch._ops.OpOverload):
                return gm
            if user.target is aten.scalar_tensor.default:  # the float as a 0-d tensor: a copy
                val = user.meta.get("val")
                if not isinstance(val, torch.Tensor) or val.device != source.meta["val"].device:
                    return gm
                plan.append((read, user, None, [], val.dtype))
                continue
            positions = _positions(user, read)
            op = _tensor_overload(user.target, positions)
            dtype = _compute_dtype(user, read)
            if op is None or dtype is None:
                return gm
            plan.append((read, user, op, positions, dtype))
    graph = fx.Graph()
    remap: dict[fx.Node, fx.Node] = {}
    out = graph.graph_copy(gm.graph, remap)
    graph.output(out)
    converted: dict[tuple[fx.Node, torch.dtype], fx.Node] = {}
    for read, user, op, positions, dtype in plan:
        new_user, source = remap[user], remap[read.args[0]]  # type: ignore[index]
        conv = converted.get((source, dtype))
        if conv is None:
            with graph.inserting_after(source):
                conv = graph.call_function(aten._to_copy.default, (source,), {"dtype": dtype})
            val = source.meta["val"]
            with val.fake_mode:
                conv.meta["val"] = val.to(dtype)
            converted[(source, dtype)] = conv
        if op is None:  # scalar_tensor(f0): the converted tensor itself
            new_user.replace_all_uses_with(conv)
            graph.erase_node(new_user)
            continue
        args, kwargs = list(new_user.args), dict(new_user.kwargs)
        for pos in positions:
            if isinstance(pos, int):
                args[pos] = conv
            else:
                kwargs[pos] = conv
        new_user.args, new_user.kwargs = tuple(args), kwargs
        new_user.target = op
    for read in reads:
        graph.erase_node(remap[read])
    new = fx.GraphModule(gm, graph)
    new.meta = dict(getattr(gm, "meta", {}))  # the frontend's debug folder, among others
    return new
