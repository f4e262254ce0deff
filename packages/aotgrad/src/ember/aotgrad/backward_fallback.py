"""A compiled backward that raises never reaches the user: the gradients are computed
another way, with one warning line.

The forward of a training graph runs compiled inside one ``autograd.Function``; its
backward runs later, inside ``loss.backward()``, where ember.dynamo's eager
fallback (``eager_fallback.EagerOnError``) cannot reach: the forward already
returned. So the runtime (``runtime.py``) recovers there, in two steps:

1. **The backward graph, uncompiled.** The ATen backward graph the compiler was
   given runs eagerly on the same saved values and tangents (what ``aot_eager``
   runs). This covers a compiler's bug (a wrapper or kernel that raises) and
   needs nothing kept: the saved values are autograd's.
2. **The function, again, under autograd.** Where the backward graph raises too
   (a bug in the traced backward itself), the function the graph was traced from
   (the frontend's torch-level graph) runs again eagerly on the forward's inputs,
   with the random generators as they were before the forward (random ops then
   draw what the compiled forward drew, in eager's order: ADR 0003), and
   ``torch.autograd.grad`` gives the gradients for the tangents received. The
   tangents are those of the forward's outputs: an output the runtime rebuilt as a
   view of one (``OutputSlot.views``) gets its tangent through eager's view base.
   This needs the forward's inputs (detached aliases; copies of the inputs the
   graph writes, which the runtime overwrites after the forward): they are kept
   only while the graph has not yet passed a backward at that size (the shapes of
   its inputs with symbolic sizes; a static graph has one size). After a backward
   passed, calls at that size keep nothing; after one failed, that size keeps them.

The ATen forward graph is not differentiated again: it is a trace *below* autograd
(the ``detach`` calls autograd made while it was traced are in it), so autograd over
it is not eager's gradient.

One warning line names the graph and the reason (the traceback at
``EMBER_LOGS=+aotgrad`` or ``+dynamo``); ``EMBER_STRICT=1`` (``AotOptions.strict``)
builds no fallback, so the compiled backward's error raises. Recomputing is refused
(the original error raises, with a note saying why) where an input was changed in
place between the forward and the backward (its version counter moved: the new
values would give a wrong gradient), where the inputs were not kept, or where the
recomputation's outputs do not line up with the forward's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from ember.ir.boxed import call_boxed
from ember.ir.logs import get_logger, reason, traceback_wanted

from .joint import OutputSlot
from .sizes import is_symbolic_tensor

LOG = get_logger("aotgrad")

#: ``inputs -> the function's flat outputs`` (run eagerly, under autograd)
Source = Callable[[list[Any]], list[Any]]


def _is_random(node: fx.Node) -> bool:
    tags = getattr(node.target, "tags", ())
    return node.op == "call_function" and torch.Tag.nondeterministic_seeded in tags


@dataclass(eq=False)
class BackwardFallback:
    """What one compiled graph pair needs to compute its gradients without the compiled
    backward."""

    name: str
    #: the backward graph (ATen, uncompiled): ``saved values + tangents -> gradients``
    backward: fx.GraphModule
    #: the function traced (None: step 2 is not available)
    source: Source | None
    outputs: tuple[OutputSlot, ...]
    #: the inputs whose sizes are symbolic (a static graph: none, one size)
    symbolic_inputs: tuple[int, ...]
    #: the inputs the graph writes (the runtime overwrites them after the forward)
    mutated_inputs: tuple[int, ...]
    #: whether the forward draws random numbers (the generators' states are kept)
    random: bool
    #: sizes (the symbolic inputs' shapes) at which a compiled backward succeeded
    passed: set[tuple[Any, ...]] = field(default_factory=set)
    #: sizes at which the compiled backward raised: later backwards there skip it
    failed: set[tuple[Any, ...]] = field(default_factory=set)
    warned: bool = False

    @staticmethod
    def of(name: str, forward: fx.GraphModule, backward: fx.GraphModule, source: Source | None,
           outputs: Sequence[OutputSlot], mutated_inputs: Sequence[int]) -> BackwardFallback:
        placeholders = [n for n in forward.graph.nodes if n.op == "placeholder"]
        symbolic = tuple(i for i, n in enumerate(placeholders)
                         if is_symbolic_tensor(n.meta.get("val")))
        random = any(_is_random(n) for n in forward.graph.nodes)
        return BackwardFallback(name, backward, source, tuple(outputs), symbolic,
                                tuple(mutated_inputs), random)

    def size_of(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(tuple(inputs[i].shape) for i in self.symbolic_inputs)

    def keep(self, inputs: Sequence[Any]) -> Kept:
        """Before the compiled forward runs: the call's size and, unless a backward at this
        size already passed (or there is no function to run again), its inputs."""
        size = self.size_of(inputs)
        if size in self.passed or self.source is None:
            return Kept(self, size, None, [], None)
        kept = [x.detach() if isinstance(x, torch.Tensor) else x for x in inputs]
        for i in self.mutated_inputs:
            kept[i] = kept[i].clone()
        # a detached alias shares its tensor's version counter: an in-place write to the
        # input between the forward and the backward shows on it
        versions = [x._version if isinstance(x, torch.Tensor) and i not in self.mutated_inputs
                    else None for i, x in enumerate(kept)]
        return Kept(self, size, kept, versions, _rng_states(inputs) if self.random else None)


@dataclass(eq=False)
class Kept:
    """One forward call's size, and its inputs while they may be needed
    (:meth:`BackwardFallback.keep`)."""

    fallback: BackwardFallback
    size: tuple[Any, ...]
    inputs: list[Any] | None
    versions: list[int | None]
    rng: list[tuple[torch.device, torch.Tensor]] | None

    def release(self) -> None:
        """Drop the inputs once the size passed a backward (the caller's choice: the parts of
        a graph split in independent backwards share one ``Kept``)."""
        if self.size in self.fallback.passed:
            self.inputs, self.rng = None, None

    def backward(self, backward: Callable[..., Any], args: list[Any], num_tangents: int,
                 given: list[torch.Tensor | None], grad_inputs: Sequence[int],
                 tangent_mask: Sequence[bool]) -> list[Any]:
        """The compiled ``backward``'s gradients on ``args`` (the saved values, then
        ``num_tangents`` tangents; one gradient per ``grad_inputs``), or, where it raises
        (or raised before at this size), the same gradients computed without it.

        Until a backward passed at this size, ``args`` and ``given`` (the incoming
        gradients) stay here for a recovery; after one passed both are emptied and the
        values handed over (``ember.ir.boxed``: the compiled backward frees each saved value
        and tangent after its last use, ADR 0063), so an exception then propagates, with a
        note: neither the saved values nor the inputs are left to compute the gradients
        another way."""
        fb = self.fallback
        if self.size not in fb.failed:
            handed = self.size in fb.passed
            if handed:
                given.clear()
            try:
                grads = list(call_boxed(backward, args if handed else list(args)))
            except Exception as exc:
                fb.failed.add(self.size)
                if handed:
                    _cannot(exc, "a backward at this size had passed, so its saved values "
                                 "were freed as it ran")
                split = len(args) - num_tangents
                return self._recover(exc, args[:split], args[split:], given, grad_inputs,
                                     tangent_mask)
            fb.passed.add(self.size)
            return grads
        split = len(args) - num_tangents
        return self._recover(None, args[:split], args[split:], given, grad_inputs, tangent_mask)

    def _recover(self, exc: Exception | None, saved: Sequence[Any],
                 tangents: Sequence[torch.Tensor], given: Sequence[torch.Tensor | None],
                 grad_inputs: Sequence[int], tangent_mask: Sequence[bool]) -> list[Any]:
        fb = self.fallback
        try:
            with torch.no_grad():
                grads = list(fb.backward(*saved, *tangents))
        except Exception as second:
            if exc is not None:
                self._log(exc, "the gradients come from the function run again eagerly "
                               f"(its backward graph raised {reason(second)} too)")
            return self._recompute(exc or second, given, grad_inputs, tangent_mask)
        if exc is not None:
            self._log(exc, "its backward graph runs eagerly instead")
        return grads

    def _log(self, exc: Exception, what: str) -> None:
        fb = self.fallback
        first, fb.warned = not fb.warned, True
        at = f" at sizes {list(self.size)}" if fb.symbolic_inputs else ""
        (LOG.warning if first else LOG.debug)(
            "ember.aotgrad: the compiled backward of %s raised %s%s; %s (EMBER_STRICT=1 "
            "raises instead)", fb.name, reason(exc), at, what,
            exc_info=exc if traceback_wanted("aotgrad") else None)

    def _recompute(self, exc: Exception, given: Sequence[torch.Tensor | None],
                   grad_inputs: Sequence[int], tangent_mask: Sequence[bool]) -> list[Any]:
        inputs = self.inputs
        if inputs is None:
            _cannot(exc, "its inputs were not kept (a backward at this size had passed, or "
                         "the function cannot run again)")
            raise AssertionError("unreachable")
        changed = [i for i, (x, v) in enumerate(zip(inputs, self.versions))
                   if v is not None and isinstance(x, torch.Tensor) and x._version != v]
        if changed:
            _cannot(exc, f"inputs {changed} of {self.fallback.name} were changed in place "
                         "between its forward and its backward")
        try:
            return self._grads(given, grad_inputs, tangent_mask)
        except _Misaligned as why:
            _cannot(exc, str(why))
        except Exception as again:
            _cannot(exc, f"running the function again raised too ({reason(again)})")
        raise AssertionError("unreachable")

    def _grads(self, given: Sequence[torch.Tensor | None], grad_inputs: Sequence[int],
               tangent_mask: Sequence[bool]) -> list[Any]:
        fb = self.fallback
        assert fb.source is not None and self.inputs is not None
        wanted = set(grad_inputs)
        leaves = [x.detach().requires_grad_() if i in wanted else x
                  for i, x in enumerate(self.inputs)]
        # the function writes its mutated inputs in place: it gets copies (not leaves)
        args = [x.clone() if i in fb.mutated_inputs and isinstance(x, torch.Tensor) else x
                for i, x in enumerate(leaves)]
        with torch.enable_grad(), _rng_restored(self.rng):
            flat = fb.source(args)
        values = self._forward_outputs(flat, args, len(tangent_mask))
        tangent_of = dict(zip([k for k, m in enumerate(tangent_mask) if m], given, strict=True))
        pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        for k, value in enumerate(values):
            g = tangent_of.get(k)
            if g is None or value is None:
                continue
            if tuple(value.shape) != tuple(g.shape):
                raise _Misaligned(f"output {k} of the function has shape {tuple(value.shape)}, "
                                  f"its tangent {tuple(g.shape)}")
            if value.requires_grad:
                pairs.append((value, g))
        sources = [leaves[i] for i in grad_inputs]
        if not pairs or not sources:
            return [None] * len(grad_inputs)
        return list(torch.autograd.grad([v for v, _ in pairs], sources, [g for _, g in pairs],
                                        allow_unused=True))

    def _forward_outputs(self, flat: list[Any], args: list[Any],
                         n: int) -> list[torch.Tensor | None]:
        """The compiled forward's outputs (the mutated inputs' new values, then the graph's
        user outputs) as the function computed them."""
        fb = self.fallback
        if len(flat) != len(fb.outputs):
            raise _Misaligned(f"the function returned {len(flat)} values, the graph {len(fb.outputs)}")
        values: list[torch.Tensor | None] = [args[i] for i in fb.mutated_inputs]
        values += [None] * (n - len(values))
        for slot, out in zip(fb.outputs, flat, strict=True):
            if slot.kind != "graph":
                continue
            k = len(fb.mutated_inputs) + slot.index
            if k >= n or values[k] is not None or not isinstance(out, torch.Tensor):
                continue
            if slot.views:  # a view the runtime replays on the graph's output: its base
                if out._base is None:
                    raise _Misaligned(f"output {slot.index} is a view in the graph, not in eager")
                out = out._base
            values[k] = out
        return values


class _Misaligned(Exception):
    """The function's outputs do not line up with the compiled forward's."""


def _cannot(exc: Exception, why: str) -> None:
    """Raise the compiled backward's exception, saying why it was not recovered."""
    exc.add_note(f"ember.aotgrad: the compiled backward raised and its gradients could not be "
                 f"computed another way: {why}")
    raise exc


def _rng_states(inputs: Sequence[Any]) -> list[tuple[torch.device, torch.Tensor]]:
    """The states of the generators the forward may draw from: the CPU one, and each CUDA
    device's of the inputs."""
    states = [(torch.device("cpu"), torch.get_rng_state())]
    cuda = sorted({x.device.index or 0 for x in inputs
                   if isinstance(x, torch.Tensor) and x.device.type == "cuda"})
    for index in cuda:
        device = torch.device("cuda", index)
        states.append((device, torch.cuda.get_rng_state(device)))
    return states


@contextlib.contextmanager
def _rng_restored(states: list[tuple[torch.device, torch.Tensor]] | None) -> Iterator[None]:
    """The generators set to ``states`` inside, and put back as they were after."""
    if states is None:
        yield
        return
    now = _rng_states([torch.empty(0, device=d) for d, _ in states])
    try:
        _set_rng_states(states)
        yield
    finally:
        _set_rng_states(now)


def _set_rng_states(states: Sequence[tuple[torch.device, torch.Tensor]]) -> None:
    for device, state in states:
        if device.type == "cpu":
            torch.set_rng_state(state)
        else:
            torch.cuda.set_rng_state(state, device)


__all__ = ["BackwardFallback", "Kept", "Source"]
