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

A compiled call that raises may have written an input already (a kernel computed
an update into it, a later one failed). Whoever recovers by running the graph
again eagerly (ember.dynamo) would then apply that write twice, so the layers
say on the exception whether an input was written before it was raised
(:func:`note_inputs_written`, read by :func:`inputs_written`): a backend that
computes updates into inputs marks what it knows, and the caller of a
functional graph (ember.aotgrad's runtime, which writes inputs only after the
graph returned) marks the rest.
"""

from __future__ import annotations

import contextlib
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


#: The attribute of an exception saying whether an input was written before it was raised.
INPUTS_WRITTEN_ATTR = "ember_inputs_written"


def note_inputs_written(exc: BaseException, written: bool) -> None:
    """Record on ``exc`` whether the call that raised it had written an input in place.
    ``True`` is never taken back: a layer that knows less than the one below keeps it."""
    if getattr(exc, INPUTS_WRITTEN_ATTR, None) is True:
        return
    with contextlib.suppress(AttributeError, TypeError):  # an exception type without a __dict__
        setattr(exc, INPUTS_WRITTEN_ATTR, bool(written))


def inputs_written(exc: BaseException) -> bool | None:
    """Whether the call that raised ``exc`` had written an input (None: nobody said)."""
    value = getattr(exc, INPUTS_WRITTEN_ATTR, None)
    return None if value is None else bool(value)


__all__ = [
    "INPUTS_WRITTEN_ATTR",
    "INPUT_UPDATES_KEY",
    "input_updates_of",
    "inputs_written",
    "note_inputs_written",
    "set_input_updates",
]
