"""Run a compiled forward/backward pair as if it were the original function.

:class:`CompiledPlan` holds the compiled callables and the bookkeeping from
tracing. Calling it:

1. runs the forward inside one ``autograd.Function`` (training) or directly
   (inference); the forward returns ``mutated inputs' new values + user
   outputs + saved values``;
2. copies the new values into the mutated inputs (through autograd when the
   value is differentiable, as eager's in-place op would be);
3. assembles the user's outputs, rebuilding outputs that were views of an
   input (or of an intermediate that several outputs view) by replaying their
   view ops on the real input (or on the graph output standing for the
   intermediate), so they stay views with eager's layout.

Random ops run only in the compiled forward, in eager's order, and their
results (dropout masks) are saved rather than recomputed, so a fixed seed
gives the same numbers as eager.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ember.aotgrad.aliasing import replay
from ember.aotgrad.backward_fallback import BackwardFallback, Kept
from ember.aotgrad.errors import DoubleBackwardError
from ember.aotgrad.joint import OutputSlot
from ember.ir.boxed import call_boxed
from ember.ir.updates import note_inputs_written

Compiled = Callable[..., Sequence[Any]]


@dataclass(frozen=True, slots=True)
class CompiledPlan:
    """A compiled graph (or forward/backward pair) with its calling convention."""

    forward: Compiled
    backward: Compiled | None
    num_inputs: int
    mutated_inputs: tuple[int, ...]
    num_user_outputs: int
    outputs: tuple[OutputSlot, ...]
    tangent_mask: tuple[bool, ...]
    grad_inputs: tuple[int, ...]
    num_saved: int
    #: inputs the graphs take as contiguous copies (traced so: their elements share memory)
    copied_inputs: tuple[int, ...] = ()
    #: per gradient, the tangents it depends on (a gradient whose tangents all are None is None)
    grad_tangents: tuple[tuple[int, ...], ...] = ()
    #: (user output, eager's strides): outputs the graphs may lay out otherwise than eager
    output_strides: tuple[tuple[int, tuple[int, ...]], ...] = ()
    #: the mutated inputs whose elements share memory, where every call's inputs have the
    #: example inputs' layouts (``aot_inference``: the frontend guards them); None: each
    #: call checks (``torch._debug_has_internal_overlap``, ~0.2 us per mutated input)
    overlapping: frozenset[int] | None = None
    #: where the compiled backward raises, the gradients from the forward recomputed eagerly
    #: (``backward_fallback.py``); None: its exception propagates (strict)
    fallback: BackwardFallback | None = None

    @property
    def num_fw_outputs(self) -> int:
        return len(self.mutated_inputs) + self.num_user_outputs

    @property
    def is_direct(self) -> bool:
        """An inference plan whose forward's outputs are the user's, in order: nothing to do
        around the compiled forward (no write-backs, copies, views or constants)."""
        return (self.backward is None and not self.mutated_inputs and not self.copied_inputs
                and not self.output_strides
                and len(self.outputs) == self.num_user_outputs
                and all(s.kind == "graph" and s.index == i and not s.views
                        for i, s in enumerate(self.outputs)))

    def __call__(self, inputs: Sequence[torch.Tensor]) -> list[Any]:
        overlapping = self._overlapping_mutated(inputs)
        args = inputs
        if self.copied_inputs:
            args = list(inputs)
            for i in self.copied_inputs:
                args[i] = inputs[i].contiguous()
        try:
            if self.backward is None:
                with torch.no_grad():
                    fw = list(self.forward(*args))
            else:
                args = self._without_dead_edges(args)
                groups = grad_groups(sum(self.tangent_mask), self.grad_inputs, self.grad_tangents)
                if len(groups) > 1:
                    fw = _apply_in_groups(self, args, groups)
                else:
                    fw = list(_CompiledFunction.apply(self, *args))  # type: ignore[no-untyped-call]
        except Exception as exc:
            # the graphs are functional: an input is written only by a compiler that computes
            # an update into it (ember.ir.updates), and that compiler says so on the exception
            note_inputs_written(exc, False)
            raise
        self._write_back(inputs, fw, overlapping)
        try:
            return self._assemble(inputs, fw[len(self.mutated_inputs):])
        except Exception as exc:
            note_inputs_written(exc, bool(self.mutated_inputs))
            raise

    def _without_dead_edges(self, args: Sequence[torch.Tensor]) -> Sequence[torch.Tensor]:
        """``args`` with the inputs that get no gradient detached.

        Autograd runs every node it can reach from the loss, even with a None gradient,
        and some raise there (the ``NotImplemented`` node of ``x // 2``, a node whose saved
        tensor was written in place later). Eager's graph has no edge from the outputs to
        an input they do not depend on differentiably (an unused ``lerp(v, x // 2)``, fuzz
        seed 3252), so neither may the compiled graph's node.
        """
        if not self.grad_inputs:
            return args
        wanted = set(self.grad_inputs)
        if not any(isinstance(a, torch.Tensor) and a.requires_grad and i not in wanted
                   for i, a in enumerate(args)):
            return args
        return [a.detach() if isinstance(a, torch.Tensor) and a.requires_grad
                and i not in wanted else a for i, a in enumerate(args)]

    def _overlapping_mutated(self, inputs: Sequence[torch.Tensor]) -> dict[int, torch.Tensor]:
        """Mutated inputs whose elements share memory (``expand``): their values before the call."""
        out: dict[int, torch.Tensor] = {}
        if self.overlapping is not None:
            for i in self.overlapping:
                out[i] = inputs[i].detach().clone()
            return out
        for i in self.mutated_inputs:
            if torch._debug_has_internal_overlap(inputs[i]) == 1:  # MemOverlap::Yes
                out[i] = inputs[i].detach().clone()
        return out

    def _write_back(self, inputs: Sequence[torch.Tensor], fw: list[Any],
                    overlapping: dict[int, torch.Tensor]) -> None:
        in_place: list[torch.Tensor] = [
            fw[k] for k, i in enumerate(self.mutated_inputs) if fw[k] is inputs[i]]
        written = bool(in_place)  # the compiled graph wrote those already (ember.ir.updates)
        try:
            for k, i in enumerate(self.mutated_inputs):
                new = fw[k]
                if new is inputs[i]:
                    continue
                if i in overlapping:
                    _write_overlapping(inputs[i], overlapping[i], new)
                elif (isinstance(new, torch.Tensor) and new.requires_grad
                      and torch.is_grad_enabled() and not _written_untracked(inputs[i])):
                    inputs[i].copy_(new)
                else:
                    with torch.no_grad():
                        inputs[i].copy_(new)
                written = True
        except Exception as exc:
            note_inputs_written(exc, written)  # a copy that raised wrote nothing
            raise
        if in_place:
            # a kernel wrote through data_ptr(): bump the version counters as eager's in-place
            # ops do, so autograd still refuses a backward through a graph that saved one of
            # these tensors before the write (a weight saved by a forward, then an optimizer
            # step, then backward: eager raises, and so must the compiled step)
            torch.autograd.graph.increment_version(in_place)

    def _assemble(self, inputs: Sequence[torch.Tensor], user: list[Any]) -> list[Any]:
        for k, stride in self.output_strides:
            user[k] = _with_strides(user[k], stride)
        out: list[Any] = []
        for slot in self.outputs:
            if slot.kind == "const":
                out.append(slot.value)
                continue
            base = user[slot.index] if slot.kind == "graph" else inputs[slot.index]
            if not slot.views:
                out.append(base)
            elif slot.requires_grad or not torch.is_grad_enabled():
                out.append(replay(base, slot.views, user))
            else:
                with torch.no_grad():
                    out.append(replay(base, slot.views, user))
        return out


def _written_untracked(t: torch.Tensor) -> bool:
    """Whether eager can only have written ``t`` without autograd (under ``no_grad`` or
    through a ``detach``ed alias): an in-place op autograd records raises on a leaf that
    requires grad and on a view of one. So the compiled write is not recorded either (a
    graph input ``v = x.view(-1)`` written through ``v.detach().masked_fill_(...)``, fuzz
    seed 3832: the recorded copy raised where eager does not)."""
    if not t.requires_grad:
        return False
    base = t._base if t._is_view() else None
    return t.is_leaf or (base is not None and base.is_leaf and base.requires_grad)


def _with_strides(t: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    """``t`` laid out with eager's ``stride`` (a copy, through autograd, when it is not)."""
    if all(a == b for n, a, b in zip(t.shape, t.stride(), stride, strict=True) if n > 1):
        return t
    return torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device).copy_(t)


