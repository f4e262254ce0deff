"""Input updates: which outputs of an inference graph are the new values of its inputs.

A functionalized graph returns the new value of every input it mutated (an
optimizer step returns each parameter's and state tensor's next value), and the
caller copies it into the input. A frontend that does this copy says so on the
graph (:func:`set_input_updates`): output ``k`` is the new value of input ``i``.
A backend may then compute output ``k`` directly into input ``i``'s memory and
return input ``i`` itself, and the caller, seeing the same tensor, skips the copy
(ADR 0032). A backend that ignores the entry loses nothing but that copy.

Like ``debug.py``'s folder, the entry travels as ``GraphModule.meta``, so
ember.aotgrad and ember.inductor agree on it without importing each other.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch.fx

#: The ``GraphModule.meta`` key holding ``((output position, input position), ...)``.
INPUT_UPDATES_KEY = "ember_input_updates"


def set_input_updates(gm: torch.fx.GraphModule, pairs: Iterable[tuple[int, int]]) -> None:
    """Record that output ``k`` of ``gm`` is the new value of input ``i``, per ``(k, i)``."""
    gm.meta[INPUT_UPDATES_KEY] = tuple((int(k), int(i)) for k, i in pairs)


def input_updates_of(gm: torch.fx.GraphModule) -> tuple[tuple[int, int], ...]:
    """The ``(output, input)`` pairs recorded on ``gm`` (empty when none were)."""
    pairs = gm.meta.get(INPUT_UPDATES_KEY, ())
    return tuple((int(k), int(i)) for k, i in pairs)


__all__ = ["INPUT_UPDATES_KEY", "input_updates_of", "set_input_updates"]
