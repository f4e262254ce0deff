"""torch functions that call user code: ``torch.func.functional_call``, ``torch.cond`` and
``torch.utils.checkpoint.checkpoint``.

``functional_call(module, state, args, kwargs)`` is traced as the module's
call with its parameters and buffers read from ``state``: while the call is
traced, a read of an overridden tensor (by identity, so tied weights follow)
gives the dict's tracker instead of the module's own ``get_attr``, and a
torch.nn leaf module holding one is inlined rather than made one
``call_module`` node (which would read the module's real tensors).

``torch.cond`` is traced by ``variables.cond``, ``checkpoint`` by ``variables.checkpoint``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
import torch.utils.checkpoint
from torch import nn

from ..errors import Unsupported
from .base import VariableTracker
from .constant import ConstantVariable
from .dicts import DictVariable
from .lists import BaseListVariable
from .nn_module import NNModuleVariable
from .tensor import TensorVariable
from .torch import TorchFunctionVariable

if TYPE_CHECKING:
    from ..translator_core import TranslatorCore as Tx


def _functional_calls() -> frozenset[Any]:
    found = {torch.func.functional_call}
    stateless = getattr(torch.nn.utils, "stateless", None)
    if stateless is not None and hasattr(stateless, "functional_call"):
        found.add(stateless.functional_call)
    return frozenset(found)


#: ``torch.func.functional_call`` (and the older ``torch.nn.utils.stateless`` one)
FUNCTIONAL_CALLS: frozenset[Any] = _functional_calls()
#: every torch function ``HigherOrderVariable`` handles
HIGHER_ORDER_FUNCTIONS: frozenset[Any] = FUNCTIONAL_CALLS | {torch.cond, torch.utils.checkpoint.checkpoint}


def _bind(
    args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> tuple[VariableTracker, VariableTracker, VariableTracker, VariableTracker | None, dict[str, Any]]:
    names = ("module", "parameter_and_buffer_dicts", "args", "kwargs")
    bound: dict[str, VariableTracker] = dict(zip(names, args, strict=False))
    options: dict[str, Any] = {}
    for k, v in kwargs.items():
        if k in names and k not in bound:
            bound[k] = v
        elif k in ("tie_weights", "strict") and v.is_python_constant():
            options[k] = v.as_python_constant()
        else:
            raise Unsupported(f"torch.func.functional_call with argument `{k}`")
    if len(args) > len(names) or "module" not in bound or "parameter_and_buffer_dicts" not in bound:
        raise Unsupported("torch.func.functional_call without (module, state, args)")
    call_args = bound.get("args", ConstantVariable(()))
    return bound["module"], bound["parameter_and_buffer_dicts"], call_args, bound.get("kwargs"), options


def _state(tx: Tx, module: nn.Module, state: VariableTracker, tie_weights: bool) -> dict[int, VariableTracker]:
    """id(the module's tensor) -> the tracker ``state`` gives for it."""
    dicts = state.unpack(tx) if isinstance(state, BaseListVariable) else [state]
    named: dict[str, torch.Tensor] = dict(module.named_parameters(remove_duplicate=False))
    named.update(dict(module.named_buffers(remove_duplicate=False)))
    overrides: dict[int, VariableTracker] = {}
    given: dict[int, str] = {}
    for d in dicts:
        if not isinstance(d, DictVariable):
            raise Unsupported(f"torch.func.functional_call with state {d.describe()} (a dict is needed)")
        for key in d.items:
            if not isinstance(key, str) or key not in named:
                raise Unsupported(
                    f"torch.func.functional_call with key {key!r}, which names no parameter or "
                    f"buffer of `{type(module).__name__}`"
                )
            value = d.realize(tx, key)
            if not isinstance(value, TensorVariable):
                raise Unsupported(f"torch.func.functional_call with {key!r} set to {value.describe()}")
            tid = id(named[key])
            if tid in given and not tie_weights:
                raise Unsupported(
                    f"torch.func.functional_call with tie_weights=False and tied `{given[tid]}`, `{key}`"
                )
            given[tid] = key
            overrides[tid] = value
    return overrides


@contextmanager
def _overriding(tx: Tx, overrides: dict[int, VariableTracker]) -> Iterator[None]:
    saved = tx.output.tensor_overrides
    tx.output.tensor_overrides = {**saved, **overrides}
    try:
        yield
    finally:
        tx.output.tensor_overrides = saved


def functional_call(
    tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker:
    module_var, state, call_args, call_kwargs, options = _bind(args, kwargs)
    if not isinstance(module_var, NNModuleVariable):
        raise Unsupported(f"torch.func.functional_call of {module_var.describe()}")
    module = module_var.value
    overrides = _state(tx, module, state, bool(options.get("tie_weights", True)))
    if options.get("strict", False):
        expected = {id(t) for t in [*module.parameters(), *module.buffers()]}
        if expected - set(overrides):
            raise Unsupported("torch.func.functional_call(strict=True) with missing keys")
    if isinstance(call_args, BaseListVariable) and call_args.python_type() is tuple:
        positional = call_args.unpack(tx)
    elif isinstance(call_args, ConstantVariable) and call_args.value == ():
        positional = []
    else:
        positional = [call_args]  # a single argument, as functional_call allows
    named: dict[str, VariableTracker] = {}
    if call_kwargs is not None and not (
        isinstance(call_kwargs, ConstantVariable) and call_kwargs.value is None
    ):
        if not isinstance(call_kwargs, DictVariable) or not all(isinstance(k, str) for k in call_kwargs.items):
            raise Unsupported(f"torch.func.functional_call with kwargs {call_kwargs.describe()}")
        named = {k: call_kwargs.realize(tx, k) for k in call_kwargs.items}
    with _overriding(tx, overrides):
        return module_var.call_function(tx, positional, named)


class HigherOrderVariable(TorchFunctionVariable):
    """A torch function that calls user code (``functional_call``, ``cond``, ``checkpoint``)."""

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        if self.value in FUNCTIONAL_CALLS:
            return functional_call(tx, args, kwargs)
        if self.value is torch.utils.checkpoint.checkpoint:
            from .checkpoint import checkpoint_call

            return checkpoint_call(tx, args, kwargs)
        from .cond import cond_call

        return cond_call(tx, args, kwargs)