def _write_overlapping(target: torch.Tensor, old: torch.Tensor, new: torch.Tensor) -> None:
    """Write ``new`` into ``target``, whose elements share memory, as eager's in-place op did.

    Eager wrote only the elements the op changed (``fill_``, ``zero_``, ``index_fill_`` on
    an ``expand``ed tensor), and every alias of a written element sees the write. So
    the changed elements are scattered into the memory they address, in element order;
    an unchanged element is not written and cannot undo an alias's write.
    """
    with torch.no_grad():
        new = new.detach().to(target.dtype)
        changed = (new != old) & ~(new.isnan() & old.isnan()) if new.is_floating_point() else (
            new != old)
        if not bool(changed.any()):
            return
        numel = target.untyped_storage().nbytes() // target.element_size()
        where = torch.arange(numel, device=target.device).as_strided(
            target.shape, target.stride(), target.storage_offset())
        memory = torch.empty(0, dtype=target.dtype, device=target.device)
        memory.set_(target.untyped_storage())
        memory.index_put_((where[changed],), new[changed])


def _release_saved(ctx: Any) -> None:
    """Drop autograd's references to ``ctx``'s saved tensors, read already, unless the
    backward was asked to keep the graph (``retain_graph=True``: a later backward reads
    them again)."""
    release = getattr(ctx, "maybe_clear_saved_tensors", None)
    if release is not None:
        release()


