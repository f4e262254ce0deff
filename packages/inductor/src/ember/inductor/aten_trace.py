"""Trace a torch-level fx graph to ATen (inference only), for use without ember.aotgrad.

Runs the graph on fake tensors under a recording dispatch mode (the same one
the decompositions use), so every op reaching ATen becomes an fx node.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_map

from .decompositions import Recorder
from .errors import LoweringError


class _AtenRecorder(Recorder):  # type: ignore[no-untyped-call]
    """The decompositions' recorder; a tensor from outside the graph is a lowering error."""

    def _missing(self, x: torch.Tensor) -> torch.fx.Node:
        raise LoweringError(f"a tensor of size {tuple(x.shape)} appeared from outside the graph")


def trace_to_aten(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> torch.fx.GraphModule:
    """An ATen-level GraphModule computing what ``gm`` computes (no autograd)."""
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    graph = torch.fx.Graph()
    root = torch.nn.Module()
    env: dict[int, torch.fx.Node] = {}
    fakes: list[Any] = []
    # Real (detached) weights, taken outside fake mode: they become the graph's constants.
    params: dict[str, torch.Tensor] = {n: p.detach() for n, p in gm.named_parameters()}
    params.update({n: b.detach() for n, b in gm.named_buffers()})
    with fake_mode:
        for i, x in enumerate(example_inputs):
            if isinstance(x, torch.Tensor):
                f = fake_mode.from_tensor(x.detach())
                ph = graph.placeholder(f"arg{i}")
                ph.meta["val"] = f
                env[id(f)] = ph
                fakes.append(f)
            else:
                raise LoweringError(
                    f"input {i} is a {type(x).__name__}; only tensors can be traced"
                )
        swapped: dict[str, Any] = {}
        for k, (name, p) in enumerate(params.items()):
            attr = f"_param{k}"
            setattr(root, attr, p)
            f = fake_mode.from_tensor(p)
            node = graph.get_attr(attr)
            node.meta["val"] = f
            env[id(f)] = node
            swapped[name] = f
    recorder = _AtenRecorder(graph, env)
    with torch.no_grad(), fake_mode, recorder:
        out = torch.func.functional_call(gm, swapped, tuple(fakes))
    graph.output(tree_map(lambda t: recorder._arg(t) if isinstance(t, torch.Tensor) else t, out))
    return torch.fx.GraphModule(root, graph)
