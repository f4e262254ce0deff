"""Activation-checkpointing regions: values recomputed in backward instead of saved.

ember.dynamo marks every torch-level node of a ``torch.utils.checkpoint``
region with ``node.meta["recompute"] = <region number>`` (the ember.ir node
field ``recompute``). ember.aotgrad carries the mark down to ATen:
:func:`run_marking_regions` runs such a graph node by node with
``trace.RECOMPUTE_REGION`` set, so each ATen op the tracer records for a
marked node gets the same mark, and functionalization keeps it on the ops it
rewrites. The partitioners then never save a marked forward value; the
backward recomputes it from the unmarked values that flow into the region
(:func:`must_recompute`). Random ops are the exception: recomputing one would
draw other numbers, so a random value in a region is saved as usual.
"""

from __future__ import annotations

from typing import Any

import torch.fx as fx

from ember.aotgrad.trace import RECOMPUTE_REGION


def region_of(node: fx.Node) -> int | None:
    """The checkpoint region ``node`` belongs to, or None."""
    region = node.meta.get("recompute")
    return region if isinstance(region, int) and not isinstance(region, bool) else None


def has_regions(gm: fx.GraphModule) -> bool:
    return any(region_of(n) is not None for n in gm.graph.nodes)


class _MarkingInterpreter(fx.Interpreter):
    def run_node(self, n: fx.Node) -> Any:
        token = RECOMPUTE_REGION.set(region_of(n))
        try:
            return super().run_node(n)
        finally:
            RECOMPUTE_REGION.reset(token)


def run_marking_regions(gm: fx.GraphModule, *args: Any) -> Any:
    """``gm(*args)``, node by node, with each node's region set while its ATen ops run."""
    return _MarkingInterpreter(gm).run(*args)
