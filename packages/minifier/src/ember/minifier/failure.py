"""What "still fails" means: a backend error, an inaccuracy, or a user predicate.

- `BackendError`: the backend raises at compile or run time. The first failure
  fixes a `Signature` (phase, exception type, normalized first message line),
  and later candidates only count when they fail with the same signature, so
  the minifier does not drift to a different bug.
- `Inaccuracy`: the backend's outputs differ from eager beyond tolerance,
  judged against a float64 eager reference, so float32 rounding noise in eager
  itself is not blamed on the backend.
- `Predicate`: any ``(gm, inputs) -> bool``.
"""

from __future__ import annotations

import copy
import re
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_leaves

from ember.minifier.backends import BackendFn, as_callable, backend_label, call_compiled
from ember.minifier.state import State, fresh_module, run_eager

_ADDR = re.compile(r"0x[0-9a-fA-F]+")
_NUM = re.compile(r"\d+")


def normalize_message(message: str) -> str:
    """First line of an error message with addresses and numbers masked."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    return _NUM.sub("#", _ADDR.sub("<addr>", first))[:300]


@dataclass(frozen=True, slots=True)
class Signature:
    """Where and how a backend failed: ``phase`` is ``compile``, ``run`` or ``crash``."""

    phase: str
    exc_type: str
    message: str

    @staticmethod
    def of(phase: str, exc: BaseException) -> Signature:
        t = type(exc)
        return Signature(phase, f"{t.__module__}.{t.__qualname__}", normalize_message(str(exc)))

    def __str__(self) -> str:
        return f"{self.exc_type} at {self.phase} time: {self.message}"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one check: did it fail as wanted, a one-line why, and the error seen."""

    failed: bool
    detail: str
    signature: Signature | None = None


def fresh_inputs(inputs: Sequence[Any]) -> list[Any]:
    """Copies of the example inputs: a graph may mutate its inputs in place."""
    return [
        x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
        for x in inputs
    ]


def _run_backend(backend: BackendFn, state: State) -> tuple[str, Any]:
    """Compile and run; returns ``("ok", outputs)`` or ``(phase, exception)``."""
    gm = fresh_module(state.gm)
    inputs = fresh_inputs(state.inputs)
    try:
        compiled = backend(gm, inputs)
    except Exception as exc:
        return "compile", exc
    try:
        return "ok", call_compiled(compiled, inputs)
    except Exception as exc:
        return "run", exc


@dataclass(frozen=True, slots=True)
class BackendError:
    """The backend raises. ``signature`` is ``None`` until `detect` fixes it."""

    backend: str | BackendFn
    signature: Signature | None = None

    def describe(self) -> str:
        what = str(self.signature) if self.signature else "any exception"
        return f"{backend_label(self.backend)} raises {what}"

    def check(self, state: State) -> Verdict:
        phase, result = _run_backend(as_callable(self.backend), state)
        if phase == "ok":
            return Verdict(False, "compiled and ran without error")
        sig = Signature.of(phase, result)
        if self.signature is None or sig == self.signature:
            return Verdict(True, str(sig), sig)
        return Verdict(False, f"a different error: {sig}", sig)


def _rel_rms(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.detach(), ref.detach()
    diff = (x.double() - ref.double()).nan_to_num(0.0)
    scale = float(ref.double().nan_to_num(0.0).pow(2).mean().sqrt())
    return float(diff.pow(2).mean().sqrt()) / max(scale, 1e-30)


def compare_outputs(
    res: Any, eager: Any, ref64: Any | None, tol: float, multiplier: float
) -> str | None:
    """Why ``res`` is inaccurate, or ``None`` when it is within tolerance.

    A floating output fails when its relative RMS error against the float64
    reference exceeds ``multiplier * (eager's own error) + tol``; non-floating
    outputs must match eager exactly.
    """
    r, e = tree_leaves(res), tree_leaves(eager)
    f = tree_leaves(ref64) if ref64 is not None else e
    if len(r) != len(e):
        return f"the backend returned {len(r)} outputs, eager {len(e)}"
    for i, (a, b, c) in enumerate(zip(r, e, f, strict=True)):
        if not isinstance(b, torch.Tensor):
            if a != b:
                return f"output {i}: {a!r} != eager {b!r}"
            continue
        if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return f"output {i}: got {_meta(a)}, eager gave {_meta(b)}"
        if not b.is_floating_point() and not b.is_complex():
            if not torch.equal(a, b):
                return f"output {i} ({b.dtype}) differs from eager"
            continue
        if not torch.equal(a.isnan(), c.isnan()):
            return f"output {i}: NaN where the float64 reference has none (or the reverse)"
        res_err = _rel_rms(a, c)
        ref_err = _rel_rms(b, c) if ref64 is not None else 0.0
        if res_err > multiplier * ref_err + tol:
            return (
                f"output {i}: relative RMS error {res_err:.3g} vs float64 eager, "
                f"eager float32 has {ref_err:.3g} (tolerance {multiplier:g}x + {tol:g})"
            )
    return None


def _meta(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"{x.dtype} {tuple(x.shape)}"
    return type(x).__name__


def _to64(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.detach().to(torch.float64)
    return x


def float64_reference(gm: fx.GraphModule, inputs: Sequence[Any]) -> Any | None:
    """Run ``gm`` in float64 (parameters, buffers and floating inputs); ``None`` if it can't."""
    try:
        gm64 = copy.deepcopy(gm).to(torch.float64)
        return run_eager(gm64, [_to64(x) for x in inputs])
    except Exception:
        return None


@dataclass(frozen=True, slots=True)
class Inaccuracy:
    """The backend's outputs differ from eager beyond tolerance (see `compare_outputs`)."""

    backend: str | BackendFn
    tol: float = 1e-5
    multiplier: float = 2.0

    def describe(self) -> str:
        return f"{backend_label(self.backend)} is inaccurate (tolerance {self.tol:g})"

    def check(self, state: State) -> Verdict:
        phase, res = _run_backend(as_callable(self.backend), state)
        if phase != "ok":
            sig = Signature.of(phase, res)
            return Verdict(False, f"raised instead (not an accuracy failure): {sig}")
        try:
            eager = run_eager(state.gm, fresh_inputs(state.inputs))
        except Exception as exc:
            return Verdict(False, f"eager itself fails: {type(exc).__name__}: {exc}")
        ref64 = float64_reference(state.gm, state.inputs)
        why = compare_outputs(res, eager, ref64, self.tol, self.multiplier)
        return Verdict(why is not None, why or "outputs match eager within tolerance")


@dataclass(frozen=True, slots=True)
class Predicate:
    """A user check ``fn(gm, inputs) -> bool``: true means "still fails"."""

    fn: Callable[[fx.GraphModule, list[Any]], bool]
    label: str = "user predicate"

    def describe(self) -> str:
        return self.label

    def check(self, state: State) -> Verdict:
        try:
            failed = bool(self.fn(fresh_module(state.gm), list(state.inputs)))
        except Exception as exc:
            tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
            return Verdict(False, f"the predicate raised {tb}")
        return Verdict(failed, "predicate is true" if failed else "predicate is false")


Failure = BackendError | Inaccuracy | Predicate
"""Every failure kind has ``check(state) -> Verdict`` and ``describe() -> str``."""


def as_failure(is_failing: Failure | Callable[[fx.GraphModule, list[Any]], bool]) -> Failure:
    if isinstance(is_failing, (BackendError, Inaccuracy, Predicate)):
        return is_failing
    return Predicate(is_failing, getattr(is_failing, "__qualname__", "user predicate"))
