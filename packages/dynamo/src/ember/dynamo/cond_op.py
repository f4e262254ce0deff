"""``torch.cond`` at run time: two torch ops that run one of two captured branches.

Capture (``variables.cond``) traces each branch of a ``torch.cond`` into its
own ``GraphModule`` whose inputs are the operands plus every tensor the branch
reads from outside (parameters, closed-over tensors), and registers the pair
here under a key. The graph then holds one node calling
``ember_dynamo::cond(pred, key, operands)``, an opaque op to every backend:

- at run time it runs the branch ``pred`` selects (eagerly, as a GraphModule);
- on fake tensors it runs the true branch (capture checked that both branches
  give the same shapes and dtypes);
- its gradient is ``ember_dynamo::cond_backward``, which runs the selected
  branch again under autograd and returns the operands' gradients, so
  ``aot_eager`` and ``inductor`` (an extern kernel each) differentiate through
  the branch that ran, never the other one.

Outputs are always fresh contiguous tensors, so the layout the fake run gives
is the layout the real run returns, and no output aliases an operand.

The key is a hash of the two graphs' code when that code is everything the
branches do (torch ops only), so a compile cache keyed by the ATen graph finds
the same branches again in a later process (where capture registers them
again before the graph runs); otherwise a per-process number is added.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx


@dataclass(frozen=True)
class Branch:
    """One branch: its graph and which of the op's operands it takes, in order."""

    graph: torch.fx.GraphModule
    inputs: tuple[int, ...]

    def __call__(self, operands: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        out = self.graph(*[operands[i] for i in self.inputs])
        return list(out)


#: key -> (true branch, false branch)
BRANCHES: dict[str, tuple[Branch, Branch]] = {}
_NUMBERS = itertools.count()


def register(true_branch: Branch, false_branch: Branch, pure: bool) -> str:
    """Register a pair of branches; returns the key the op is called with."""
    text = "\n".join(
        f"{b.inputs}\n{b.graph.code}" for b in (true_branch, false_branch)
    )
    key = hashlib.sha256(text.encode()).hexdigest()[:20]
    if not pure:
        key = f"{key}-{next(_NUMBERS)}"
    BRANCHES[key] = (true_branch, false_branch)
    return key


def _branches(key: str) -> tuple[Branch, Branch]:
    hit = BRANCHES.get(key)
    if hit is None:
        raise RuntimeError(
            f"ember_dynamo::cond: no branches registered under {key!r} in this process "
            "(the graph holding this torch.cond was not captured here)"
        )
    return hit


def _select(pred: torch.Tensor, key: str) -> Branch:
    true_branch, false_branch = _branches(key)
    return true_branch if bool(pred) else false_branch


def _fresh(outs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [o.clone(memory_format=torch.contiguous_format) for o in outs]


@torch.library.custom_op("ember_dynamo::cond", mutates_args=())
def cond(pred: torch.Tensor, key: str, operands: list[torch.Tensor]) -> list[torch.Tensor]:
    return _fresh(_select(pred, key)(operands))


@cond.register_fake
def _cond_fake(pred: torch.Tensor, key: str, operands: list[torch.Tensor]) -> list[torch.Tensor]:
    return _fresh(_branches(key)[0](operands))


def _differentiable(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


@torch.library.custom_op("ember_dynamo::cond_backward", mutates_args=())
def cond_backward(
    pred: torch.Tensor, key: str, operands: list[torch.Tensor], grads: list[torch.Tensor]
) -> list[torch.Tensor]:
    branch = _select(pred, key)
    wanted = [k for k, o in enumerate(operands) if _differentiable(o)]
    paired = [k for k, g in enumerate(grads) if _differentiable(g)]
    result = [torch.zeros_like(o) for o in operands]
    if not wanted or not paired:
        return result

    def run(*diff: torch.Tensor) -> tuple[torch.Tensor, ...]:
        args = list(operands)
        for k, d in zip(wanted, diff, strict=True):
            args[k] = d
        outs = branch(args)
        return tuple(outs[k] for k in paired)

    # torch.func.vjp, not torch.autograd.grad: a custom op's kernel runs below
    # autograd, where ops record no graph
    vjp = torch.func.vjp(run, *[operands[k] for k in wanted])[1]
    for k, g in zip(wanted, vjp(tuple(grads[k] for k in paired)), strict=True):
        result[k] = g.contiguous()
    return result


@cond_backward.register_fake
def _cond_backward_fake(
    pred: torch.Tensor, key: str, operands: list[torch.Tensor], grads: list[torch.Tensor]
) -> list[torch.Tensor]:
    return [torch.empty_like(o, memory_format=torch.contiguous_format) for o in operands]


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: list[torch.Tensor]) -> None:
    pred, key, operands = inputs
    ctx.key = key
    ctx.out_meta = [(o.shape, o.dtype, o.device) for o in output]
    ctx.save_for_backward(pred, *operands)


def _backward(ctx: Any, grads: list[torch.Tensor | None]) -> tuple[Any, ...]:
    pred, *operands = ctx.saved_tensors
    filled = [
        torch.zeros(shape, dtype=dtype, device=device) if g is None else g
        for g, (shape, dtype, device) in zip(grads, ctx.out_meta, strict=True)
    ]
    found = torch.ops.ember_dynamo.cond_backward(pred, ctx.key, operands, filled)
    return None, None, [g if _differentiable(o) else None for g, o in zip(found, operands, strict=True)]


cond.register_autograd(_backward, setup_context=_setup_context)


def call_cond(key: str, pred: torch.Tensor, operands: list[torch.Tensor]) -> list[torch.Tensor]:
    """What a captured graph's cond node calls (the op, with its key bound)."""
    return torch.ops.ember_dynamo.cond(pred, key, list(operands))  # type: ignore[no-any-return]
