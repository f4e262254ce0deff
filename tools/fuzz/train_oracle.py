"""Train one program eagerly and compiled at its growing lengths, and compare every step.

Two copies of the same model, one called eagerly and one through the compiler
under test (compiled once, as a user compiles a model, with the default
``dynamic=None``: the first length compiles a static graph, the second marks the
length dynamic). At each length: the outputs (shape, dtype, values), then a
weighted sum of the differentiable outputs is backpropagated and every
parameter's and input's gradient is compared; then both copies take the same
SGD step, so the next length runs on updated weights. A float mismatch is
re-judged against the same step in float64 (``compare.py``'s rule).

Exceptions: compiled code raising where eager does not, in the forward or the
backward, is an ``error`` (an internal error that reached the caller). A graph
that ember ran eagerly after an internal error it caught (a logged fallback) is
not a failure; the record counts those warnings (``fallbacks``) so a run can
report them.
"""

from __future__ import annotations

import copy
import logging
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from .backends import Backend
from .compare import compare_values
from .oracle import Mismatch, Outcome, differentiable_outputs, weighted_loss
from .train_gen import TrainProgram

LR = 0.05


class _Counter(logging.Handler):
    """Counts the warnings ember logs (graphs it ran eagerly after an internal error)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _err(e: BaseException) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first[:300]}"


def _step(model: Callable[..., Any], inputs: list[torch.Tensor],
          leaves: list[torch.Tensor], params: list[nn.Parameter]) -> tuple[Any, Any, list[Any]]:
    """(outputs, exception, gradients of params then leaves) of one training step."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = model(*inputs)
        except Exception as e:
            return None, ("forward", e), []
        try:
            diff = differentiable_outputs(out)
            if diff:
                weighted_loss(diff).backward()  # type: ignore[no-untyped-call]
        except Exception as e:
            return out, ("backward", e), []
    grads = [p.grad.detach().clone() if p.grad is not None else None for p in params]
    grads += [t.grad.detach().clone() if t.grad is not None else None for t in leaves]
    return out, None, grads


def _sgd(params: list[nn.Parameter]) -> None:
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.sub_(LR * p.grad)
                p.grad = None


def check_train(program: TrainProgram, backend: Backend) -> tuple[Outcome, list[str]]:
    """The first difference over the three lengths (or ok), and ember's logged fallbacks."""
    counter = _Counter()
    ember_log = logging.getLogger("ember")
    previous = logging.root.manager.disable
    ember_log.addHandler(counter)
    propagate, ember_log.propagate = ember_log.propagate, False
    logging.disable(logging.NOTSET)
    try:
        return _check(program, backend), counter.messages
    finally:
        logging.disable(previous)
        ember_log.propagate = propagate
        ember_log.removeHandler(counter)


class _Reference:
    """The step in float64 from the weights before it (computed on the first mismatch)."""

    def __init__(self, snapshot: nn.Module, make_inputs: Callable[..., Any], batch: int,
                 length: int, seed: int) -> None:
        self.args = (snapshot, make_inputs, batch, length, seed)
        self.values: list[Any] | None = None
        self.done = False

    def __call__(self, i: int) -> torch.Tensor | None:
        if not self.done:
            self.values, self.done = _float64_step(*self.args), True
        got = self.values
        value = got[i] if got is not None and i < len(got) else None
        return value if isinstance(value, torch.Tensor) else None


