"""Guards on the parameters and buffers a frame's graphs read: which tensor, and its layout.

A graph reads a module's weights through ``get_attr`` (or a leaf module's own), and the
backend keeps them: aotgrad collects them once per graph, inductor's inference graphs
compile them in as constants with their sizes, strides and dtype. Two things users do
between calls change what eager reads while the module itself stays the same object
(which is all the module guards check):

* ``m.weight = other`` (weight tying after the fact, swapping a layer's weights): the
  module holds another tensor; the compiled graph kept the old one;
* ``m.weight.data = new`` with another layout, dtype or size: the same tensor object
  now has other metadata, which compiled kernels would read with the old strides.

So each such tensor gets an ``ID_MATCH`` (marked ``"weight": True``: the frame cache
drops it when storing the frame, whose ``TENSOR_MATCH`` per weight names no address,
and adds it back for the live tensors when a stored frame is bound) and a
``TENSOR_MATCH``, as stored frames already had. ``.data = new`` with the same layout
needs no recompile: the backends hold the tensor object, which then reads the new data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from ember import guards, ir


def identity_guard(source: ir.Source, value: torch.Tensor, name: str) -> ir.Guard:
    """``source`` is still the tensor ``value`` (a weight a graph reads as ``name``)."""
    return ir.Guard(
        source, ir.GuardKind.ID_MATCH, {"id": id(value), "repr": f"the tensor {name}", "weight": True}
    )


def metadata_guard(source: ir.Source, value: torch.Tensor) -> ir.Guard:
    """``source``'s dtype, device, requires_grad, sizes and strides are still ``value``'s
    (a ``TENSOR_MATCH`` marked as a weight's: the identity guard pins the rest)."""
    payload = {**ir.tensor_payload(value), "weight": True}
    return ir.Guard(source, ir.GuardKind.TENSOR_MATCH, payload)


def is_weight_identity(guard: ir.Guard) -> bool:
    """Whether ``guard`` is an :func:`identity_guard` (in-process only)."""
    return guard.kind is ir.GuardKind.ID_MATCH and guard.payload.get("weight") is True


def _sourced_tensors(gm: torch.fx.GraphModule, attr_sources: dict[str, Any]
                     ) -> Iterable[tuple[str, ir.Source]]:
    # every name, tied ones too: ``head.weight = embed.weight`` untied later must fail
    named = (*gm.named_parameters(remove_duplicate=False),
             *gm.named_buffers(remove_duplicate=False))
    for name, _ in named:
        root, _, rest = name.partition(".")
        source = attr_sources.get(root)
        if source is None:
            continue  # made while tracing: the graph's own
        for part in rest.split(".") if rest else ():
            source = ir.Attr(source, part)
        yield name, source


def weight_guards(
    graphs: Sequence[Any], f_locals: dict[str, Any], f_globals: dict[str, Any]
) -> list[ir.Guard]:
    """An identity and a metadata guard per weight the ``graphs`` (``CapturedGraph``) read."""
    out: list[ir.Guard] = []
    for captured in graphs:
        for name, source in _sourced_tensors(captured.gm, captured.attr_sources):
            try:
                value = guards.eval_source(source, f_locals, f_globals)
            except Exception:
                continue  # not readable from the frame: nothing to compare a later call with
            if not isinstance(value, torch.Tensor):
                continue
            out.append(identity_guard(source, value, name))
            out.append(metadata_guard(source, value))
    return out
