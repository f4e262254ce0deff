"""``wrap_numpy``: NumPy code that takes and returns tensors (``torch.compiler.wrap_numpy``).

Eagerly the wrapper converts tensor arguments to ``np.ndarray`` and array
results back to tensors (through NumPy, on the CPU). Inside a compiled frame
the two conversions are traced as a change of label only
(``variables.ndarray``): the NumPy code runs on the tensors where they live,
and autograd sees through it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from .numpy_ops import ndarrays_to_tensors, tensors_to_ndarrays

F = TypeVar("F", bound=Callable[..., Any])


def wrap_numpy(fn: F) -> F:
    """``fn`` (NumPy code) taking tensors for its arrays and returning tensors for them."""

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        args, kwargs = tensors_to_ndarrays((args, kwargs))
        return ndarrays_to_tensors(fn(*args, **kwargs))

    return wrapped  # type: ignore[return-value]
