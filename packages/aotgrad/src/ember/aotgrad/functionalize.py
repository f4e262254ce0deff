"""Functionalization: turn a literal ATen trace into a graph without mutation.

A literal trace (from :mod:`ember.aotgrad.trace`) may contain in-place ops
(``add_``), ``copy_`` into buffers (BatchNorm's running statistics) and
mutations through views (``x[0].mul_(2)``). This pass rewrites it into a pure
dataflow graph that a partitioner and a compiler can reorder freely:

- every storage has a *base* node (an input, a constant or an op's fresh
  output) and every view of it remembers its *view chain*, the view ops that
  produce it from the base;
- a mutation computes the new value with the functional op (``add`` for
  ``add_``), then rebuilds the new base with the inverse "scatter" of each
  view step (``select_scatter`` for ``select``, ``view`` back to the input's
  shape for ``view``, ...), and bumps the storage's version;
- a later read of any alias of a mutated storage replays its view chain on
  the current base.

Mutated graph inputs are reported, so the runtime can copy their final values
back into the caller's tensors after the compiled forward has run.
"""

from __future__ import annotations

import contextlib
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten, tree_map

from ember.aotgrad.errors import FunctionalizationError, VerifyError
from ember.aotgrad.sizes import call_node
from ember.ir.shapes import DataDependentError, has_symbols, symbolic_dispatch

aten = torch.ops.aten

_METADATA_MUTATIONS = {"resize_", "resize_as_", "set_", "as_strided_", "swapdims_",
                       "swapaxes_"}
_IDENTITY_VIEWS = {aten.detach.default, aten.alias.default, aten.lift_fresh.default}
# Writes that give every element of their target one value: the only writes to a tensor
# whose elements share memory that a functional graph reproduces (all aliases agree).
_WHOLE_WRITES = {aten.fill_.Scalar, aten.fill_.Tensor, aten.zero_.default}


@dataclass(frozen=True, slots=True)
class ViewStep:
    """One view op applied to the previous value: ``op(prev, *args, **kwargs)[index]``."""

    op: Any
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    index: int | None = None
    #: the view was made under ``no_grad`` (replayed so: eager's view of it has no history)
    no_grad: bool = False
    #: ``as_strided`` only: the traced value it was applied to (its sizes and strides address
    #: that value's storage, so a replay on another value must have the same layout)
    traced: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class FunctionalGraph:
    """The functionalized graph and what it found about the inputs.

    ``mutated_inputs`` are placeholder positions whose storage the original
    trace wrote to; the functional graph does not write them, the caller must.
    """

    gm: fx.GraphModule
    mutated_inputs: tuple[int, ...]


