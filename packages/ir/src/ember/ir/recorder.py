"""The one ATen recorder: a ``TorchDispatchMode`` writing each ATen call it sees into an FX graph.

Both compilers that turn a program into ATen use it: ember.aotgrad traces the joint
forward/backward with it (``aotgrad/trace.py``: a literal trace with storage and layout
metadata, for functionalization) and ember.inductor records a decomposition's ATen ops
and, without ember.aotgrad, an inference graph (``inductor/decompositions.py``,
``inductor/aten_trace.py``). It lives in ember.ir because it is the one package both may
import, and ember.inductor must run without ember.aotgrad.

The recorder runs under a fake mode: every call reaching ``__torch_dispatch__`` is first
replaced by its entry in ``decompositions`` (whose own ATen calls come back here), else
run on the fake tensors and recorded as a ``call_function`` node whose ``meta["val"]`` is
its fake result. What differs between the users is a hook each, overridden by a subclass:

- :meth:`AtenRecorder.missing`: a tensor argument that no recorded node produced (a
  constant made while tracing, or an error);
- :meth:`AtenRecorder.decomposes_implicitly`: trace through an op's
  CompositeImplicitAutograd kernel instead of recording it;
- :meth:`AtenRecorder.run`: run the op (checks before it, errors explained);
- :meth:`AtenRecorder.records`: whether a call is a node at all (an op returning only
  sizes or scalars may stay a plain value);
- :meth:`AtenRecorder.bind` and :meth:`AtenRecorder.annotate`: the metadata of a value's
  node and of a call's node.

An op with a traceable wrapper subclass among its arguments (``__tensor_flatten__``:
DTensor) is not recorded: the recorder answers ``NotImplemented``, the subclass's own
``__torch_dispatch__`` runs it on the inner tensors, and those ATen calls (a DTensor's
local ops and its functional collectives) are what the graph holds.
"""

from __future__ import annotations

import contextlib
import operator
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
import torch.fx as fx
from torch.utils._python_dispatch import (
    TorchDispatchMode,
    _disable_current_modes,
    is_traceable_wrapper_subclass_type,
)
from torch.utils._pytree import tree_map

#: an ATen overload -> the Python function the recorder calls instead of recording it
DecompTable = Mapping[Any, Callable[..., Any]]


class UnrecordedTensor(Exception):
    """A tensor reached a recorded op that is neither an input nor made by a recorded op."""


@contextlib.contextmanager
def symint_args() -> Iterator[None]:
    """Symbolic sizes may be plain node arguments while graphs are built: FX's warning
    about each (``Raw Sym...``) is silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Raw Sym", category=UserWarning)
        yield


def call_node(graph: fx.Graph, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> fx.Node:
    """``graph.call_function`` with symbolic sizes allowed among the arguments."""
    with symint_args():
        return graph.call_function(fn, args, kwargs)


class AtenRecorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Records ATen calls on fake tensors into ``self.graph``.

    ``env`` maps ``id`` of each tensor the graph knows to its node (``keep`` holds the
    tensors so their ids stay unique); ``root`` holds the constants that ``get_attr``
    nodes read. Use as a context manager nested inside the fake mode of the tensors.
    """

    def __init__(
        self,
        graph: fx.Graph | None = None,
        env: dict[int, fx.Node] | None = None,
        root: torch.nn.Module | None = None,
        decompositions: DecompTable | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.graph = fx.Graph() if graph is None else graph
        self.env: dict[int, fx.Node] = {} if env is None else env
        self.root = torch.nn.Module() if root is None else root
        self.decompositions: DecompTable = decompositions or {}
        self.keep: list[Any] = []
        self.n_consts = 0

    # -- values and their nodes ------------------------------------------------

    def bind(self, value: Any, node: fx.Node) -> None:
        """``node`` holds ``value`` from now on."""
        self.env[id(value)] = node
        self.keep.append(value)
        node.meta["val"] = value

    def node_of(self, value: torch.Tensor) -> fx.Node:
        """The node holding ``value`` (:meth:`missing` decides for an unknown one)."""
        node = self.env.get(id(value))
        return self.missing(value) if node is None else node

    def missing(self, value: torch.Tensor) -> fx.Node:
        """A tensor argument that no recorded node produced; subclasses make it a constant."""
        raise UnrecordedTensor(f"a constant tensor {tuple(value.shape)} was made while recording")

    def constant(self, value: Any, stored: Callable[[], torch.Tensor]) -> fx.Node:
        """A ``get_attr`` node holding ``value`` and reading ``stored()`` (made outside every
        dispatch mode, so a copy is a real tensor; kept on ``root`` as a buffer)."""
        name = f"_tensor_constant{self.n_consts}"
        self.n_consts += 1
        with _disable_current_modes():
            self.root.register_buffer(name, stored())
        node = self.graph.get_attr(name)
        self.bind(value, node)
        return node

    def arg(self, value: Any) -> Any:
        """``value`` as a node argument: a tensor becomes its node."""
        return self.node_of(value) if isinstance(value, torch.Tensor) else value

    # -- the dispatch hook -----------------------------------------------------

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if any(is_traceable_wrapper_subclass_type(t) for t in types):
            # a wrapper subclass (DTensor) among the arguments: its own __torch_dispatch__
            # runs the op on its inner tensors, whose ATen calls come back here and are
            # recorded (the graph is over the inner tensors, never over the wrapper)
            return NotImplemented
        decomp = self.decompositions.get(func)
        if decomp is not None:
            with self:
                out = decomp(*args, **kwargs)
            if out is not NotImplemented:
                return out
        if self.decomposes_implicitly(func):
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        return self.record(func, args, kwargs)

    def decomposes_implicitly(self, func: Any) -> bool:
        """Whether to trace through ``func``'s CompositeImplicitAutograd kernel."""
        return False

    def run(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``func`` on the fake arguments (subclasses check first, or explain a failure)."""
        return func(*args, **kwargs)

    def records(self, func: Any, out: Any) -> bool:
        """Whether the call becomes a node (every call, unless a subclass says otherwise)."""
        return True

    def annotate(self, node: fx.Node) -> None:
        """Metadata of a recorded call's node beyond its value."""

    def record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run ``func`` and write it into the graph; its tensor results get their nodes."""
        out = self.run(func, args, kwargs)
        if not self.records(func, out):
            return out
        node = call_node(self.graph, func, tuple(tree_map(self.arg, args)), dict(tree_map(self.arg, kwargs)))
        self.annotate(node)
        if isinstance(out, torch.Tensor):
            self.bind(out, node)
        elif isinstance(out, (tuple, list)):
            node.meta["val"] = out
            self.keep.append(out)
            for i, item in enumerate(out):
                if isinstance(item, torch.Tensor):
                    self.bind(item, self.graph.call_function(operator.getitem, (node, i)))
        else:
            node.meta["val"] = out
        return out

    def graph_module(self) -> fx.GraphModule:
        """The recorded graph as a GraphModule (constants become its buffers)."""
        return fx.GraphModule(self.root, self.graph)


__all__ = ["AtenRecorder", "DecompTable", "UnrecordedTensor", "call_node", "symint_args"]
