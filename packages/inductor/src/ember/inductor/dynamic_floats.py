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

import operator
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


#: Python arithmetic on a float (``s - 1.0``) that an op on float64 0-d tensors computes
#: exactly as Python does (one IEEE double operation). Division is left out: Python raises
#: on a zero divisor where a tensor gives inf.
_ARITH: dict[Any, Any] = {operator.add: aten.add.Tensor, operator.sub: aten.sub.Tensor,
                          operator.mul: aten.mul.Tensor}


def _float_values(gm: fx.GraphModule) -> list[fx.Node]:
    """The graph's float values in order: reads (``_local_scalar_dense``) and Python
    arithmetic of ``_ARITH``/``neg`` over them and numbers; [] where some other node makes a
    ``SymFloat`` (nothing is rewritten then: the graph runs eagerly anyway)."""
    values: list[fx.Node] = []
    known: set[fx.Node] = set()
    for n in gm.graph.nodes:
        if n.op != "call_function" or not isinstance(n.meta.get("val"), torch.SymFloat):
            continue
        ok = n.target is aten._local_scalar_dense.default or (
            n.target in _ARITH and len(n.args) == 2 and not n.kwargs
            and any(a in known for a in n.args)
            and all(a in known or type(a) in (int, float) for a in n.args)
        ) or (n.target is operator.neg and len(n.args) == 1 and n.args[0] in known)
        if not ok:
            return []
        values.append(n)
        known.add(n)
    return values


def floats_as_tensors(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` with each dynamic float operand read from its 0-d tensor (a new module), or
    ``gm`` itself when it has none or some use of one cannot be rewritten. Python
    arithmetic on a float (``s - 1.0``, ADR 0060) becomes the same operation on float64 0-d
    tensors, and ``full(size, s)`` an expanded copy of the converted tensor."""
    values = _float_values(gm)
    if not values:
        return gm
    in_values = set(values)
    device = None
    for v in values:
        if v.target is aten._local_scalar_dense.default:
            source = v.args[0]
            if not isinstance(source, fx.Node) or not isinstance(source.meta.get("val"), torch.Tensor):
                return gm
            if device is None:
                device = source.meta["val"].device
            elif source.meta["val"].device != device:
                return gm
    # (float value, its user, the user's new overload (None: a scalar_tensor replaced whole;
    # "full": a full replaced whole), the float's positions among the user's operands, the
    # dtype it is converted to)
    plan: list[tuple[fx.Node, fx.Node, Any, list[int | str], torch.dtype]] = []
    for read in values:
        for user in read.users:
            if user in in_values:
                continue
            if user.op != "call_function" or not isinstance(user.target, torch._ops.OpOverload):
                return gm
            val = user.meta.get("val")
            if user.target in (aten.scalar_tensor.default, aten.full.default):
                # the float as a tensor of its own: a copy (``full``: expanded to the size)
                full = user.target is aten.full.default
                if (not isinstance(val, torch.Tensor) or val.device != device
                        or _positions(user, read) != [1 if full else 0]):
                    return gm
                plan.append((read, user, "full" if full else None, [], val.dtype))
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
    fake = next(v.args[0].meta["val"] for v in values  # type: ignore[union-attr]
                if v.target is aten._local_scalar_dense.default).fake_mode
    # each float value as a 0-d tensor: a read is its source tensor (any floating dtype
    # holds the value exactly); arithmetic, a float64 tensor computed as Python does
    base: dict[fx.Node, fx.Node] = {}
    double: dict[fx.Node, fx.Node] = {}

    def emit(after: fx.Node, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> fx.Node:
        with graph.inserting_after(after):
            node = graph.call_function(op, args, kwargs)
        vals = [a.meta["val"] if isinstance(a, fx.Node) else a for a in args]
        with fake:
            node.meta["val"] = op(*vals, **kwargs)
        return node

    def as_double(v: fx.Node) -> fx.Node:
        hit = double.get(v)
        if hit is None:
            src = base[v]
            hit = src if src.meta["val"].dtype == torch.float64 else emit(
                src, aten._to_copy.default, (src,), {"dtype": torch.float64})
            double[v] = hit
        return hit

    for v in values:
        if v.target is aten._local_scalar_dense.default:
            base[v] = remap[v.args[0]]  # type: ignore[index]
            continue
        at = remap[v]
        operands = [as_double(a) if isinstance(a, fx.Node) else a for a in v.args]
        anchor = at.prev  # the new nodes go where the Python arithmetic was
        if v.target is operator.neg:
            made = emit(anchor, aten.neg.default, (operands[0],), {})
        elif isinstance(operands[0], fx.Node):
            made = emit(anchor, _ARITH[v.target], (operands[0], operands[1]), {})
        elif v.target is operator.sub:  # number - float
            made = emit(anchor, aten.rsub.Scalar, (operands[1], operands[0]), {})
        else:  # number + float, number * float: commutative in IEEE arithmetic
            made = emit(anchor, _ARITH[v.target], (operands[1], operands[0]), {})
        base[v] = made
    converted: dict[tuple[fx.Node, torch.dtype], fx.Node] = {}
    for read, user, op, positions, dtype in plan:
        new_user, source = remap[user], base[read]
        conv = converted.get((source, dtype))
        if conv is None:
            conv = source if source.meta["val"].dtype == dtype and op is not None else emit(
                source, aten._to_copy.default, (source,), {"dtype": dtype})
            converted[(source, dtype)] = conv
        if op is None:  # scalar_tensor(f0): the converted tensor itself
            new_user.replace_all_uses_with(conv)
            graph.erase_node(new_user)
            continue
        if op == "full":  # full(size, f0): the converted tensor expanded, copied
            size = new_user.args[0]
            with graph.inserting_before(new_user):
                expanded = graph.call_function(aten.expand.default, (conv, size))
                filled = graph.call_function(aten.clone.default, (expanded,),
                                             {"memory_format": torch.contiguous_format})
            with fake:
                expanded.meta["val"] = conv.meta["val"].expand(user.meta["val"].shape)
                filled.meta["val"] = expanded.meta["val"].clone(memory_format=torch.contiguous_format)
            new_user.replace_all_uses_with(filled)
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
    for v in reversed(values):
        graph.erase_node(remap[v])
    new = fx.GraphModule(gm, graph)
    new.meta = dict(getattr(gm, "meta", {}))  # the frontend's debug folder, among others
    return new
