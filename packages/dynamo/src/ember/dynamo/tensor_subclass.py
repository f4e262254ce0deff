"""Tensor subclasses that only carry a class: captured as plain tensors, class restored.

A subclass such as ``class MyTensor(torch.Tensor): pass`` keeps torch's default
``__torch_function__``, which runs every torch function as for a plain tensor
and converts each tensor result to the subclass. Capture treats an input of
such a class as a plain tensor (the graph gets ``x.as_subclass(torch.Tensor)``,
which shares its storage and autograd history), guards its class (the
``TENSOR_MATCH`` payload names it), gives every op result that had such an
input the same class (``result_class``), and turns a graph output of that
class back into one (``restore``).

Any other subclass (its own ``__torch_function__`` or ``__torch_dispatch__``,
methods or attributes) is a graph break naming the class.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

#: classes capture takes as they are (no class to restore on results)
BASE_CLASSES: tuple[type, ...] = (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer)

#: what a class body defines without adding behaviour
_INERT_NAMES = frozenset(
    {
        "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__",
        "__annotations__", "__firstlineno__", "__static_attributes__", "__parameters__",
        "__orig_bases__", "__type_params__",
    }
)


def is_plain_subclass(cls: type) -> bool:
    """Whether ``cls`` is a strict ``torch.Tensor`` subclass adding nothing but its class."""
    if cls in BASE_CLASSES or not issubclass(cls, torch.Tensor):
        return False
    for klass in cls.__mro__:
        if klass is torch.Tensor:
            return True
        if klass in BASE_CLASSES or not set(vars(klass)) <= _INERT_NAMES:
            return False
    return False


def is_capturable_class(cls: type) -> bool:
    return cls in BASE_CLASSES or is_plain_subclass(cls)


def result_class(classes: Iterable[type]) -> type:
    """The class torch's default ``__torch_function__`` gives an op's tensor results
    when its tensor arguments have ``classes``: the most derived plain subclass."""
    found: type = torch.Tensor
    for cls in classes:
        if not is_plain_subclass(cls) or issubclass(found, cls):
            continue
        if not issubclass(cls, found):
            raise TypeError(f"tensor subclasses `{found.__qualname__}` and `{cls.__qualname__}` in one op")
        found = cls
    return found


def as_plain(t: torch.Tensor) -> torch.Tensor:
    """A graph input: the same tensor as a plain ``torch.Tensor`` (generated code calls it)."""
    return t if type(t) in BASE_CLASSES else t.as_subclass(torch.Tensor)


def restore(t: Any, cls: type) -> Any:
    """A graph output of class ``cls`` (generated code calls it)."""
    return t.as_subclass(cls)
