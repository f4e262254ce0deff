"""``torch.utils.checkpoint.checkpoint(fn, *args)`` captured into the graph being built.

The checkpointed function is traced like any inlined call, on the arguments'
trackers. Every node the call adds to the graph is marked
``node.meta["recompute"] = <region number>`` (the ember.ir ``recompute``
field): the region's values are not saved for backward but recomputed there
from what flows into the region. ember.aotgrad carries the mark from the
torch-level nodes to the ATen ops they trace into, and its partitioners honour
it (``ember.aotgrad.partition``). Gradients are those of the plain call, which
is what checkpointing computes too.

Supported: ``use_reentrant=False`` (any arguments), and ``use_reentrant=True``
when a tensor argument requires grad (then reentrant checkpointing computes
the same gradients as the non-reentrant one). Without ``use_reentrant`` torch
warns and takes the reentrant path; a ``context_fn`` (selective checkpointing)
or ``debug=True`` changes what checkpointing does: those calls are graph breaks
and run eagerly under torch's own checkpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch.utils.checkpoint import noop_context_fn

from ..errors import Unsupported
from .base import VariableTracker
from .tensor import TensorVariable

if TYPE_CHECKING:
    from ..translator_core import TranslatorCore as Tx

#: keyword arguments of ``checkpoint`` itself; everything else goes to the function
_OPTIONS = ("use_reentrant", "context_fn", "determinism_check", "debug", "early_stop", "preserve_rng_state")
#: ops whose node is no computation to recompute
_NOT_OPS = ("placeholder", "get_attr", "output")


def _options(kwargs: dict[str, VariableTracker]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for name in _OPTIONS:
        if name not in kwargs:
            continue
        value = kwargs[name]
        if not value.is_python_constant():
            raise Unsupported(f"torch.utils.checkpoint.checkpoint with a non-constant `{name}`")
        options[name] = value.as_python_constant()
    return options


def _next_region(graph: torch.fx.Graph) -> int:
    regions = [n.meta["recompute"] for n in graph.nodes if isinstance(n.meta.get("recompute"), int)]
    return max(regions, default=0) + 1


def checkpoint_call(tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    if not args:
        raise Unsupported("torch.utils.checkpoint.checkpoint without a function")
    fn, call_args = args[0], list(args[1:])
    options = _options(kwargs)
    call_kwargs = {k: v for k, v in kwargs.items() if k not in _OPTIONS}
    reentrant = options.get("use_reentrant")
    if reentrant is None:
        raise Unsupported(
            "torch.utils.checkpoint.checkpoint without use_reentrant (torch warns and takes the "
            "reentrant path); pass use_reentrant=False to have it captured"
        )
    if options.get("context_fn", noop_context_fn) is not noop_context_fn:
        raise Unsupported("torch.utils.checkpoint.checkpoint with a context_fn (selective checkpointing)")
    if options.get("debug", False):
        raise Unsupported("torch.utils.checkpoint.checkpoint with debug=True")
    if reentrant:
        if call_kwargs:
            raise Unsupported("torch.utils.checkpoint.checkpoint(use_reentrant=True) with keyword arguments")
        if not any(isinstance(a, TensorVariable) and a.example.requires_grad for a in call_args):
            # reentrant checkpointing gives the region's parameters no gradient then
            raise Unsupported(
                "torch.utils.checkpoint.checkpoint(use_reentrant=True) where no tensor argument "
                "requires grad"
            )
    graph = tx.output.graph
    before = set(graph.nodes)
    region = _next_region(graph)
    result = fn.call_function(tx, call_args, call_kwargs)
    for node in graph.nodes:
        if node not in before and node.op not in _NOT_OPS and "recompute" not in node.meta:
            node.meta["recompute"] = region
    return result
