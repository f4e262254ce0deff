"""An ATen-level tracer: ember.ir's ``AtenRecorder`` with aotgrad's metadata and checks.

The tracer sits on top of a ``FakeTensorMode``: each ATen call reaching
``__torch_dispatch__`` is recorded as an FX ``call_function`` node and then
executed on fake tensors (no real compute). Because the mode sits below
autograd, running ``torch.autograd.grad`` inside it records the backward ops
too, which is how :mod:`ember.aotgrad.joint` builds the joint graph.

The recorded graph is *literal*: in-place ops and views stay as they were
called, so a node may alias or mutate another node's storage. Every node gets
``meta["val"]`` (its fake value), ``meta["storage"]`` (an id of the storage it
lives in) and ``meta["layout"]`` (size, stride, storage offset at the time it
was produced); :mod:`ember.aotgrad.functionalize` uses them to remove the
mutations. An op recorded while ``RECOMPUTE_REGION`` is set (the torch-level
node being run is in a checkpointed region) gets ``meta["recompute"]``.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
)
from torch.utils._pytree import tree_map

from ember.aotgrad.errors import TraceError
from ember.ir import AtenRecorder, DecompTable

#: the activation-checkpointing region (``node.meta["recompute"]`` of the torch-level node
#: being run, see ``regions.py``) whose ATen ops the tracer is recording now, or None
RECOMPUTE_REGION: ContextVar[int | None] = ContextVar("ember_aotgrad_recompute_region", default=None)

_IMPLICIT = torch._C.DispatchKey.CompositeImplicitAutograd

# Ops kept whole even though they have a CompositeImplicitAutograd kernel:
# none today; listed here so that a compiler wanting one intact has one place.
_KEEP_COMPOSITE: frozenset[Any] = frozenset()


def layout_of(t: torch.Tensor) -> tuple[tuple[Any, ...], tuple[Any, ...], Any]:
    """(size, stride, storage_offset) of ``t``: ints, or ``SymInt`` for symbolic sizes
    (never turned into ints here: that would specialize them)."""
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


def storage_key(t: torch.Tensor) -> int:
    """A key equal for two tensors exactly when they share a storage."""
    return int(t.untyped_storage()._cdata)


# Ops whose real kernels return undefined tensors (None in Python) where their fake
# kernels return tensors: a graph containing them would trace but fail at runtime.
_UNSUPPORTED: dict[str, str] = {
    "mkldnn_rnn_layer": "nn.LSTM/nn.GRU on CPU (its workspace output is undefined at runtime)",
    "_cudnn_rnn": "cuDNN RNNs (nn.LSTM/nn.GRU on CUDA)",
}


def _decomposes_implicitly(func: Any) -> bool:
    """Whether ``func`` is a CompositeImplicitAutograd op to trace through."""
    if func in _KEEP_COMPOSITE or getattr(func, "namespace", None) != "aten":
        return False
    return bool(func.has_kernel_for_dispatch_key(_IMPLICIT))


class GraphTracer(AtenRecorder):  # type: ignore[no-untyped-call]
    """Records ATen calls on fake tensors into ``self.graph`` (ember.ir's recorder, with
    aotgrad's metadata, checks and errors).

    Use as a context manager nested inside the ``FakeTensorMode`` that created
    the input tensors; register each input with :meth:`placeholder` first.
    Tensors that are not inputs and were not produced by a traced op are
    recorded as constants (``get_attr`` nodes) when they are real tensors, and
    rejected when they are fake tensors from elsewhere.
    """

    def __init__(self, decompositions: DecompTable | None = None) -> None:
        super().__init__(decompositions=decompositions)
        #: storages of inputs traced as copies laid out otherwise than the real input:
        #: ``as_strided`` on them is refused (its storage positions would be the copy's)
        self.relocated: set[int] = set()

    # -- registering values ------------------------------------------------

    def placeholder(self, name: str, value: torch.Tensor) -> fx.Node:
        """Declare ``value`` (a fake tensor) as a graph input called ``name``."""
        first_op = next((n for n in self.graph.nodes if n.op != "placeholder"), None)
        if first_op is None:
            node = self.graph.placeholder(name)
        else:
            with self.graph.inserting_before(first_op):
                node = self.graph.placeholder(name)
        self.bind(value, node)
        return node

    def missing(self, value: torch.Tensor) -> fx.Node:
        """Real tensors become constants; a fake tensor from elsewhere is an error."""
        if isinstance(value, torch._subclasses.fake_tensor.FakeTensor):
            raise TraceError(
                f"a fake tensor of shape {tuple(value.shape)} reached a traced op but is "
                "neither an input of the traced function nor produced inside it; "
                "pass it as an input instead of capturing it"
            )
        if value.requires_grad and torch.is_grad_enabled():
            raise TraceError(
                f"the traced function captures a tensor of shape {tuple(value.shape)} that "
                "requires grad; as a constant it would get no gradient. Pass it as an "
                "input (aot_module passes a module's parameters for you)"
            )
        # The tensor itself, not a detached alias: ``param.data = other`` swaps the
        # parameter's storage, which an alias made now would not follow (the compiled graph
        # kept reading the old weights while eager and torch.compile read the new ones).
        return self.constant(value, lambda: value)

    def bind(self, value: Any, node: fx.Node) -> None:
        super().bind(value, node)
        node.meta["storage"] = storage_key(value)
        node.meta["layout"] = layout_of(value)

    # -- the recorder's hooks --------------------------------------------------

    def decomposes_implicitly(self, func: Any) -> bool:
        return _decomposes_implicitly(func)

    def run(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        packet = getattr(getattr(func, "overloadpacket", None), "__name__", "")
        if packet in _UNSUPPORTED:
            raise TraceError(
                f"{func} is not supported by ember.aotgrad: {_UNSUPPORTED[packet]}. Run "
                "this module eagerly (backends fall back to eager automatically)"
            )
        if packet.startswith("as_strided") and self.relocated and any(
            isinstance(a, torch.Tensor) and storage_key(a) in self.relocated
            for a in args[:1]
        ):
            raise TraceError(
                f"{func} on an input that requires grad and is a slice or an expanded "
                "tensor: its storage offset and strides are not traced (the input is traced "
                "as a copy), and as_strided reads storage positions"
            )
        try:  # every argument has a node before the op runs: a foreign one is named as such
            tree_map(self.arg, (args, kwargs))
        except TraceError as e:
            raise TraceError(f"while tracing {func}: {e}") from None
        try:
            return func(*args, **kwargs)
        except (DynamicOutputShapeException, DataDependentOutputException) as e:
            raise TraceError(
                f"{func} has an output whose shape or value depends on tensor data "
                f"({type(e).__name__}: {e}); ember.aotgrad traces with static shapes only. "
                "Keep data-dependent code (boolean-mask indexing, nonzero, .item()) out of "
                "the compiled function"
            ) from e
        except Exception as e:
            raise TraceError(
                f"{func} failed on fake tensors while tracing: {type(e).__name__}: {e}"
            ) from e

    def annotate(self, node: fx.Node) -> None:
        # an in-place op under no_grad changes values without autograd history
        node.meta["grad_enabled"] = torch.is_grad_enabled()
        region = RECOMPUTE_REGION.get()
        if region is not None:
            node.meta["recompute"] = region
