"""Run a compiled forward/backward pair as if it were the original function.

:class:`CompiledPlan` holds the compiled callables and the bookkeeping from
tracing. Calling it:

1. runs the forward inside one ``autograd.Function`` (training) or directly
   (inference); the forward returns ``mutated inputs' new values + user
   outputs + saved values``;
2. copies the new values into the mutated inputs (through autograd when the
   value is differentiable, as eager's in-place op would be);
3. assembles the user's outputs, rebuilding outputs that were views of an
   input as views of the real input, so they stay views.

Random ops run only in the compiled forward, in eager's order, and their
results (dropout masks) are saved rather than recomputed, so a fixed seed
gives the same numbers as eager.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ember.aotgrad.errors import DoubleBackwardError
from ember.aotgrad.joint import OutputSlot

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

    @property
    def num_fw_outputs(self) -> int:
        return len(self.mutated_inputs) + self.num_user_outputs

    def __call__(self, inputs: Sequence[torch.Tensor]) -> list[Any]:
        if self.backward is None:
            with torch.no_grad():
                fw = list(self.forward(*inputs))
        else:
            fw = list(_CompiledFunction.apply(self, *inputs))  # type: ignore[no-untyped-call]
        self._write_back(inputs, fw)
        return self._assemble(inputs, fw[len(self.mutated_inputs):])

    def _write_back(self, inputs: Sequence[torch.Tensor], fw: list[Any]) -> None:
        for k, i in enumerate(self.mutated_inputs):
            new = fw[k]
            if isinstance(new, torch.Tensor) and new.requires_grad and torch.is_grad_enabled():
                inputs[i].copy_(new)
            else:
                with torch.no_grad():
                    inputs[i].copy_(new)

    def _assemble(self, inputs: Sequence[torch.Tensor], user: list[Any]) -> list[Any]:
        out: list[Any] = []
        for slot in self.outputs:
            if slot.kind == "graph":
                out.append(user[slot.index])
            elif slot.kind == "input":
                out.append(inputs[slot.index])
            elif slot.kind == "alias":
                assert slot.layout is not None
                size, stride, offset = slot.layout
                out.append(inputs[slot.index].as_strided(size, stride, offset))
            else:
                out.append(slot.value)
        return out


class _CompiledFunction(torch.autograd.Function):
    """Forward and backward of one compiled graph pair, as one autograd node."""

    @staticmethod
    def forward(ctx: Any, plan: CompiledPlan, *inputs: torch.Tensor) -> tuple[Any, ...]:
        values = list(plan.forward(*inputs))
        n = plan.num_fw_outputs
        fw, saved = values[:n], values[n:]
        ctx.plan = plan
        # saved sizes (ints, for symbolic shapes) travel beside the saved tensors
        ctx.save_for_backward(*[v for v in saved if isinstance(v, torch.Tensor)])
        ctx.saved_sizes = [(i, v) for i, v in enumerate(saved) if not isinstance(v, torch.Tensor)]
        no_grad = [v for v, m in zip(fw, plan.tangent_mask)
                   if isinstance(v, torch.Tensor) and not m]
        if no_grad:
            ctx.mark_non_differentiable(*no_grad)
        return tuple(fw)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        plan: CompiledPlan = ctx.plan
        if torch.is_grad_enabled():
            raise DoubleBackwardError(
                "double backward through a function compiled by ember.aotgrad is not "
                "supported (backward was called with create_graph=True). Run that part "
                "eagerly, or compute the higher-order gradient without compiling it."
            )
        assert plan.backward is not None
        tangents = [g.contiguous() for g, m in zip(grads, plan.tangent_mask) if m]
        saved = list(ctx.saved_tensors)
        for i, v in ctx.saved_sizes:
            saved.insert(i, v)
        in_grads = list(plan.backward(*saved, *tangents))
        result: list[torch.Tensor | None] = [None] * (1 + plan.num_inputs)
        for pos, g in zip(plan.grad_inputs, in_grads):
            result[1 + pos] = g
        return tuple(result)
