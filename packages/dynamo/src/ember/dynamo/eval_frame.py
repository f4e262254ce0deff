"""Frame entry: the function-level path into capture, and the shared cache.

(Under construction: the runtime lands here next. ``FrameHooks`` is the part
of the contract ``convert_frame`` codes against.)
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, Protocol


class FrameHooks(Protocol):
    """What ``convert_frame`` may ask of the runtime that called it."""

    def wrap_function(self, fn: types.FunctionType) -> Callable[..., Any]:
        """A callable that runs ``fn`` through the same cache and backend.

        Calling it binds the arguments, looks up / fills the shared cache for
        ``fn.__code__`` and runs the guarded code, so resume functions and
        callees run at a graph break are captured afresh. Install the result
        in ``f_globals`` (e.g. as ``__resume_at_<offset>_<n>``).
        """
        ...
