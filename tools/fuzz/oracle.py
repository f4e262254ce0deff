"""Run one program eagerly and compiled, and check everything eager makes observable.

Per call (the first call compiles, the second, on other values of the same
layouts, runs what was cached; with ``resize``, two more calls on inputs whose sizes
above 1 grew by 2 and then by 3, which a compiler must handle by recompiling or by
symbolic sizes):

- exceptions: compiled code raises exactly when eager does;
- the output structure (tuple/list/None/Python values) and, per tensor output,
  dtype, shape, ``requires_grad``, values (float mismatches re-judged in
  float64, see ``compare.py``) and the strides of dims with size > 1;
- aliasing: which inputs each output shares memory with, at which storage
  offset and strides, and which outputs share memory with each other;
- mutations: every input's whole storage and its size/stride/offset afterwards;
- gradients: a weighted sum of the differentiable outputs is backpropagated
  (as a training step would), and every leaf's ``.grad`` is compared.

The first difference found is the outcome; its ``kind`` names the class.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from .backends import Backend
from .compare import (
    Verdict,
    compare_values,
    shares_storage,
    significant_strides,
    storage_view,
)
from .inputs import InputSpec, build_inputs, resized
from .program import Program

SECOND_SEED = 7919


@dataclass(frozen=True, slots=True)
class Outcome:
    """``status``: ok | wrong (a silent wrong result) | error (compiled raised, eager did not)
    | invalid (eager itself fails on the generated inputs)."""

    status: str
    kind: str = ""
    detail: str = ""

    @property
    def signature(self) -> str:
        """What groups failures of one class (the kind, and an error's type)."""
        if self.status == "error":
            return f"error:{self.kind}"
        return f"{self.status}:{self.kind}" if self.kind else self.status


class Mismatch(Exception):
    def __init__(self, status: str, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.outcome = Outcome(status, kind, detail)


def differentiable_outputs(out: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(out)[0]
            if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]


def weighted_loss(tensors: list[torch.Tensor]) -> torch.Tensor:
    """sum_k (t_k * w_k).sum(): fixed weights, so every element's gradient differs."""
    total: torch.Tensor | None = None
    for k, t in enumerate(tensors):
        w = torch.cos(torch.arange(t.numel(), dtype=torch.float64) * 0.7 + k)
        term = (t * w.to(t.dtype).view(t.shape)).sum()
        total = term if total is None else total + term.to(total.dtype)
    assert total is not None
    return total


def _call(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> tuple[Any, BaseException | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*inputs), None
        except Exception as e:  # compared with what the other side raised
            return None, e


def _err(e: BaseException) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first[:300]}"


class _Call:
    """One call's eager and compiled sides, with a lazily computed float64 reference."""

    def __init__(self, program: Program, fn: Callable[..., Any], compiled: Callable[..., Any],
                 seed: int, specs: list[InputSpec] | None = None) -> None:
        self.program, self.fn, self.compiled, self.seed = program, fn, compiled, seed
        self.specs = specs = list(program.inputs) if specs is None else specs
        self.in_e, self.leaves_e = build_inputs(specs, seed)
        self.in_c, self.leaves_c = build_inputs(specs, seed)
        self.before = [(t.shape, t.stride(), t.storage_offset()) for t in self.in_e]
        self._ref: tuple[list[Any], list[torch.Tensor], list[torch.Tensor | None]] | None = None
        #: eager on contiguous copies of the inputs (computed on a mismatch)
        self.eager_contiguous: tuple[list[Any], list[torch.Tensor | None]] | None = None

    def reference(self) -> tuple[list[Any], list[torch.Tensor], list[torch.Tensor | None]]:
        """(outputs, inputs after the call, leaf grads) of eager on float64 inputs."""
        if self._ref is None:
            ins, leaves = build_inputs(self.specs, self.seed, upcast=True)
            out, exc = _call(self.fn, ins)
            grads: list[torch.Tensor | None] = [None] * len(leaves)
            if exc is None and self.program.backward:
                diff = differentiable_outputs(out)
                try:
                    if diff:
                        weighted_loss(diff).backward()  # type: ignore[no-untyped-call]
                    grads = [leaf.grad for leaf in leaves]
                except Exception:
                    pass
            self._ref = (tree_flatten(out)[0] if exc is None else [], ins, grads)
        return self._ref

    def judge(self, kind: str, where: str, e: torch.Tensor, c: torch.Tensor,
              ref: Callable[[], torch.Tensor | None]) -> None:
        v: Verdict = compare_values(e, c)
        if not v.ok and v.needs_reference:
            try:
                r = ref()
            except Exception:
                r = None
            if r is not None and r.shape == e.shape:
                v = compare_values(e, c, r)
        if not v.ok:
            raise Mismatch("wrong", kind, f"{where}: {v.detail}")


#: how much the sizes above 1 grow in the calls ``resize`` adds
RESIZE_GROWTH = (2, 3)


def call_specs(program: Program, calls: int = 2, resize: bool = False) -> list[list[InputSpec]]:
    """The input specs of each call ``check`` makes."""
    specs = list(program.inputs)
    return [specs] * calls + ([resized(specs, g) for g in RESIZE_GROWTH] if resize else [])


def check(program: Program, backend: Backend, calls: int = 2, resize: bool = False) -> Outcome:
    """Compile ``program`` with ``backend`` and compare it with eager over ``calls`` calls
    (and, with ``resize``, two more on grown inputs)."""
    fn = program.make_fn()
    try:
        compiled = backend.compile(program.make_fn())
    except Exception as e:
        return Outcome("error", f"compile {type(e).__name__}", _err(e))
    try:
        for k, specs in enumerate(call_specs(program, calls, resize)):
            c = _Call(program, fn, compiled, program.seed + k * SECOND_SEED, specs)
            _check_call(c, k, sizes="" if k < calls else f" (sizes +{RESIZE_GROWTH[k - calls]})")
    except Mismatch as m:
        return m.outcome
    return Outcome("ok")


def _check_call(c: _Call, k: int, sizes: str = "") -> None:
    out_e, exc_e = _call(c.fn, c.in_e)
    out_c, exc_c = _call(c.compiled, c.in_c)
    tag = f"call {k + 1}{sizes}"
    if exc_e is not None and k == 0:
        raise Mismatch("invalid", "eager raised", _err(exc_e))
    if exc_e is not None or exc_c is not None:
        if exc_e is None:
            assert exc_c is not None
            raise Mismatch("error", type(exc_c).__name__, f"{tag}: {_err(exc_c)}")
        if exc_c is None:
            raise Mismatch("wrong", "no exception", f"{tag}: eager raised {_err(exc_e)}")
        return
    flat_e, spec_e = tree_flatten(out_e)
    flat_c, spec_c = tree_flatten(out_c)
    if spec_e != spec_c:
        raise Mismatch("wrong", "structure", f"{tag}: returned {spec_c}, eager {spec_e}")
    _check_outputs(c, tag, flat_e, flat_c, values=False)
    _check_aliasing(c, tag, flat_e, flat_c)
    _check_outputs(c, tag, flat_e, flat_c, values=True)
    _check_inputs(c, tag)
    if c.program.backward:
        _check_grads(c, tag, out_e, out_c)


def _check_outputs(c: _Call, tag: str, flat_e: list[Any], flat_c: list[Any], *,
                   values: bool) -> None:
    """Types, dtypes, shapes and requires_grad (``values=False``); then values and strides."""
    for i, (e, o) in enumerate(zip(flat_e, flat_c)):
        where = f"{tag} output {i}"
        if values:
            if isinstance(e, torch.Tensor):
                _check_tensor_values(c, where, i, e, o)
            continue
        if not isinstance(e, torch.Tensor):
            same = (e == o) if not isinstance(e, float) else (
                e == o or (math.isnan(e) and isinstance(o, float) and math.isnan(o)))
            if type(e) is not type(o) or not same:
                raise Mismatch("wrong", "python value", f"{where}: {o!r}, eager {e!r}")
            continue
        if not isinstance(o, torch.Tensor):
            raise Mismatch("wrong", "structure", f"{where}: {type(o).__name__}, eager a tensor")
        if o.dtype != e.dtype:
            raise Mismatch("wrong", "dtype", f"{where}: {o.dtype}, eager {e.dtype}")
        if o.shape != e.shape:
            raise Mismatch("wrong", "shape", f"{where}: {tuple(o.shape)}, eager {tuple(e.shape)}")
        if o.requires_grad != e.requires_grad:
            raise Mismatch("wrong", "requires_grad",
                           f"{where}: requires_grad={o.requires_grad}, eager {e.requires_grad}")


def _check_tensor_values(c: _Call, where: str, i: int, e: torch.Tensor, o: torch.Tensor) -> None:
    def ref() -> torch.Tensor | None:
        outs = c.reference()[0]
        r = outs[i] if i < len(outs) else None
        return r if isinstance(r, torch.Tensor) else None

    try:
        c.judge("value", where, e, o, ref)
    except Mismatch as m:
        _excuse_if_eager_depends_on_layout(c, m, e, o, lambda got: got[0][i])
        raise
    if significant_strides(o) != significant_strides(e):
        raise Mismatch("wrong", "stride", f"{where}: strides {o.stride()}, eager {e.stride()}")


def _check_aliasing(c: _Call, tag: str, flat_e: list[Any], flat_c: list[Any]) -> None:
    tensors = [(i, e, o) for i, (e, o) in enumerate(zip(flat_e, flat_c))
               if isinstance(e, torch.Tensor)]
    for i, e, o in tensors:
        alias_e = [j for j, x in enumerate(c.in_e) if shares_storage(e, x)]
        alias_c = [j for j, x in enumerate(c.in_c) if shares_storage(o, x)]
        if alias_e != alias_c:
            raise Mismatch("wrong", "alias",
                           f"{tag} output {i} aliases inputs {alias_c}, eager {alias_e}")
        if alias_e and (o.storage_offset(), significant_strides(o)) != (
                e.storage_offset(), significant_strides(e)):
            raise Mismatch("wrong", "alias layout",
                           f"{tag} output {i}: a view at offset {o.storage_offset()} strides "
                           f"{o.stride()}, eager's at {e.storage_offset()} {e.stride()}")
    for a in range(len(tensors)):
        for b in range(a + 1, len(tensors)):
            (i, e1, o1), (j, e2, o2) = tensors[a], tensors[b]
            if shares_storage(e1, e2) != shares_storage(o1, o2):
                raise Mismatch("wrong", "output alias",
                               f"{tag} outputs {i} and {j} share memory: "
                               f"{shares_storage(o1, o2)}, eager {shares_storage(e1, e2)}")


def _check_inputs(c: _Call, tag: str) -> None:
    for j, (xe, xc) in enumerate(zip(c.in_e, c.in_c)):
        name = c.specs[j].name
        meta_e = (xe.shape, xe.stride(), xe.storage_offset())
        meta_c = (xc.shape, xc.stride(), xc.storage_offset())
        if meta_e != meta_c:
            raise Mismatch("wrong", "input metadata",
                           f"{tag} input {name}: size/stride/offset {meta_c}, eager {meta_e}")

        def ref(j: int = j) -> torch.Tensor | None:
            return storage_view(c.reference()[1][j])

        c.judge("mutation", f"{tag} input {name} (its storage)", storage_view(xe),
                storage_view(xc), ref)


def _check_grads(c: _Call, tag: str, out_e: Any, out_c: Any) -> None:
    diff_e, diff_c = differentiable_outputs(out_e), differentiable_outputs(out_c)
    if not diff_e:
        return
    errors: list[BaseException | None] = []
    for diff in (diff_e, diff_c):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                weighted_loss(diff).backward()  # type: ignore[no-untyped-call]
            errors.append(None)
        except Exception as e:
            errors.append(e)
    err_e, err_c = errors
    if err_e is not None or err_c is not None:
        if err_e is None:
            assert err_c is not None
            raise Mismatch("error", f"backward {type(err_c).__name__}", f"{tag}: {_err(err_c)}")
        if err_c is None:
            raise Mismatch("wrong", "no exception",
                           f"{tag}: eager's backward raised {_err(err_e)}")
        return
    for k, (le, lc) in enumerate(zip(c.leaves_e, c.leaves_c)):
        ge, gc = le.grad, lc.grad
        where = f"{tag} gradient of leaf {k}"
        if (ge is None) != (gc is None):
            raise Mismatch("wrong", "grad", f"{where}: {'None' if gc is None else 'a tensor'}, "
                                            f"eager {'None' if ge is None else 'a tensor'}")
        if ge is None or gc is None:
            continue
        if ge.shape != gc.shape or ge.dtype != gc.dtype:
            raise Mismatch("wrong", "grad", f"{where}: {gc.dtype}{tuple(gc.shape)}, "
                                            f"eager {ge.dtype}{tuple(ge.shape)}")

        def ref(k: int = k) -> torch.Tensor | None:
            return c.reference()[2][k]

        try:
            c.judge("grad", where, ge, gc, ref)
        except Mismatch as m:
            def grad_of(got: Any, k: int = k) -> Any:
                return got[1][k]

            _excuse_if_eager_depends_on_layout(c, m, ge, gc, grad_of)
            raise


def _close(a: Any, b: Any) -> bool:
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
            and a.dtype == b.dtype and bool(torch.allclose(
                a.detach().double(), b.detach().double(), rtol=1e-4, atol=1e-5, equal_nan=True)))


def _eager_on_contiguous(c: _Call) -> tuple[list[Any], list[torch.Tensor | None]] | None:
    """(flat outputs, leaf grads) of eager on this call's values in contiguous inputs; None
    when inputs that take gradients are not leaves themselves, or eager raises."""
    specs = c.specs
    if any(s.grad == "nonleaf" for s in specs):
        return None
    ins, leaves = build_inputs(list(specs), c.seed)
    flat = [x.detach().contiguous().requires_grad_(x.requires_grad) for x in ins]
    where = [next((j for j, x in enumerate(ins) if x is leaf), None) for leaf in leaves]
    if any(j is None for j in where):
        return None
    out, exc = _call(c.fn, flat)
    if exc is not None:
        return None
    grads: list[torch.Tensor | None] = [None] * len(leaves)
    diff = differentiable_outputs(out)
    if c.program.backward and diff:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                weighted_loss(diff).backward()  # type: ignore[no-untyped-call]
        except Exception:
            return None
        grads = [flat[j].grad for j in where if j is not None]
    return tree_flatten(out)[0], grads


def _excuse_if_eager_depends_on_layout(c: _Call, m: Mismatch, e: torch.Tensor, got: torch.Tensor,
                                       pick: Callable[[tuple[list[Any], list[Any]]], Any]) -> None:
    """Turn a mismatch into ``invalid`` when eager itself gives another result for the same
    values in contiguous inputs and the compiled result is that one.

    Eager is then not a reference for this program: ``median(dim)`` of an expanded
    (stride-0) input returns wrong values and indices on CPU (seed 3137: the median of
    four copies of 0.8033 comes out 0.1748, the next row's value), and a compiler that
    reads such an input as a contiguous copy computes the right one.
    """
    if c.eager_contiguous is None:
        c.eager_contiguous = _eager_on_contiguous(c) or ([], [])
    got_c = c.eager_contiguous
    if not got_c[0] and not got_c[1]:
        return
    try:
        other = pick(got_c)
    except IndexError:
        return
    if _close(other, got) and not _close(other, e):
        raise Mismatch("invalid", "eager depends on layout",
                       f"{m.outcome.detail} (eager on contiguous copies of the inputs agrees "
                       "with the compiled result)") from None
