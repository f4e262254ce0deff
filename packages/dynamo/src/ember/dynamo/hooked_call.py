"""A module whose hooks capture does not trace, called at a graph break.

Capture refuses some module hooks (ADR 0042: hooks taking keyword arguments,
backward hooks, global hooks); FSDP2's ``fully_shard`` installs such hooks on
every sharded block (the all-gather before forward, the reshard after it, the
gradient reduce-scatter from autograd hooks). Calling such a module is a graph
break. Run as it is, the call would run the module's ``forward`` eagerly too,
and so would everything below it. Instead (ADR 0057) the break calls
:class:`HooksEagerForwardCompiled`: ``Module.__call__`` runs the hooks
eagerly, exactly as eager PyTorch does, and the module's ``forward`` (the
function read from its class, which the module's guards pin) is looked up
through the runtime, so it is captured and compiled as its own frame, with its
own guards and its own breaks. This is TorchDynamo's treatment of FSDP2's
hooks (``skip_fsdp_hooks``) reached without a PEP 523 hook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch


class HooksEagerForwardCompiled:
    """``module(*args, **kwargs)`` with the module's ``forward`` replaced, for the
    call, by ``compiled_forward`` (the unbound ``forward`` through the runtime)."""

    def __init__(self, compiled_forward: Callable[..., Any]) -> None:
        self.compiled_forward = compiled_forward

    def __call__(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        compiled = self.compiled_forward

        def forward(*a: Any, **k: Any) -> Any:
            return compiled(module, *a, **k)

        with forward_replaced(module, forward):
            return module(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<ember hooks eager, forward compiled: {self.compiled_forward!r}>"


@contextmanager
def forward_replaced(module: torch.nn.Module, forward: Callable[..., Any]) -> Iterator[None]:
    """``module.forward`` is ``forward`` (an instance attribute) inside the block; a
    forward the instance had of its own before is put back after."""
    previous = module.__dict__.get("forward")
    module.__dict__["forward"] = forward
    try:
        yield
    finally:
        if previous is None:
            del module.__dict__["forward"]
        else:
            module.__dict__["forward"] = previous