def _refuse_double_backward() -> None:
    if torch.is_grad_enabled():
        raise DoubleBackwardError(
            "double backward through a function compiled by ember.aotgrad is not "
            "supported (backward was called with create_graph=True). Run that part "
            "eagerly, or compute the higher-order gradient without compiling it."
        )


def _not_views(outputs: list[Any], inputs: Sequence[Any]) -> list[Any]:
    """``outputs`` with each view of a tensor made inside the compiled forward detached from
    it (same memory, not a view): autograd forbids in-place writes to a view a custom
    Function returns, and eager's result is a tensor of its own (``v = x.take(i);
    v[..., None].div_(2); ...; v.masked_fill_(m, 1)``, fuzz seed 3875). Inputs returned
    as they are keep autograd's handling."""
    out = list(outputs)
    for k, o in enumerate(out):
        if isinstance(o, torch.Tensor) and o._is_view() and not any(o is i for i in inputs):
            out[k] = o.detach()
    return out


@functools.lru_cache(maxsize=1024)
def grad_groups(num_tangents: int, grad_inputs: tuple[int, ...],
                deps: tuple[tuple[int, ...], ...]) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """The independent parts of a backward: ``(tangents, gradient positions)`` per part, where
    the gradients of a part depend only on its tangents and no two parts share either.

    Eager records independent computations as separate autograd nodes: a loss that uses
    only ``v7 = gather(v5)`` never visits the history of another output or of a mutated
    input (``v2.copy_(v2)``). One autograd node for the whole graph would connect them, and
    autograd runs every node it reaches, unpacking their saved tensors even when the
    gradient they get is None, so a tensor written in place after eager saved it raises
    there (fuzz seed 449). Gradients that depend on no tangent, and tangents no gradient
    depends on, join the first part (they have nothing to separate from).
    """
    parent = list(range(num_tangents))

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    if not deps or len(deps) != len(grad_inputs):
        return ((tuple(range(num_tangents)), tuple(range(len(grad_inputs)))),)
    for needs in deps:
        for k in needs[1:]:
            parent[find(k)] = find(needs[0])
    roots: dict[int, tuple[list[int], list[int]]] = {}
    for k in range(num_tangents):
        if any(k in needs for needs in deps):
            roots.setdefault(find(k), ([], []))[0].append(k)
    parts = list(roots.values())
    if len(parts) <= 1:
        return ((tuple(range(num_tangents)), tuple(range(len(grad_inputs)))),)
    index = {find(tans[0]): n for n, (tans, _) in enumerate(parts)}
    in_part: set[int] = set()
    for j, needs in enumerate(deps):
        n = index[find(needs[0])] if needs else 0
        parts[n][1].append(j)
    for tans, _ in parts:
        in_part.update(tans)
    parts[0][0].extend(k for k in range(num_tangents) if k not in in_part)
    return tuple((tuple(sorted(t)), tuple(sorted(g))) for t, g in parts)


