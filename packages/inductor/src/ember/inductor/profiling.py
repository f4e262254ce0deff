"""Compiled graphs and their kernels as named ranges in torch's profiler.

While ``torch.profiler`` (or ``torch.autograd.profiler``) records, a compiled
graph runs a second copy of its wrapper whose kernels are wrapped in
``record_function``: the trace shows ``ember_graph_<n>`` around each call and
``ember_kernel_<name>`` around each generated kernel, next to the ``aten::``
events of its extern calls. Outside the profiler the plain wrapper runs: the
only cost is reading one module flag per call.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch.autograd.profiler as autograd_profiler
from torch.autograd.profiler import record_function

_graph_ids = itertools.count()


def profiling() -> bool:
    """Whether torch's profiler is recording now."""
    return bool(autograd_profiler._is_profiler_enabled)


def graph_label() -> str:
    """A fresh range name for one compiled graph."""
    return f"ember_graph_{next(_graph_ids)}"


def named_kernels(kernels: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """``kernels`` with each call recorded as ``ember_kernel_<name>``."""
    return {name: _named(f"ember_kernel_{name}", fn) for name, fn in kernels.items()}


def _named(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        with record_function(label):
            return fn(*args)

    return call