def _check(program: TrainProgram, backend: Backend) -> Outcome:
    eager, make_inputs = program.build()
    model = copy.deepcopy(eager)
    try:
        compiled = backend.compile(model)
    except Exception as e:
        return Outcome("error", f"compile {type(e).__name__}", _err(e))
    p_eager = list(eager.parameters())
    p_model = list(model.parameters())
    names = [n for n, _ in eager.named_parameters()]
    try:
        for k, (batch, length) in enumerate(zip(program.batches(), program.lengths)):
            tag = f"length {length} (call {k + 1})" + (f", batch {batch}" if program.grow_batch else "")
            seed = program.seed * 1000 + k
            ref = _Reference(copy.deepcopy(eager), make_inputs, batch, length, seed)
            ins_e, leaves_e = make_inputs(batch, length, seed)
            ins_c, leaves_c = make_inputs(batch, length, seed)
            out_e, exc_e, grads_e = _step(eager, ins_e, leaves_e, p_eager)
            out_c, exc_c, grads_c = _step(compiled, ins_c, leaves_c, p_model)
            if exc_e is not None:
                raise Mismatch("invalid", "eager raised", f"{tag}: {exc_e[0]} {_err(exc_e[1])}")
            if exc_c is not None:
                where, exc = exc_c
                kind = type(exc).__name__ if where == "forward" else f"backward {type(exc).__name__}"
                raise Mismatch("error", kind, f"{tag}: {_err(exc)}")
            labels = names + [f"input {j}" for j in range(len(leaves_e))]
            _compare_step(tag, ref, out_e, out_c, grads_e, grads_c, labels)
            _sgd(p_eager)
            _sgd(p_model)
            # the next length starts from eager's weights: rounding differences of one step
            # must not compound through the updates into a verdict on the next one (the
            # compiled code still reads weights updated in place, as in training)
            with torch.no_grad():
                for p, q in zip(p_model, p_eager, strict=True):
                    p.copy_(q)
    except Mismatch as m:
        return m.outcome
    return Outcome("ok")


def _compare_step(tag: str, ref: _Reference, out_e: Any, out_c: Any, grads_e: list[Any],
                  grads_c: list[Any], labels: list[str]) -> None:
    flat_e = [t for t in out_e if isinstance(t, torch.Tensor)]
    flat_c = [t for t in out_c if isinstance(t, torch.Tensor)]
    if len(flat_e) != len(flat_c):
        raise Mismatch("wrong", "structure", f"{tag}: {len(flat_c)} outputs, eager {len(flat_e)}")
    for i, (e, c) in enumerate(zip(flat_e, flat_c)):
        if (c.shape, c.dtype, c.requires_grad) != (e.shape, e.dtype, e.requires_grad):
            raise Mismatch("wrong", "output metadata",
                           f"{tag} output {i}: {c.dtype}{tuple(c.shape)} requires_grad="
                           f"{c.requires_grad}, eager {e.dtype}{tuple(e.shape)} "
                           f"requires_grad={e.requires_grad}")
        _judge("value", f"{tag} output {i}", e, c, ref, i)
    for j, (ge, gc) in enumerate(zip(grads_e, grads_c)):
        where = f"{tag} gradient of {labels[j]}"
        if (ge is None) != (gc is None):
            raise Mismatch("wrong", "grad", f"{where}: {'None' if gc is None else 'a tensor'}, "
                                            f"eager {'None' if ge is None else 'a tensor'}")
        if ge is not None:
            _judge("grad", where, ge, gc, ref, len(flat_e) + j)


def _judge(kind: str, where: str, e: torch.Tensor, c: torch.Tensor, ref: _Reference,
           index: int) -> None:
    v = compare_values(e, c)
    if not v.ok and v.needs_reference:
        try:
            r = ref(index)
        except Exception:
            r = None
        if r is not None and r.shape == e.shape:
            v = compare_values(e, c, r)
    if not v.ok:
        raise Mismatch("wrong", kind, f"{where}: {v.detail}")


def _float64_step(snapshot: nn.Module, make_inputs: Callable[..., Any], batch: int,
                  length: int, seed: int) -> list[Any] | None:
    """Outputs then gradients (parameters, then inputs) of the step in float64."""
    model = copy.deepcopy(snapshot).double()
    ins, leaves = make_inputs(batch, length, seed, upcast=True)
    out, exc, grads = _step(model, ins, leaves, list(model.parameters()))
    if exc is not None:
        return None
    return [t for t in out if isinstance(t, torch.Tensor)] + grads


__all__ = ["check_train"]
