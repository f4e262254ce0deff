"""A compiled backward that raises never reaches the user: the gradients come from the
graph's forward, recomputed eagerly under autograd.

The forward of a training graph runs compiled inside one ``autograd.Function``; its
backward runs later, inside ``loss.backward()``, where ember.dynamo's eager
fallback (``eager_fallback.EagerOnError``) cannot reach: the forward already
returned. So the runtime (``runtime.py``) keeps what it needs to compute the
gradients without the compiled backward: the forward's inputs (detached aliases;
copies of the inputs the graph writes, which the runtime overwrites after the
forward), their version counters, and the random generators' states where the
forward draws random numbers. When the compiled backward raises, the forward
graph (ATen ops, uncompiled) runs again on those inputs under autograd, with the
generators as they were (random ops then draw what the compiled forward drew),
and ``torch.autograd.grad`` gives the gradients of the inputs the backward
would have given, for the tangents it was given. One warning line names the
graph and the reason (the traceback at ``EMBER_LOGS=+aotgrad`` or ``+dynamo``);
``EMBER_STRICT=1`` (``AotOptions.strict``) builds no fallback, so the error raises.

What it costs: the inputs stay alive until the backward, and the graph's inputs
that it writes are copied, only while the graph has not yet passed a backward
at that size (the shapes of its inputs with symbolic sizes; a static graph has
one size): once a backward at a size succeeded, calls at that size keep nothing.
At a size where the backward failed, later calls skip the compiled backward.

It cannot recompute (the original exception is raised, with a note saying why)
where an input was changed in place between the forward and the backward (its
version counter moved: recomputing would use the new values) or the eager
recomputation raises too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from ember.ir.logs import get_logger, reason, traceback_wanted

from .sizes import is_symbolic_tensor

LOG = get_logger("aotgrad")


def _is_random(node: fx.Node) -> bool:
    tags = getattr(node.target, "tags", ())
    return node.op == "call_function" and torch.Tag.nondeterministic_seeded in tags


@dataclass(eq=False)
class BackwardFallback:
    """What one compiled graph pair needs to recompute its gradients eagerly."""

    #: the forward graph (ATen, uncompiled): ``inputs -> fw outputs + saved values``
    forward: fx.GraphModule
    name: str
    #: the inputs whose sizes are symbolic (a static graph: none, one size)
    symbolic_inputs: tuple[int, ...]
    #: the inputs the graph writes (the runtime overwrites them after the forward)
    mutated_inputs: tuple[int, ...]
    #: whether the forward draws random numbers (the generators' states are kept)
    random: bool
    #: sizes (the symbolic inputs' shapes) at which a compiled backward succeeded
    passed: set[tuple[Any, ...]] = field(default_factory=set)
    #: sizes at which the compiled backward raised: later backwards there recompute
    failed: set[tuple[Any, ...]] = field(default_factory=set)
    warned: bool = False

    @staticmethod
    def of(forward: fx.GraphModule, name: str,
           mutated_inputs: Sequence[int]) -> BackwardFallback:
        placeholders = [n for n in forward.graph.nodes if n.op == "placeholder"]
        symbolic = tuple(i for i, n in enumerate(placeholders)
                         if is_symbolic_tensor(n.meta.get("val")))
        random = any(_is_random(n) for n in forward.graph.nodes)
        return BackwardFallback(forward, name, symbolic, tuple(mutated_inputs), random)

    def size_of(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(tuple(inputs[i].shape) for i in self.symbolic_inputs)

    def keep(self, inputs: Sequence[Any]) -> Kept | None:
        """Before the compiled forward runs: what a recomputation needs, unless a backward
        at this size already passed (then nothing is kept)."""
        size = self.size_of(inputs)
        if size in self.passed:
            return None
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
    """One forward call's inputs, kept for its backward (:meth:`BackwardFallback.keep`)."""

    fallback: BackwardFallback
    size: tuple[Any, ...]
    inputs: list[Any]
    versions: list[int | None]
    rng: list[tuple[torch.device, torch.Tensor]] | None

    def backward(self, compiled: Callable[[], list[Any]], grad_inputs: Sequence[int],
                 num_fw_outputs: int, tangent_mask: Sequence[bool],
                 tangents: Sequence[torch.Tensor | None]) -> list[Any]:
        """``compiled()`` (the compiled backward's gradients, one per ``grad_inputs``), or,
        where it raises (or raised before at this size), the same gradients recomputed."""
        fb = self.fallback
        if self.size not in fb.failed:
            try:
                grads = compiled()
            except Exception as exc:
                fb.failed.add(self.size)
                self._log(exc)
                return self._recompute(grad_inputs, num_fw_outputs, tangent_mask, tangents, exc)
            fb.passed.add(self.size)
            return grads
        return self._recompute(grad_inputs, num_fw_outputs, tangent_mask, tangents, None)

    def _log(self, exc: Exception) -> None:
        fb = self.fallback
        first, fb.warned = not fb.warned, True
        log = LOG.warning if first else LOG.debug
        log("ember.aotgrad: the compiled backward of %s raised %s; its gradients are computed "
            "from its forward, run again eagerly under autograd%s (EMBER_STRICT=1 raises "
            "instead)", fb.name, reason(exc),
            "" if not fb.symbolic_inputs else f" at sizes {list(self.size)}",
            exc_info=exc if traceback_wanted("aotgrad") else None)

    def _recompute(self, grad_inputs: Sequence[int], num_fw_outputs: int,
                   tangent_mask: Sequence[bool], tangents: Sequence[torch.Tensor | None],
                   exc: Exception | None) -> list[Any]:
        changed = [i for i, (x, v) in enumerate(zip(self.inputs, self.versions))
                   if v is not None and isinstance(x, torch.Tensor) and x._version != v]
        if changed:
            return _cannot(exc, f"inputs {changed} of {self.fallback.name} were changed in "
                                "place between its forward and its backward")
        try:
            return self._grads(grad_inputs, num_fw_outputs, tangent_mask, tangents)
        except Exception as again:
            return _cannot(exc, f"running its forward eagerly raised too ({reason(again)})",
                           again)

    def _grads(self, grad_inputs: Sequence[int], num_fw_outputs: int,
               tangent_mask: Sequence[bool],
               tangents: Sequence[torch.Tensor | None]) -> list[Any]:
        wanted = set(grad_inputs)
        inputs = [x.detach().requires_grad_() if i in wanted else x
                  for i, x in enumerate(self.inputs)]
        with torch.enable_grad(), _rng_restored(self.rng):
            values = list(self.fallback.forward(*inputs))
        outputs = [v for v, m in zip(values[:num_fw_outputs], tangent_mask) if m]
        pairs = [(o, g) for o, g in zip(outputs, tangents, strict=True)
                 if g is not None and isinstance(o, torch.Tensor) and o.requires_grad]
        sources = [inputs[i] for i in grad_inputs]
        if not pairs or not sources:
            return [None] * len(grad_inputs)
        got = torch.autograd.grad([o for o, _ in pairs], sources, [g for _, g in pairs],
                                  allow_unused=True)
        return list(got)


def _cannot(exc: Exception | None, why: str, cause: Exception | None = None) -> list[Any]:
    """Raise the compiled backward's exception (or ``cause``) saying why it was not recovered."""
    error = exc if exc is not None else cause
    if error is None:
        raise RuntimeError(f"ember.aotgrad: the gradients cannot be recomputed: {why}")
    error.add_note(f"ember.aotgrad: the compiled backward raised and its gradients could not be "
                   f"recomputed eagerly: {why}")
    raise error


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
        for device, state in states:
            if device.type == "cpu":
                torch.set_rng_state(state)
            else:
                torch.cuda.set_rng_state(state, device)
        yield
    finally:
        for device, state in now:
            if device.type == "cpu":
                torch.set_rng_state(state)
            else:
                torch.cuda.set_rng_state(state, device)


__all__ = ["BackwardFallback", "Kept"]
