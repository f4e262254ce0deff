"""``tensor.register_hook(fn)`` on a tensor the graph computes.

The graph gets one node that registers ``fn`` on the tensor when the graph
runs (a ``GraphCallable`` returning None, kept for its effect). Every backend
runs it: the eager one on the real tensor; aotgrad on the tensor it traces,
so the hook fires while the joint graph is traced and its ops become part of
the compiled backward. That is sound only when the ops are all the hook does,
so ``fn`` must be a function of its arguments alone (ADR 0017's rule: no
closure cells, defaults, nested functions, or globals other than modules,
torch functions and builtins); anything else, a hook on a graph input (it
would outlive the call), and the handle the call returns (``None`` here) are
graph breaks or unusable, with a reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ..errors import Unsupported
from ..trace_rules import GraphCallable
from .base import VariableTracker
from .constant import ConstantVariable
from .functorch import pure_function
from .tensor import SPECIAL_METHODS, TensorVariable

if TYPE_CHECKING:
    from ..translator_core import TranslatorCore as Tx


class _Register:
    """The node's function: register the hook, return nothing."""

    def __init__(self, fn: Callable[[torch.Tensor], Any]) -> None:
        self.fn = fn

    def __call__(self, t: torch.Tensor) -> None:
        t.register_hook(self.fn)  # type: ignore[no-untyped-call]


def register_hook(tx: Tx, tensor: TensorVariable, fn: VariableTracker) -> VariableTracker:
    if tensor.source is not None:
        raise Unsupported("`register_hook` on a graph input (the hook would outlive the call)")
    if not tensor.example.requires_grad:
        raise Unsupported("`register_hook` on a tensor that does not require grad")
    hook, label = pure_function(tx, fn, "the tensor hook")
    target = GraphCallable(_Register(hook), f"register_hook({label})")
    tx.output.graph.call_function(target, (tensor.node,))
    return ConstantVariable(None)


def _register_hook_method(
    tx: Tx, tensor: TensorVariable, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker:
    if len(args) != 1 or kwargs:
        raise Unsupported("`register_hook` takes one function")
    return register_hook(tx, tensor, args[0])


SPECIAL_METHODS["register_hook"] = _register_hook_method
