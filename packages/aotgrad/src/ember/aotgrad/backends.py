"""The ``aot_eager`` backend, registered under the ``ember.backends`` entry point.

``aot_eager(gm, example_inputs)`` traces the joint forward+backward of ``gm`` at
ATen level, functionalizes it, partitions it with the min-cut partitioner and
runs both graphs eagerly. It is the backend to use to check that aotgrad (and
not a code generator) is behind a numerical difference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from ember.aotgrad.api import aot_autograd, nop_compiler
from ember.aotgrad.partition import min_cut_rematerialization_partition

_aot_eager = aot_autograd(nop_compiler, nop_compiler, min_cut_rematerialization_partition)


def aot_eager(gm: fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
    """torch.compile-style backend: aotgrad's joint graph, partitioned, run eagerly."""
    return _aot_eager(gm, example_inputs)