def written_args(op: Any) -> list[int]:
    """Positions of the arguments ``op`` writes to (from its schema)."""
    if not isinstance(op, torch._ops.OpOverload):
        return []
    return [i for i, a in enumerate(op._schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write]


def find_mutated_inputs(graph: fx.Graph, *, with_grad: bool = False) -> list[int]:
    """Placeholder positions whose storage some op in ``graph`` writes to (with
    ``with_grad``: some op that ran with grad mode on, so the write has autograd history)."""
    storages: dict[int, int] = {}
    for i, node in enumerate(n for n in graph.nodes if n.op == "placeholder"):
        storages.setdefault(node.meta["storage"], i)
    found: set[int] = set()
    for node in graph.nodes:
        if node.op != "call_function" or (with_grad and not node.meta.get("grad_enabled", True)):
            continue
        for pos in written_args(node.target):
            arg = _arg_at(node, pos)
            for a in arg if isinstance(arg, (list, tuple)) else (arg,):  # _foreach_add_([...])
                if isinstance(a, fx.Node) and a.meta.get("storage") in storages:
                    found.add(storages[a.meta["storage"]])
    return sorted(found)


def _arg_at(node: fx.Node, pos: int) -> Any:
    if pos < len(node.args):
        return node.args[pos]
    target: Any = node.target
    name = target._schema.arguments[pos].name
    return node.kwargs.get(name)


def functional_variant(op: Any) -> Any:
    """The out-of-place overload for in-place ``op`` (``aten.add_.Tensor`` -> ``aten.add.Tensor``)."""
    name = op.overloadpacket.__name__
    packet = getattr(aten, name[:-1], None) if name.endswith("_") else None
    if packet is None:
        return None
    overload = getattr(packet, op._overloadname, None)
    if overload is not None:
        return overload
    want = [a.name for a in op._schema.arguments]
    for candidate in packet.overloads():
        cand = getattr(packet, candidate)
        if [a.name for a in cand._schema.arguments] == want:
            return cand
    return None


def _overlaps(val: torch.Tensor) -> bool:
    """Whether ``val``'s elements share memory (``MemOverlap::Yes``); a layout over sizes
    that depend on data, which torch cannot decide, counts as overlapping (writes to it
    are then refused, never compiled wrong)."""
    try:
        return bool(torch._debug_has_internal_overlap(val) == 1)
    except DataDependentError:
        return True


def _known_contiguous(val: torch.Tensor) -> bool:
    """``val.is_contiguous()`` where torch can decide it; a layout over sizes that depend on
    data counts as not contiguous (the caller then copies, which is right either way)."""
    try:
        return bool(val.is_contiguous())
    except DataDependentError:
        return False


class _Functionalizer:
    def __init__(self, gm: fx.GraphModule, fake_mode: Any) -> None:
        self.old = gm
        self.fake_mode = fake_mode
        self.graph = fx.Graph()
        self.env: dict[fx.Node, fx.Node] = {}
        self.seen_version: dict[fx.Node, int] = {}
        self.version: dict[int, int] = {}
        self.cur_base: dict[int, fx.Node] = {}
        self.chain: dict[fx.Node, tuple[ViewStep, ...] | None] = {}
        self.input_storage: dict[int, int] = {}
        self.mutated: set[int] = set()
        self.multi_view_src: dict[fx.Node, fx.Node] = {}
        #: storages whose base's elements share memory (an ``expand``ed input)
        self.overlapping: set[int] = set()
        #: storage -> (size, stride, offset) of the tensor that made it (its first node,
        #: when made: an ``as_strided_`` later changes the traced value's own metadata), by
        #: which an ``as_strided`` of any alias of it addresses elements
        self.base_layout: dict[int, Any] = {}
        #: the checkpoint region of the node being rewritten: the nodes emitted for it keep it
        self.region: int | None = None

    # -- emitting ------------------------------------------------------------

    def emit(self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None,
             like: object = None) -> fx.Node:
        """A node of ``op``; ``like``: the traced value it replaces, whose data-dependent
        (unbacked) sizes its value keeps (the rest of the trace refers to them)."""
        kwargs = kwargs or {}
        node = call_node(self.graph, op, args, kwargs)
        if self.region is not None:
            node.meta["recompute"] = self.region
        vals = tree_map(lambda a: a.meta["val"] if isinstance(a, fx.Node) else a, (args, kwargs))
        rerun = getattr(self.fake_mode, "rerun_like", None)
        sizes = rerun(like) if rerun is not None else contextlib.nullcontext()
        with self.fake_mode, torch.no_grad(), sizes, symbolic_dispatch(has_symbols(vals)):
            node.meta["val"] = op(*vals[0], **vals[1])
        return node

    # -- reading current values ------------------------------------------------

    def storage(self, node: fx.Node) -> int:
        return int(node.meta["storage"])

    def cur(self, node: fx.Node) -> fx.Node:
        s = self.storage(node)
        if self.seen_version[node] == self.version[s]:
            return self.env[node]
        steps = self.chain[node]
        if steps is None:
            raise FunctionalizationError(
                f"node '{node.name}' ({node.target}) aliases a storage that was mutated "
                "later, but it was not produced by a view op, so its value cannot be "
                "recomputed; clone it before the mutation"
            )
        value = self.replay(self.cur_base[s], steps)
        self.env[node] = value
        self.seen_version[node] = self.version[s]
        return value

    def replay(self, value: fx.Node, steps: tuple[ViewStep, ...]) -> fx.Node:
        for step in steps:
            if step.traced is not None:
                self.check_as_strided(step.traced, value, step.args, dict(step.kwargs), value)
            value = self.emit(step.op, (value, *step.args), dict(step.kwargs))
            if step.index is not None:
                value = self.emit(operator.getitem, (value, step.index))
        return value

    def args(self, node: fx.Node) -> tuple[tuple[Any, ...], dict[str, Any]]:
        def one(a: Any) -> Any:
            return self.cur(a) if isinstance(a, fx.Node) else a
        return tree_map(one, tuple(node.args)), tree_map(one, dict(node.kwargs))

    # -- binding results -------------------------------------------------------

    def new_base(self, old: fx.Node, new: fx.Node) -> None:
        s = self.storage(old)
        self.env[old] = new
        if s in self.version:  # an op output aliasing an existing storage
            self.chain[old] = None
            self.seen_version[old] = self.version[s]
            return
        self.version[s] = 0
        self.cur_base[s] = new
        self.chain[old] = ()
        self.seen_version[old] = 0
        val = old.meta.get("val")
        if isinstance(val, torch.Tensor):
            self.base_layout[s] = old.meta.get("layout") or _layout3(val)
        if isinstance(val, torch.Tensor) and _overlaps(val):
            self.overlapping.add(s)

    def bind_view(self, old: fx.Node, new: fx.Node, src: fx.Node, step: ViewStep) -> None:
        s = self.storage(old)
        if s != self.storage(src):
            self.new_base(old, new)
            return
        base_chain = self.chain[src]
        self.chain[old] = None if base_chain is None else (*base_chain, step)
        self.env[old] = new
        self.seen_version[old] = self.version[s]

    def write(self, target: fx.Node, value: fx.Node, where: fx.Node) -> None:
        """Make ``value`` the new content of ``target`` (a base or a view)."""
        s = self.storage(target)
        steps = self.chain[target]
        if steps is None:
            raise FunctionalizationError(
                f"node '{where.name}' ({where.target}) writes to '{target.name}', which "
                "aliases another tensor without being a view of it; clone it first"
            )
        if s in self.overlapping and (steps or where.target not in _WHOLE_WRITES):
            raise FunctionalizationError(
                f"node '{where.name}' ({where.target}) writes to '{target.name}', whose "
                "elements share memory (an expanded tensor): a write to one element changes "
                "its aliases, which a functional graph cannot express. The graph runs eagerly"
            )
        inputs = [self.cur_base[s]]
        for step in steps[:-1]:
            inputs.append(self.replay(inputs[-1], (step,)))
        new = value
        for step, before in zip(reversed(steps), reversed(inputs)):
            new = self.inverse(step, before, new, where)
        self.cur_base[s] = new
        self.version[s] += 1
        self.bind_written(target, target, value)
        if s in self.input_storage:
            self.mutated.add(self.input_storage[s])

    def bind_written(self, node: fx.Node, target: fx.Node, value: fx.Node) -> None:
        """``node`` (the target, or the in-place op returning it) now holds ``value``.

        A view target is read back through its view chain on the new base when next
        used, so it keeps eager's strides (``v = x[:, :1]; v.add_(1); return v``); a
        base target is the new value itself.
        """
        s = self.storage(target)
        self.chain[node] = self.chain[target]
        self.env[node] = value
        self.seen_version[node] = -1 if self.chain[target] else self.version[s]

    def inverse(self, step: ViewStep, before: fx.Node, new: fx.Node, where: fx.Node) -> fx.Node:
        """The value of ``before`` after its view ``step`` was overwritten by ``new``."""
        name = step.op.overloadpacket.__name__
        args = step.args
        kw = dict(step.kwargs)
        if step.index is not None:
            return self.inverse_item(step, before, new, where)
        if name == "select":
            return self.emit(aten.select_scatter.default, (before, new, *args), kw)
        if name == "slice":
            return self.emit(aten.slice_scatter.default, (before, new, *args), kw)
        if name == "diagonal":
            return self.emit(aten.diagonal_scatter.default, (before, new, *args), kw)
        if name in ("alias", "detach", "lift_fresh"):
            return new
        if name == "t":
            return self.emit(aten.t.default, (new,))
        if name == "transpose":
            return self.emit(aten.transpose.int, (new, *args), kw)
        if name == "permute":
            dims = list(args[0] if args else kw["dims"])
            ndim = len(dims)
            inv = [0] * ndim
            for i, d in enumerate(dims):
                inv[d % ndim] = i
            return self.emit(aten.permute.default, (new, inv))
        if name in ("view", "_unsafe_view", "reshape", "squeeze", "unsqueeze",
                    "flatten", "unflatten", "view_as"):
            shape = list(before.meta["val"].shape)
            if not _known_contiguous(new.meta["val"]):
                new = self.emit(aten.clone.default, (new,),
                                {"memory_format": torch.contiguous_format})
            return self.emit(aten.view.default, (new, shape))
        if name == "as_strided":
            val = before.meta["val"]
            if step.traced is not None:
                self.check_as_strided(step.traced, before, args, kw, where)
            if val.is_contiguous() and val.storage_offset() == 0:
                return self.emit(aten.as_strided_scatter.default, (before, new, *args), kw)
        raise FunctionalizationError(
            f"node '{where.name}' ({where.target}) writes through a view made by "
            f"{step.op}, which ember.aotgrad cannot invert; mutate the base tensor "
            "directly, or clone the view before writing to it"
        )

    def inverse_item(self, step: ViewStep, before: fx.Node, new: fx.Node, where: fx.Node) -> fx.Node:
        name = step.op.overloadpacket.__name__
        assert step.index is not None
        val = before.meta["val"]
        kw = dict(step.kwargs)
        if name == "unbind":
            dim = step.args[0] if step.args else kw.get("dim", 0)
            return self.emit(aten.select_scatter.default, (before, new, dim, step.index))
        if name in ("split", "split_with_sizes"):
            dim = step.args[1] if len(step.args) > 1 else kw.get("dim", 0)
            size = val.shape[dim]
            if name == "split":
                chunk = step.args[0]
                sizes = [min(chunk, size - i) for i in range(0, size, chunk)]
            else:
                sizes = list(step.args[0])
            start = sum(sizes[: step.index])
            end = start + sizes[step.index]
            return self.emit(aten.slice_scatter.default, (before, new, dim, start, end))
        raise FunctionalizationError(
            f"node '{where.name}' ({where.target}) writes through an output of "
            f"{step.op}, which ember.aotgrad cannot invert; clone it before writing"
        )

    # -- the pass ----------------------------------------------------------------

    def run(self) -> FunctionalGraph:
        position = 0
        for node in self.old.graph.nodes:
            self.region = node.meta.get("recompute")
            if node.op == "placeholder":
                new = self.graph.placeholder(node.name)
                new.meta.update(node.meta)
                s = self.storage(node)
                if s in self.input_storage:
                    self.chain[node] = None
                    self.env[node] = new
                    self.seen_version[node] = self.version[s]
                else:
                    self.input_storage[s] = position
                    self.new_base(node, new)
                position += 1
            elif node.op == "get_attr":
                new = self.graph.get_attr(node.target)
                new.meta.update(node.meta)
                self.new_base(node, new)
            elif node.op == "call_function":
                self.call(node)
            elif node.op == "output":
                out = tree_map(lambda a: self.cur(a) if isinstance(a, fx.Node) else a,
                               node.args[0])
                self.graph.output(out)
            else:
                raise FunctionalizationError(
                    f"node '{node.name}': unexpected op kind '{node.op}' in an ATen trace"
                )
        eliminate_dead_code(self.graph)
        gm = fx.GraphModule(self.old, self.graph)
        verify_functional(gm)
        return FunctionalGraph(gm, tuple(sorted(self.mutated)))

    def call(self, node: fx.Node) -> None:
        op: Any = node.target
        if op is operator.getitem:
            parent, index = node.args
            assert isinstance(parent, fx.Node) and isinstance(index, int)
            new = self.emit(operator.getitem, (self.env[parent], index))
            multi_src = self.multi_view_src.get(parent)
            if multi_src is None:
                self.new_base(node, new)
            else:
                rest = tuple(parent.args[1:])
                item = ViewStep(parent.target, rest, tuple(parent.kwargs.items()), index)
                self.bind_view(node, new, multi_src, item)
            return
        writes = written_args(op)
        if writes:
            self.mutation(node, writes)
            return
        args, kwargs = self.args(node)
        first = node.args[0] if node.args else None
        if op in _IDENTITY_VIEWS and isinstance(first, fx.Node):
            # without mutation a detach/alias is the value itself
            self.bind_view(node, args[0], first, ViewStep(op, (), ()))
            return
        as_strided = op is aten.as_strided.default and isinstance(first, fx.Node)
        if as_strided and isinstance(first, fx.Node) and self.as_strided_of_base(node, first):
            return
        if (as_strided and isinstance(first, fx.Node)
                and self.version.get(self.storage(first), 0) > 0):
            # the source's storage was written: its value now is a functional result
            self.check_as_strided(first.meta["val"], args[0], node.args[1:], dict(node.kwargs),
                                  node)
        new = self.emit(op, args, kwargs, like=node.meta.get("val"))
        step = _fresh_alias_step(op, node, first)
        if step is not None and isinstance(first, fx.Node) and self.chain.get(first) is not None:
            # an op whose result shares its input's memory without its schema saying so
            # (``_unsafe_view`` of matmul's ``mm`` result): a view of it, so writes to the
            # result are writes to that memory, which later reads of either see
            self.bind_view(node, new, first, step)
            return
        if isinstance(op, torch._ops.OpOverload) and op.is_view and isinstance(first, fx.Node):
            src = first
            if isinstance(node.meta.get("val"), (tuple, list)):
                self.env[node] = new
                self.multi_view_src[node] = src
                return
            step = ViewStep(op, tuple(node.args[1:]), tuple(node.kwargs.items()),
                            traced=first.meta["val"] if as_strided else None)
            self.bind_view(node, new, src, step)
            return
        if isinstance(node.meta.get("val"), torch.Tensor):
            self.new_base(node, new)
        else:
            self.env[node] = new

    def mutation(self, node: fx.Node, writes: list[int]) -> None:
        op: Any = node.target
        name = op.overloadpacket.__name__
        if name in _METADATA_MUTATIONS or torch.Tag.inplace_view in op.tags:
            if self.metadata_mutation(node):
                return
            raise FunctionalizationError(
                f"node '{node.name}' ({op}) changes the shape or strides of a tensor in "
                "place; metadata mutations are not supported. Use the out-of-place op "
                "(e.g. x = x.t() instead of x.t_())"
            )
        out_args = [a.name for a in op._schema.arguments if a.is_out]
        if len(out_args) == 1 and len(writes) == 1:
            self.out_variant(node, out_args[0])
            return
        target = node.args[0]
        if writes == [0] and isinstance(target, (list, tuple)) and all(
                isinstance(t, fx.Node) for t in target):
            self.foreach_mutation(node, [t for t in target if isinstance(t, fx.Node)])
            return
        if writes != [0] or not isinstance(target, fx.Node):
            raise FunctionalizationError(
                f"node '{node.name}' ({op}) writes to arguments {writes}; only in-place "
                "ops that write their first argument can be functionalized. Use the "
                "functional form of the op (without out=)"
            )
        self.check_no_partial_overlap(node, target)
        args, kwargs = self.args(node)
        target_val = target.meta["val"]
        if name == "copy_":
            value = args[1]
            src_val = value.meta["val"]
            if src_val.dtype != target_val.dtype or src_val.device != target_val.device:
                value = self.emit(aten._to_copy.default, (value,),
                                  {"dtype": target_val.dtype, "device": target_val.device})
            if tuple(value.meta["val"].shape) != tuple(target_val.shape):
                # values never change in a functional graph, so sharing is safe
                value = self.emit(aten.expand.default, (value, list(target_val.shape)))
        else:
            functional = functional_variant(op)
            if functional is None:
                raise FunctionalizationError(
                    f"node '{node.name}' ({op}) is an in-place op with no functional "
                    "variant that ember.aotgrad knows; use its out-of-place form"
                )
            kwargs = _with_defaults(op, functional, args, kwargs)
            if torch.Tag.nondeterministic_seeded in op.tags and not target_val.is_contiguous():
                value = self.random_in_memory_order(functional, args, kwargs, target_val)
            else:
                value = self.emit(functional, args, kwargs)
            if value.meta["val"].dtype != target_val.dtype:
                value = self.emit(aten._to_copy.default, (value,), {"dtype": target_val.dtype})
        self.write(target, value, node)
        self.bind_written(node, target, value)

    def as_strided_of_base(self, node: fx.Node, src: fx.Node, *, of_base: bool = False) -> bool:
        """``as_strided(src, size, stride[, offset])`` bound as the same ``as_strided`` of
        ``src``'s storage base, when ``src`` is a view of it (a view chain, not the base;
        ``of_base``: the base too) and the base's layout allows it (True: done).

        ``as_strided`` addresses its argument's *storage* (from its storage offset unless
        one is given), so it means the same on any alias of that storage: taken of the
        base, its replay after writes (and the inverse of a write through it,
        ``as_strided_scatter``) needs only the base's layout to match eager's, dense from
        offset 0 (checked on every replay), not the view's (Longformer's ``_chunk``: an
        ``as_strided`` of a transposed, reshaped projection scaled in place before)."""
        s = self.storage(src)
        steps = self.chain.get(src)
        base_layout = self.base_layout.get(s)
        if steps is None or (not steps and not of_base) or base_layout is None:
            return False
        if s in self.overlapping:
            return False
        args = list(node.args[1:])
        kwargs = dict(node.kwargs)
        offset = args[2] if len(args) > 2 else kwargs.get("storage_offset")
        if offset is None:
            offset = tuple(src.meta.get("layout") or _layout3(src.meta["val"]))[2]
            if len(args) >= 2:
                args = [*args[:2], offset]
            else:
                kwargs["storage_offset"] = offset
        if not _as_strided_replayable(base_layout, self.cur_base[s].meta["val"], tuple(args),
                                      kwargs):
            return False
        step = ViewStep(aten.as_strided.default, tuple(args), tuple(kwargs.items()),
                        traced=base_layout)
        new = self.emit(aten.as_strided.default, (self.cur_base[s], *args), kwargs,
                        like=node.meta.get("val"))
        self.env[node] = new
        self.chain[node] = (step,)
        self.seen_version[node] = self.version[s]
        return True

    def metadata_mutation(self, node: fx.Node) -> bool:
        """``x.as_strided_(size, stride[, offset])``: from here on the tensor is that
        ``as_strided`` of its storage (the trace binds the tensor to this node, so every
        later read names it); True when done. ATen's ``adaptive_avg_pool2d`` to one pixel
        of a channels-last input restrides its ``mean`` result this way, to keep the
        memory format. Other metadata mutations (``t_``, ``resize_``, ``set_``) and an
        ``as_strided_`` whose storage is not laid out as eager's are refused."""
        target = node.args[0] if node.args else None
        if node.target is not aten.as_strided_.default or not isinstance(target, fx.Node):
            return False
        if self.storage(target) in self.input_storage:
            return False  # the caller's tensor would keep its old metadata
        return self.as_strided_of_base(node, target, of_base=True)

    def check_as_strided(self, traced: Any, value: fx.Node, args: Any, kwargs: dict[str, Any],
                         where: fx.Node) -> None:
        """Refuse ``as_strided(value, *args)`` where ``value`` (a functional result standing
        for a tensor eager wrote in place) may not address the elements eager's ``traced``
        tensor did: ``as_strided`` indexes its argument's storage, and eager's storage is the
        written tensor's own (a strided input, ``x[::2]``, keeps its gaps after
        ``_foreach_sub_``) while the functional value is a new tensor laid out otherwise (fuzz
        seed 723: ``x.unfold(0, 3, 1)`` of a written ``x[::2]`` read out of bounds). Both must
        be dense from offset 0, alike, and the view must stay within their elements."""
        val = value.meta["val"]
        if not _as_strided_replayable(traced, val, args, kwargs):
            raise FunctionalizationError(
                f"node '{where.name}' ({where.target}): as_strided of a tensor written in place "
                f"before, whose storage eager addresses otherwise (traced {tuple(traced.shape)} "
                f"with strides {tuple(traced.stride())}, offset {traced.storage_offset()}); the "
                "graph runs eagerly"
            )

    def check_no_partial_overlap(self, node: fx.Node, target: fx.Node) -> None:
        """Refuse an in-place op that reads memory of its target at other positions
        (``v.as_strided((2,), (2,), 1).copy_(v)``): eager's kernel reads elements it already
        wrote, in its own order, while the functional graph reads the old values (fuzz seed
        4726). Reading the target itself, element for element (``x.add_(x)``), is fine."""
        tval = target.meta["val"]
        for a in tree_flatten((node.args[1:], node.kwargs))[0]:
            if not isinstance(a, fx.Node) or a.meta.get("storage") != target.meta.get("storage"):
                continue
            aval = a.meta.get("val")
            if not isinstance(aval, torch.Tensor) or _same_elements(aval, tval):
                continue
            mine, theirs = _positions(aval), _positions(tval)
            if mine is None or theirs is None or mine & theirs:
                raise FunctionalizationError(
                    f"node '{node.name}' ({node.target}) reads '{a.name}', which shares "
                    f"memory with the tensor it writes ('{target.name}') at other positions: "
                    "eager's result depends on the order its kernel writes in. The graph "
                    "runs eagerly"
                )

    def foreach_mutation(self, node: fx.Node, targets: list[fx.Node]) -> None:
        """``_foreach_add_([a, b], ...)`` -> ``_foreach_add([a, b], ...)``, each result
        written to its target (what an optimizer step does to the parameters).

        Eager updates the tensors one after another, so when a target shares memory
        with another list's entry or another target (``_foreach_add_([a, b], [b, a])``)
        a later update reads an earlier one's result: then each index is its own
        one-element foreach op, on the values as written so far."""
        op: Any = node.target
        functional = functional_variant(op)
        if functional is None:
            raise FunctionalizationError(
                f"node '{node.name}' ({op}) is an in-place op with no functional variant "
                "that ember.aotgrad knows; use its out-of-place form"
            )
        steps = [None] if not self._foreach_aliases(node, targets) else list(range(len(targets)))
        for step in steps:
            args, kwargs = self.args(node)
            if step is not None:
                args = tuple(_item_of_lists(a, step, len(targets)) for a in args)
                kwargs = {k: _item_of_lists(v, step, len(targets)) for k, v in kwargs.items()}
            values = self.emit(functional, args, _with_defaults(op, functional, args, kwargs))
            for k, target in enumerate(targets if step is None else [targets[step]]):
                value = self.emit(operator.getitem, (values, k))
                want = target.meta["val"].dtype
                if value.meta["val"].dtype != want:
                    value = self.emit(aten._to_copy.default, (value,), {"dtype": want})
                self.write(target, value, node)
        self.env[node] = values
        self.chain[node] = None

    def _foreach_aliases(self, node: fx.Node, targets: list[fx.Node]) -> bool:
        """Whether a target of a foreach op shares memory with another target or with an
        entry of another list at another index."""
        written = [self.storage(t) for t in targets]
        if len(set(written)) < len(written):
            return True
        for arg in [*node.args[1:], *node.kwargs.values()]:
            items = arg if isinstance(arg, (list, tuple)) else [arg]
            for k, a in enumerate(items):
                if not isinstance(a, fx.Node) or not isinstance(a.meta.get("val"), torch.Tensor):
                    continue
                s = self.storage(a)
                if s in written and (len(items) != len(targets) or written.index(s) != k):
                    return True
        return False

    def out_variant(self, node: fx.Node, out_name: str) -> None:
        """``op(..., out=t)`` -> ``t`` gets the value of the functional ``op(...)``."""
        op: Any = node.target
        target = node.kwargs.get(out_name)
        functional = _functional_of_out(op)
        if functional is None or not isinstance(target, fx.Node):
            raise FunctionalizationError(
                f"node '{node.name}' ({op}) writes its result into out=, and ember.aotgrad "
                "found no functional overload of it; call the op without out="
            )
        args, kwargs = self.args(node)
        kwargs.pop(out_name)
        value = self.emit(functional, args, kwargs)
        want = target.meta["val"]
        before = tuple(target.meta["layout"][0])  # the shape before the op ran
        if tuple(value.meta["val"].shape) != before:
            raise FunctionalizationError(
                f"node '{node.name}' ({op}) resizes its out= tensor from "
                f"{before} to {tuple(value.meta['val'].shape)}; resizing is a "
                "metadata mutation, which is not supported. Call the op without out="
            )
        if value.meta["val"].dtype != want.dtype:
            value = self.emit(aten._to_copy.default, (value,), {"dtype": want.dtype})
        self.write(target, value, node)
        self.bind_written(node, target, value)

    def random_in_memory_order(self, functional: Any, args: tuple[Any, ...],
                               kwargs: dict[str, Any], target: torch.Tensor) -> fx.Node:
        """Run a random op so it draws numbers in the target's memory order, as eager's
        in-place op does (the functional op would fill a contiguous result instead)."""
        ndim = target.dim()
        strides = [int(st) for st in target.stride()]
        perm = sorted(range(ndim), key=lambda d: (-strides[d], -d))
        inv = [perm.index(d) for d in range(ndim)]
        shape = tuple(target.shape)

        def to_memory_order(a: Any) -> Any:
            if isinstance(a, fx.Node) and tuple(a.meta["val"].shape) == shape:
                return self.emit(aten.permute.default, (a, perm))
            return a

        permuted = tuple(to_memory_order(a) for a in args)
        value = self.emit(functional, permuted, kwargs)
        return self.emit(aten.permute.default, (value, inv))


#: ops returning a tensor that may share their input's memory while their schema does not
#: say so (no alias annotation): ``matmul`` of a 3-d by a 2-d tensor returns its ``mm``
#: result through ``_unsafe_view``
_FRESH_ALIAS_OPS = frozenset({aten._unsafe_view.default})


def _fresh_alias_step(op: Any, node: fx.Node, src: Any) -> ViewStep | None:
    """The view step equal to ``node`` (a fresh-but-aliased op's result) read from ``src``:
    a ``view`` to its shape, when it shares ``src``'s storage and both are contiguous from
    the same offset (a reshape of the same elements); else None."""
    if op not in _FRESH_ALIAS_OPS or not isinstance(src, fx.Node):
        return None
    val, src_val = node.meta.get("val"), src.meta.get("val")
    if not (isinstance(val, torch.Tensor) and isinstance(src_val, torch.Tensor)):
        return None
    if node.meta.get("storage") != src.meta.get("storage"):
        return None
    try:
        same = (val.is_contiguous() and src_val.is_contiguous()
                and val.storage_offset() == src_val.storage_offset()
                and val.numel() == src_val.numel())
    except Exception:  # sizes that cannot be decided here: not a view
        return None
    if not same:
        return None
    return ViewStep(aten.view.default, (list(val.shape),), ())


#: above this many elements, two views of one storage are taken to overlap
_MAX_POSITIONS = 1 << 16


def _layout3(t: torch.Tensor) -> tuple[tuple[Any, ...], tuple[Any, ...], Any]:
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


def _is_contiguous(size: Any, stride: Any) -> bool:
    expected = 1
    for n, st in reversed(list(zip(size, stride))):
        if int(n) != 1 and int(st) != expected:
            return False
        expected *= int(n)
    return True


def _as_strided_replayable(traced: Any, val: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """Whether ``as_strided(val, *args)`` reads the elements ``as_strided(traced, *args)``
    does: both dense and laid out alike from storage offset 0, the view within them.
    ``traced``: the traced tensor, or its (size, stride, storage offset)."""
    try:
        if not isinstance(val, torch.Tensor):
            return False
        if isinstance(traced, torch.Tensor):
            traced = _layout3(traced)
        if not isinstance(traced, tuple) or len(traced) != 3:
            return False
        t_size, t_stride, t_offset = traced
        numel = 1
        for n in t_size:
            numel *= int(n)
        if (tuple(int(n) for n in t_size) != tuple(val.shape)
                or not _is_contiguous(t_size, t_stride) or not val.is_contiguous()
                or int(t_offset) != 0 or val.storage_offset() != 0):
            return False
        size = list(args[0] if args else kwargs["size"])
        stride = list(args[1] if len(args) > 1 else kwargs["stride"])
        offset = args[2] if len(args) > 2 else kwargs.get("storage_offset")
        offset = 0 if offset is None else offset
        if any(int(n) == 0 for n in size):
            return True
        last = int(offset) + sum((int(n) - 1) * int(st) for n, st in zip(size, stride))
        return int(offset) >= 0 and all(int(st) >= 0 for st in stride) and last < numel
    except Exception:  # symbolic sizes that cannot be decided here: refuse
        return False


def _layout(t: torch.Tensor) -> tuple[Any, ...]:
    return tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype.itemsize


def _same_elements(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` reads, element for element, the memory ``b`` has (broadcast ``a``
    against ``b``: a reading of size-1 dims is the same element every time)."""
    return _layout(a) == _layout(b)


def _positions(t: torch.Tensor) -> set[int] | None:
    """The storage positions (in elements) ``t`` covers; for a large tensor the range
    covering them; None when unknown (symbolic sizes, a huge range): taken to overlap."""
    if not all(type(n) is int for n in (*t.shape, *t.stride(), t.storage_offset())):
        return None  # symbolic: reading its value would specialize it
    sizes = [int(n) for n in t.shape]
    strides = [int(n) for n in t.stride()]
    offset = int(t.storage_offset())
    if any(n == 0 for n in sizes):
        return set()
    numel = 1
    for n in sizes:
        numel *= n
    if numel > _MAX_POSITIONS:
        hi = offset + sum((n - 1) * abs(st) for n, st in zip(sizes, strides))
        return set(range(offset, hi + 1)) if hi - offset < _MAX_POSITIONS else None
    out = {offset}
    for n, st in zip(sizes, strides):
        out = {p + k * st for p in out for k in range(n)}
    return out


def _item_of_lists(arg: Any, k: int, n: int) -> Any:
    """The ``k``-th entry of a foreach op's list argument, as a one-element list."""
    if isinstance(arg, (list, tuple)) and len(arg) == n:
        return [arg[k]]
    return arg


def _functional_of_out(op: Any) -> Any:
    """The overload of ``op``'s packet taking the same arguments minus ``out``."""
    want = [a.name for a in op._schema.arguments if not a.is_out]
    packet = op.overloadpacket
    for name in packet.overloads():
        cand = getattr(packet, name)
        args = cand._schema.arguments
        if not any(a.is_out for a in args) and [a.name for a in args] == want:
            return cand
    return None


def _with_defaults(op: Any, functional: Any, args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` plus the in-place op's defaults that the functional op lacks
    (``bernoulli_.float`` defaults ``p=0.5``, ``bernoulli.p`` requires it)."""
    wanted = {a.name for a in functional._schema.arguments}
    out = dict(kwargs)
    for i, a in enumerate(op._schema.arguments):
        if i < len(args) or a.name in out or a.name not in wanted:
            continue
        if a.has_default_value():
            out[a.name] = a.default_value
    return out


def verify_functional(gm: fx.GraphModule) -> None:
    """Check that no op in ``gm`` writes to a tensor and every value has fake metadata."""
    for node in gm.graph.nodes:
        if node.op == "output":
            continue
        problem = None
        if node.op == "call_function" and written_args(node.target):
            problem = "writes to its arguments after functionalization"
        elif "val" not in node.meta:
            problem = "has no meta['val']"
        if problem is not None:
            prev, nxt = node.prev, node.next
            raise VerifyError(
                f"node '{node.name}' {problem}:\n    {prev.format_node()}\n"
                f"  > {node.format_node()}\n    {nxt.format_node()}"
            )


#: ops whose only effect is to raise: their result is never used, and they stay
#: (``torch._assert`` on a tensor is traced as ``_assert_async``)
ASSERT_OPS = frozenset(
    op
    for name, overload in (("_assert_async", "default"), ("_assert_async", "msg"),
                           ("_assert_scalar", "default"))
    if (op := getattr(getattr(torch.ops.aten, name, None), overload, None)) is not None
)  # fmt: skip


def eliminate_dead_code(graph: fx.Graph) -> None:
    """Remove unused nodes, keeping placeholders, asserts and random ops (they advance the RNG), and
    the op making an unbacked size (``u0``, ADR 0046) that a kept node reads as a number
    (``x[m].shape[0] * y``: the graph reads ``u0`` from that op's result)."""
    readers = _unbacked_readers(graph)
    for node in reversed(list(graph.nodes)):
        if node.op in ("placeholder", "output") or node.users:
            continue
        if isinstance(node.target, torch._ops.OpOverload) and (
            torch.Tag.nondeterministic_seeded in node.target.tags or node.target in ASSERT_OPS
        ):
            continue
        if readers and any(not r._erased for sym in _made_symbols(node)
                           for r in readers.get(sym, ())):
            continue
        graph.erase_node(node)


def _made_symbols(node: fx.Node) -> list[Any]:
    """The bare symbols among the sizes of ``node``'s tensor value, or its value itself
    (``.item()``'s unbacked value, ADR 0060)."""
    val = node.meta.get("val")
    found = []
    for t in tree_flatten(val)[0]:
        for size in t.shape if isinstance(t, torch.Tensor) else (t,):
            expr = getattr(getattr(size, "node", None), "expr", None)
            if expr is not None and getattr(expr, "is_Symbol", False):
                found.append(expr)
    return found


def _unbacked_readers(graph: fx.Graph) -> dict[Any, list[fx.Node]]:
    """Unbacked symbol -> the nodes whose arguments hold a number made from it."""
    readers: dict[Any, list[fx.Node]] = {}
    for node in graph.nodes:
        for a in tree_flatten((node.args, node.kwargs))[0]:
            sym = getattr(a, "node", None)
            env = getattr(sym, "env", None)
            if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)) and env is not None:
                for s in sym.expr.free_symbols:  # type: ignore[union-attr]
                    if s in getattr(env, "unbacked", {}):
                        readers.setdefault(s, []).append(node)
    return readers


def functionalize(gm: fx.GraphModule, fake_mode: Any) -> FunctionalGraph:
    """Rewrite the literal trace ``gm`` (made by GraphTracer) into a mutation-free graph."""
    return _Functionalizer(gm, fake_mode).run()
