"""Tensor subclasses that only carry a class: captured as plain tensors, class restored.

A subclass such as ``class MyTensor(torch.Tensor): pass`` keeps torch's default
``__torch_function__``, which runs every torch function as for a plain tensor
and converts each tensor result to the subclass. Capture treats an input of
such a class as a plain tensor (the graph gets ``x.as_subclass(torch.Tensor)``,
which shares its storage and autograd history), guards its class (the
``TENSOR_MATCH`` payload names it), gives every op result that had such an
input the same class (``result_class``), and turns a graph output of that
class back into one (``restore``).

DTensor (``torch.distributed.tensor``, a ``__torch_dispatch__`` wrapper subclass)
is captured as itself (ADR 0069): the graph's example values are fake DTensors
(DTensor's sharding propagation runs on fake local tensors), the graph takes and
returns DTensors, and a backend desugars them (ember.aotgrad traces the graph over
their local tensors). Its guards pin the class, mesh, placements and local layout
(``GuardCollector.add_dtensor``).

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


def dtensor_class() -> type | None:
    """``torch.distributed.tensor.DTensor`` (None where torch.distributed is not built)."""
    if not torch.distributed.is_available():
        return None
    from torch.distributed.tensor import DTensor

    return DTensor


def is_dtensor(value: Any) -> bool:
    """Whether ``value`` is a DTensor (captured as itself, module doc)."""
    if not isinstance(value, torch.Tensor) or type(value) in BASE_CLASSES:
        return False
    cls = dtensor_class()
    return cls is not None and isinstance(value, cls)


#: DTensor's own methods, captured as one node each (``OutputGraph.create_bound_op``)
DTENSOR_METHODS = frozenset({"redistribute", "to_local", "full_tensor"})


def is_placement(value: Any) -> bool:
    """Whether ``value`` is a DTensor placement (``Shard(0)``, ``Replicate()``, ``Partial()``):
    immutable, compared by value, passed to graph nodes bound into their target."""
    if not torch.distributed.is_available():
        return False
    from torch.distributed.tensor.placement_types import Placement

    return isinstance(value, Placement) or (isinstance(value, type) and issubclass(value, Placement))


def is_capturable_class(cls: type) -> bool:
    if cls in BASE_CLASSES or is_plain_subclass(cls):
        return True
    dt = dtensor_class() if issubclass(cls, torch.Tensor) else None
    return dt is not None and issubclass(cls, dt)


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
    return t if type(t) in BASE_CLASSES or is_dtensor(t) else t.as_subclass(torch.Tensor)


def restore(t: Any, cls: type) -> Any:
    """A graph output of class ``cls`` (generated code calls it)."""
    return t.as_subclass(cls)