def _apply_in_groups(plan: CompiledPlan, args: Sequence[torch.Tensor],
                     groups: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]) -> list[Any]:
    """The forward once (without autograd), then one autograd node per independent part
    (:func:`grad_groups`) owning that part's outputs and taking that part's inputs."""
    kept = plan.fallback.keep(args) if plan.fallback is not None else None
    with torch.no_grad():
        values = list(plan.forward(*args))
    n = plan.num_fw_outputs
    fw, saved = _not_views(values[:n], args), values[n:]
    masked = [k for k, m in enumerate(plan.tangent_mask) if m]
    tangent_meta = [(fw[k].shape, fw[k].dtype, fw[k].device) for k in masked]
    out = list(fw)
    for tangents, grads in groups:
        positions = tuple(plan.grad_inputs[j] for j in grads)
        part = _Part(plan, saved, tangent_meta, tangents, grads, positions,
                     [fw[masked[k]] for k in tangents], kept)
        owned = _PartFunction.apply(part, *[args[p] for p in positions])  # type: ignore[no-untyped-call]
        for k, value in zip(tangents, owned):
            out[masked[k]] = value
    return out


@dataclass(frozen=True, slots=True)
class _Part:
    plan: CompiledPlan
    saved: list[Any]
    tangent_meta: list[tuple[torch.Size, torch.dtype, torch.device]]
    tangents: tuple[int, ...]
    grads: tuple[int, ...]
    positions: tuple[int, ...]
    #: the values of the part's outputs (computed by the compiled forward)
    outputs: list[Any]
    #: the forward's inputs, for recomputing the gradients if the compiled backward raises
    kept: Kept | None = None


