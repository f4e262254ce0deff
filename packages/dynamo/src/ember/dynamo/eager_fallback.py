"""Internal errors never reach the user: a graph whose compile or compiled code fails runs eagerly.

Two places can fail after capture succeeded:

- the backend, compiling a graph (a bug in aotgrad or inductor, a backend that
  rejects the graph): the graph then runs as captured, with PyTorch eager;
- the compiled code, when called: if it raises, the graph is run eagerly on the
  same inputs. If eager raises too, the exception is the program's own (a shape
  mismatch, an index out of range) and eager's exception propagates unchanged;
  if eager succeeds, the compiled code was wrong to raise: the reason is logged
  and this graph runs eagerly from then on. Only where no input was written
  before the exception, though: a graph that changes its inputs in place may
  have had a kernel write one before a later kernel raised, and running it
  again would apply that write twice (``x.mul_(2)`` quadrupling ``x``: a wrong
  result). The layers below say on the exception whether an input was written
  (``ember.ir.updates.inputs_written``); where one was, or where nobody says and
  the graph writes inputs, the exception is raised, with a note, and the graph
  runs eagerly from the next call on.

How these wrappers compose around a backend's result, and the backend call that may
fail, are in ``compiled_graph.py``.

Failures of capture itself (not graph breaks) are handled by the runtime
(``function_entry.py``): the frame runs eagerly. With ``strict`` (the
``strict`` option, or ``EMBER_STRICT=1``) every such error is raised instead,
so ember's own tests see its bugs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ember import guards, ir
from ember.ir.logs import reason
from ember.ir.updates import inputs_written

from .logs import get_logger

log_dynamo = get_logger("dynamo")

#: The ``GraphModule.meta`` key holding the positions of the inputs the graph changes in place.
MUTATED_INPUTS_KEY = "ember_mutated_inputs"


def set_mutated_inputs(gm: torch.fx.GraphModule, mutated: tuple[int, ...]) -> None:
    """Record on ``gm`` which of its inputs it changes in place (read by ``EagerOnError``)."""
    gm.meta[MUTATED_INPUTS_KEY] = tuple(mutated)


def may_have_written(gm: torch.fx.GraphModule, exc: BaseException) -> bool:
    """Whether the compiled call of ``gm`` that raised ``exc`` may have written an input:
    what the layers below said, else whether ``gm`` writes any (unknown: it may)."""
    said = inputs_written(exc)
    if said is not None:
        return said
    mutated = gm.meta.get(MUTATED_INPUTS_KEY)
    return mutated is None or bool(mutated)


class EagerOnError:
    """Runs ``compiled``; where it raises and ``gm`` run eagerly does not, runs ``gm``."""

    def __init__(self, compiled: Callable[..., Any], gm: torch.fx.GraphModule, name: str) -> None:
        self.compiled = compiled
        self.gm = gm
        self.name = name
        self.failed: str | None = None  # why compiled code is no longer called

    def __call__(self, *args: Any) -> Any:
        if self.failed is not None:
            return self.gm(*args)
        try:
            return self.compiled(*args)
        except Exception as exc:
            if may_have_written(self.gm, exc):
                # the compiled call may have written an input already: running the graph
                # again would write it twice, so the exception is the user's to see
                self.failed = reason(exc)
                log_dynamo.warning(
                    "compiled code of %s raised %s after it may have written an input in "
                    "place; not running it again eagerly (the write would apply twice), the "
                    "exception propagates and that graph runs eagerly from the next call on",
                    self.name,
                    self.failed,
                    exc_info=log_dynamo.isEnabledFor(10),
                )
                exc.add_note(
                    f"ember: raised by the compiled code of {self.name} after it may have "
                    "written an input in place, so it was not run again eagerly; the graph "
                    "runs eagerly from the next call on"
                )
                raise
            try:
                out = self.gm(*args)
            except Exception as eager_exc:
                raise eager_exc from None  # the program's own error: as eager raises it
            self.failed = reason(exc)
            log_dynamo.warning(
                "compiled code of %s raised %s where eager does not; running that graph "
                "eagerly from now on (strict=True or EMBER_STRICT=1 raises instead)",
                self.name,
                self.failed,
                exc_info=log_dynamo.isEnabledFor(10),
            )
            return out

    def __getattr__(self, name: str) -> Any:
        # what the backend returned stays inspectable (``report``, ``code``, ...)
        if name in ("compiled", "gm", "name", "failed"):
            raise AttributeError(name)
        return getattr(self.compiled, name)


class AliasChecked:
    """``compiled`` for a graph that changes some inputs in place; where one of those
    shares memory with another input in a call (``f(x, x)``, one NumPy array passed
    twice), ``gm`` runs instead: the backends compile a graph for distinct inputs
    (a kernel may read one input after writing the other, or not see the write),
    and ``gm`` runs the ops in the program's order, as eager does. A graph whose frame
    guards this (:func:`no_aliasing_guard`, ADR 0062) is not wrapped: an aliased call
    fails its guards and recompiles; this stays for NumPy inputs and for graphs captured
    from aliased inputs."""

    def __init__(self, compiled: Callable[..., Any], gm: torch.fx.GraphModule, mutated: tuple[int, ...]) -> None:
        self.compiled = compiled
        self.gm = gm
        self.mutated = mutated

    def __call__(self, *args: Any) -> Any:
        # the common case first, in one pass: no two inputs share a storage (an optimizer
        # step has hundreds of inputs, and this runs on every call)
        storages = [a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)]
        if len(set(storages)) == len(storages):
            return self.compiled(*args)
        seen: dict[int, int] = {}
        for a in args:
            if isinstance(a, torch.Tensor):
                where = a.untyped_storage().data_ptr()
                seen[where] = seen.get(where, 0) + 1
        for i in self.mutated:
            a = args[i]
            if isinstance(a, torch.Tensor):
                where = a.untyped_storage().data_ptr()
                if where != 0 and seen[where] > 1:
                    return self.gm(*args)
        return self.compiled(*args)

    def __getattr__(self, name: str) -> Any:
        if name in ("compiled", "gm", "mutated"):
            raise AttributeError(name)
        return getattr(self.compiled, name)


def alias_checked(
    compiled: Callable[..., Any], gm: torch.fx.GraphModule, mutated: tuple[int, ...],
    guarded: bool = False,
) -> Callable[..., Any]:
    """``compiled`` wrapped in ``AliasChecked`` where it needs it: a graph of more than one
    input that changes some of them in place, unless its frame's guards hold a
    ``NO_ALIASING`` guard for it (``guarded``: :func:`no_aliasing_guard`)."""
    n_inputs = sum(1 for node in gm.graph.nodes if node.op == "placeholder")
    if mutated and n_inputs > 1 and not guarded:
        return AliasChecked(compiled, gm, mutated)
    return compiled


def no_aliasing_guard(
    sources: list[Any], inputs: list[Any], mutated: tuple[int, ...]
) -> ir.Guard | None:
    """The guard that checks, with the frame's other guards, what ``AliasChecked`` checks on
    each call (ADR 0062): no input the graph writes shares memory with another input. Over
    the tensor inputs (``sources[i]`` holds ``inputs[i]``, the capture's values), for a graph
    of more than one input that writes some. ``None`` where ``AliasChecked`` stays: nothing
    written, one input, an input with no frame source, or written inputs that share memory
    in the capture's own call (a guard failing on the call it was made for would recompile
    on every call; ``AliasChecked`` then runs the FX graph for aliased calls, as before)."""
    if not mutated or len(inputs) < 2 or len(sources) != len(inputs) or any(s is None for s in sources):
        return None
    tensors = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
    written = [tensors.index(i) for i in mutated if i in tensors]
    if len(tensors) < 2 or not written:
        return None
    values = [inputs[i] for i in tensors]
    if not guards.no_written_alias(tuple(written), *values):
        return None
    payload = {"sources": [sources[i].expr() for i in tensors], "written": written}
    return ir.Guard(None, ir.GuardKind.NO_ALIASING, payload)


def exit_grad_mode(gm: torch.fx.GraphModule) -> bool | None:
    """The grad mode ``gm`` leaves behind (its last ``_set_grad_enabled``), or None when it
    does not set one."""
    mode: bool | None = None
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch._C._set_grad_enabled:
            mode = bool(node.args[0])
    return mode


def turns_grad_on(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` switches grad mode on somewhere (``_set_grad_enabled(True)``)."""
    return any(node.op == "call_function" and node.target is torch._C._set_grad_enabled
               and bool(node.args[0]) for node in gm.graph.nodes)


class LeavingGradMode:
    """Runs ``compiled``, then sets the grad mode the graph leaves behind.

    A graph that breaks inside ``with torch.no_grad():`` switched grad mode off, and the
    code after it (the op that broke the graph, run eagerly) must run that way. Running
    the FX graph does it through its ``_set_grad_enabled`` call; a compiled backend
    (ember.aotgrad traces the call but its runtime does not make it) does not (fuzz seed
    3757: ``masked_select`` under ``no_grad`` gave a result that requires grad).
    """

    def __init__(self, compiled: Callable[..., Any], mode: bool) -> None:
        self.compiled = compiled
        self.mode = mode

    def __call__(self, *args: Any) -> Any:
        out = self.compiled(*args)
        torch._C._set_grad_enabled(self.mode)
        return out

    def __getattr__(self, name: str) -> Any:
        if name in ("compiled", "mode"):
            raise AttributeError(name)
        return getattr(self.compiled, name)
