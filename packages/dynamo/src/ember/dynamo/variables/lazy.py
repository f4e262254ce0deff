"""A frame argument not yet looked at: wrapped (and guarded) on first read,
so arguments a function never uses add no guards.

``realized`` is a cache, not state: wrapping the same value from the same
source always gives an equivalent tracker (tensors, lists and dicts read
from the frame are memoized by the output graph), so it is never undone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.ir import Source

from .base import VariableTracker

if TYPE_CHECKING:
    from ..translator_core import TranslatorCore as Tx


class LazyVariable(VariableTracker):
    def __init__(self, value: Any, source: Source) -> None:
        super().__init__(source)
        self.value = value
        self.realized: VariableTracker | None = None

    def realize(self, tx: Tx) -> VariableTracker:
        if self.realized is None:
            assert self.source is not None
            self.realized = tx.wrap(self.value, self.source)
        return self.realized
