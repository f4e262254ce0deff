"""Trace a torch-level fx graph to ATen (inference only), for use without ember.aotgrad.

Runs the graph on fake tensors under ember.ir's recorder (as the decompositions do), so
every op reaching ATen becomes an fx node.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._pytree import tree_map

from ember.ir.shapes import EagerLayoutFakeMode

from .decompositions import Recorder
from .errors import LoweringError


class _AtenRecorder(Recorder):  # type: ignore[no-untyped-call]
    """The decompositions' recorder; tensors built inside the graph become its constants.

    ``torch.tensor([2, 1])`` or a list index (``x[[0, 0]]``) make a real tensor while
    tracing; it is kept on ``root`` and read by a ``get_attr`` node, as a parameter is.
    A fake tensor that no recorded node produced is an error.
    """

    def missing(self, x: torch.Tensor) -> torch.fx.Node:
        if isinstance(x, FakeTensor):
            real = getattr(x, "constant", None)
            if not isinstance(real, torch.Tensor):
                raise LoweringError(
                    f"a tensor of size {tuple(x.shape)} appeared from outside the graph"
                )
        else:
            real = x
        return self.constant(x, lambda: real.detach().clone())


def trace_to_aten(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> torch.fx.GraphModule:
    """An ATen-level GraphModule computing what ``gm`` computes (no autograd)."""
    fake_mode = EagerLayoutFakeMode(allow_non_fake_inputs=True)
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
    recorder = _AtenRecorder(graph, env, root)
    with torch.no_grad(), fake_mode, recorder:
        out = torch.func.functional_call(gm, swapped, tuple(fakes))
    graph.output(tree_map(recorder.arg, out))
    return torch.fx.GraphModule(root, graph)