class _PartFunction(torch.autograd.Function):
    """One independent part of a compiled graph's backward (:func:`_apply_in_groups`):
    its forward hands out outputs the compiled forward already computed."""

    @staticmethod
    def forward(ctx: Any, part: _Part, *args: torch.Tensor) -> tuple[Any, ...]:
        ctx.part = part
        ctx.save_for_backward(*[v for v in part.saved if isinstance(v, torch.Tensor)])
        ctx.set_materialize_grads(False)
        return tuple(part.outputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        part: _Part = ctx.part
        plan = part.plan
        _refuse_double_backward()
        assert plan.backward is not None
        given: list[torch.Tensor | None] = [None] * len(part.tangent_meta)
        for k, g in zip(part.tangents, grads):
            given[k] = g
        present = [g is not None for g in given]
        tangents = [g.contiguous() if g is not None else torch.zeros(s, dtype=d, device=dev)
                    for g, (s, d, dev) in zip(given, part.tangent_meta)]
        saved = list(ctx.saved_tensors)
        for i, v in enumerate(part.saved):
            if not isinstance(v, torch.Tensor):
                saved.insert(i, v)
        # every part runs the whole backward on the same saved values (``part.saved`` holds
        # them for the other parts), so nothing is freed early here
        args = [*saved, *tangents]
        if part.kept is None:
            in_grads = list(call_boxed(plan.backward, args))
        else:
            in_grads = part.kept.backward(plan.backward, args, len(tangents), given,
                                          plan.grad_inputs, plan.tangent_mask)
        result: list[torch.Tensor | None] = [None] * (1 + len(part.positions))
        deps = plan.grad_tangents
        for n, j in enumerate(part.grads):
            needs = deps[j]
            if needs and not any(present[k] for k in needs):
                continue
            result[1 + n] = in_grads[j]
        return tuple(result)


class _CompiledFunction(torch.autograd.Function):
    """Forward and backward of one compiled graph pair, as one autograd node."""

    #: torch 2.13 and later pass the incoming gradients in one list the backward may empty
    #: (earlier releases ignore this and pass them one by one): emptied, a tangent is freed
    #: after its last use in the compiled backward, as the saved values are (ADR 0063)
    boxed_grads_call = True

    @staticmethod
    def forward(ctx: Any, plan: CompiledPlan, *inputs: torch.Tensor) -> tuple[Any, ...]:
        ctx.kept = plan.fallback.keep(inputs) if plan.fallback is not None else None
        values = list(plan.forward(*inputs))
        n = plan.num_fw_outputs
        fw, saved = _not_views(values[:n], inputs), values[n:]
        ctx.plan = plan
        # saved sizes (ints, for symbolic shapes) travel beside the saved tensors
        ctx.save_for_backward(*[v for v in saved if isinstance(v, torch.Tensor)])
        ctx.saved_sizes = [(i, v) for i, v in enumerate(saved) if not isinstance(v, torch.Tensor)]
        ctx.set_materialize_grads(False)
        ctx.tangent_meta = [(v.shape, v.dtype, v.device) for v, m in zip(fw, plan.tangent_mask)
                            if m]
        no_grad = [v for v, m in zip(fw, plan.tangent_mask)
                   if isinstance(v, torch.Tensor) and not m]
        if no_grad:
            ctx.mark_non_differentiable(*no_grad)
        return tuple(fw)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple[torch.Tensor | None, ...]:
        plan: CompiledPlan = ctx.plan
        _refuse_double_backward()
        assert plan.backward is not None
        incoming: list[torch.Tensor | None] | tuple[Any, ...] = grads
        if len(grads) == 1 and isinstance(grads[0], list):  # ``boxed_grads_call``
            incoming = grads[0]
        given = [g for g, m in zip(incoming, plan.tangent_mask) if m]
        if isinstance(incoming, list):
            incoming.clear()
        del grads, incoming
        present = [g is not None for g in given]
        tangents = [g.contiguous() if g is not None else torch.zeros(s, dtype=d, device=dev)
                    for g, (s, d, dev) in zip(given, ctx.tangent_meta)]
        saved = list(ctx.saved_tensors)
        # autograd's references to the saved values go (unless retain_graph keeps them for
        # another backward): the list below is the only one left, handed to the compiled
        # backward, which frees each value after its last use, as eager's nodes do (ADR 0063)
        _release_saved(ctx)
        for i, v in ctx.saved_sizes:
            saved.insert(i, v)
        args = [*saved, *tangents]
        del saved, tangents

        kept: Kept | None = ctx.kept
        if kept is None:
            given.clear()  # (``present`` says which were None)
            in_grads = list(call_boxed(plan.backward, args))
        else:
            in_grads = kept.backward(plan.backward, args, len(given), given, plan.grad_inputs,
                                     plan.tangent_mask)
            kept.release()  # the inputs, once this size passed a backward
        result: list[torch.Tensor | None] = [None] * (1 + plan.num_inputs)
        deps = plan.grad_tangents or tuple(() for _ in plan.grad_inputs)
        for pos, g, needs in zip(plan.grad_inputs, in_grads, deps):
            if needs and not any(present[k] for k in needs):
                continue  # eager leaves this gradient None: no used output depends on it
            result[1 + pos] = g
        return tuple(result)
