"""Trace a torch-level fx graph to ATen (inference only), for use without ember.aotgrad.

Runs the graph on fake tensors under a recording dispatch mode (the same one
the decompositions use), so every op reaching ATen becomes an fx node.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from .errors import LoweringError


class _AtenRecorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(
        self, graph: torch.fx.Graph, env: dict[int, torch.fx.Node], owner: torch.nn.Module
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.graph = graph
        self.env = env
        self.owner = owner
        self.keep: list[Any] = []

    def _arg(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            node = self.env.get(id(x))
            if node is None:
                raise LoweringError(
                    f"a tensor of size {tuple(x.shape)} appeared from outside the graph"
                )
            return node
        return x

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not any(isinstance(t, torch.Tensor) for t in tree_flatten(out)[0]):
            return out  # sizes, devices, scalars: plain values, not graph nodes
        node = self.graph.call_function(
            func, tree_map(self._arg, args), tree_map(self._arg, kwargs)
        )
        node.meta["val"] = out
        self.keep.append(out)
        if isinstance(out, torch.Tensor):
            self.env[id(out)] = node
        elif isinstance(out, (tuple, list)):
            for i, o in enumerate(out):
                if isinstance(o, torch.Tensor):
                    item = self.graph.call_function(operator.getitem, (node, i))
                    item.meta["val"] = o
                    self.env[id(o)] = item
        return out


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
    recorder = _AtenRecorder(graph, env, root)
    with torch.no_grad(), fake_mode, recorder:
        out = torch.func.functional_call(gm, swapped, tuple(fakes))
    flat, spec = tree_flatten(out)
    graph.output(tree_map(lambda t: recorder._arg(t) if isinstance(t, torch.Tensor) else t, out))
    del flat, spec
    return torch.fx.GraphModule(root, graph)
