"""The lowering layer: decompositions inductor applies to ops it has no direct lowering for.

A layer on ember.ir's one table (``ember.ir.decompositions``): a curated list of composite
ops (:data:`_CURATED`), without the ops inductor lowers itself or keeps as ATen calls
(:data:`NEVER_DECOMPOSE`); for an op the list misses, torch's core-ATen table (the base)
less the same kept ops. ``decompose_node`` runs one decomposition on fake tensors under
ember.ir's recorder, producing a small fx graph of simpler ATen ops that the graph
lowering then lowers.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_flatten, tree_map

from ember.ir import AtenRecorder, core_aten_table, get_decompositions

aten = torch.ops.aten

# Ops whose ATen kernel we keep: random ops (ATen's generator is the reference)
# and ops whose decomposition only moves the problem (matmul/conv).
NEVER_DECOMPOSE = frozenset(
    {
        aten.native_dropout.default,
        aten.bernoulli.default,
        aten.bernoulli.p,
        aten.rand_like.default,
        aten.randn_like.default,
        aten.addmm.default,
        aten.mm.default,
        aten.bmm.default,
        aten.convolution.default,
        aten.convolution_backward.default,
        aten.linear.default,
        aten.matmul.default,
        aten.baddbmm.default,
        aten.addmv.default,
        aten.mv.default,
        # ATen's fused CPU attention (one pass over key blocks, online softmax) against its
        # decomposition (bmm, softmax, bmm) compiled by ember, single-threaded, issue 29
        # (docs/decisions/0049): the fused kernel was faster at every shape measured,
        # 1.7x at 2x2x17x32 (ViT-sized), 3x at 2x8x256x8, 3.3x at 2x2x256x32; so the
        # forward is an extern call of it. (Training already kept it: the decomposition
        # returns the attention weights where the op returns the logsumexp its backward reads.)
        aten._scaled_dot_product_flash_attention_for_cpu.default,
    }
)


def decomposition_table() -> dict[Any, Callable[..., Any]]:
    """ATen overload -> decomposition; also what the ``inductor`` backend gives aotgrad.

    Ops inductor has a lowering for are left out, so they reach it whole.
    """
    # every lowering module, so that the ops they lower are left out whatever was imported
    # before (``import ember.inductor`` no longer imports the lowering stack)
    from .lowering import creation, find_lowering, pointwise, reduction, views

    del creation, pointwise, reduction, views  # imported for their registrations

    # An op inductor lowers itself stays whole: torch's decomposition of it may bottom out
    # in prims (var_mean -> prims.var/prims.broadcast_in_dim), which would run as externs.
    lowered_packets = {
        getattr(k, "overloadpacket", None) for k in _full_table() if find_lowering(k) is not None
    }

    def keep_whole(op: Any) -> bool:
        # var_mean.dim is CompositeImplicit: left alone, the tracer reaches var_mean.correction.
        return find_lowering(op) is not None or (
            getattr(op, "overloadpacket", None) in lowered_packets
            and op.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd)
        )

    return {k: v for k, v in _full_table().items() if not keep_whole(k)}


# What the backend hands aotgrad: composite ops inductor wants to see as simpler ATen ops.
# A short explicit list (building torch's whole core table costs ~0.3 s per process).
_CURATED = (
    "_softmax",
    "_log_softmax",
    "_softmax_backward_data",
    "_log_softmax_backward_data",
    "native_layer_norm",
    "native_layer_norm_backward",
    "native_batch_norm",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit_functional",
    "_native_batch_norm_legit_no_training",
    "native_batch_norm_backward",
    "native_group_norm",
    "native_group_norm_backward",
    "gelu_backward",
    "silu_backward",
    "sigmoid_backward",
    "tanh_backward",
    "threshold_backward",
    "addcmul",
    "addcdiv",
    "lerp",
    "hardtanh",
    "hardtanh_backward",
    "leaky_relu",
    "leaky_relu_backward",
    "elu",
    "elu_backward",
    "hardswish",
    "hardswish_backward",
    "hardsigmoid",
    "hardsigmoid_backward",
    "logsumexp",
    "log_sigmoid_forward",
    "log_sigmoid_backward",
    "softplus",
    "softplus_backward",
    "mish",
    "mse_loss",
    "mse_loss_backward",
    "std_mean",
    "aminmax",
    "linalg_vector_norm",
    "nll_loss_forward",
    "nll_loss_backward",
    "embedding_dense_backward",
    "rsub",
    "celu",
    "selu",
    "glu",
    "xlogy",
    "logit",
    "logaddexp",
    "frac",
    "deg2rad",
    "rad2deg",
    "binary_cross_entropy",
    "binary_cross_entropy_backward",
    "huber_loss",
    "smooth_l1_loss",
    "l1_loss",
    "tril",
    "triu",
    "norm",
    "var_mean",
    "sgn",
    "square",
    "exp2",
    "_to_copy",
    "unfold",
    "im2col",
    "col2im",
    "trace",
    "diag_embed",
    "hardshrink",
    "softshrink",
    "tanhshrink",
)


@functools.lru_cache(maxsize=1)
def _curated_table() -> dict[Any, Callable[..., Any]]:
    packets = [getattr(aten, name) for name in _CURATED if hasattr(aten, name)]
    return get_decompositions(packets)


def _full_table() -> dict[Any, Callable[..., Any]]:
    return {k: v for k, v in _curated_table().items() if k not in NEVER_DECOMPOSE}


def _lookup(target: Any) -> Callable[..., Any] | None:
    """Curated first; torch's whole core table only for ops the curated list misses."""
    if target in NEVER_DECOMPOSE:
        return None
    return _curated_table().get(target) or core_aten_table().get(target)


class Recorder(AtenRecorder):  # type: ignore[no-untyped-call]
    """ember.ir's recorder keeping only calls that make tensors or write to one: sizes,
    devices and scalars stay plain values, not graph nodes."""

    def records(self, func: Any, out: Any) -> bool:
        return any(isinstance(t, torch.Tensor) for t in tree_flatten(out)[0]) or _mutates(func)


def _mutates(func: Any) -> bool:
    """Whether ``func`` writes to an argument (``_foreach_add_`` returns nothing but does)."""
    schema = getattr(func, "_schema", None)
    return schema is not None and any(
        a.alias_info is not None and a.alias_info.is_write for a in schema.arguments
    )


def decompose_node(fx_node: torch.fx.Node, fake_mode: FakeTensorMode) -> torch.fx.Graph | None:
    """A graph whose placeholders are the node's tensor args (in tree order), or None."""
    fn = _lookup(fx_node.target)
    if fn is None:
        return None
    graph = torch.fx.Graph()
    env: dict[int, torch.fx.Node] = {}
    flat, _ = tree_flatten((fx_node.args, fx_node.kwargs))
    fakes: dict[torch.fx.Node, Any] = {}
    with fake_mode:
        for a in flat:
            if isinstance(a, torch.fx.Node) and a not in fakes:
                val = a.meta["val"]
                if not isinstance(val, torch.Tensor):  # a symbolic size: passed as its value
                    fakes[a] = val
                    continue
                fake = torch.empty_strided(
                    val.shape, val.stride(), dtype=val.dtype, device=val.device
                )
                fakes[a] = fake
                ph = graph.placeholder(a.name)
                ph.meta["val"] = fake
                env[id(fake)] = ph
    args, kwargs = tree_map(
        lambda a: fakes.get(a, a) if isinstance(a, torch.fx.Node) else a,
        (fx_node.args, fx_node.kwargs),
    )
    recorder = Recorder(graph, env)
    try:
        with fake_mode, recorder:
            out = fn(*args, **kwargs)
    except Exception:  # a constant made inside (UnrecordedTensor), or a decomposition
        return None  # rejecting these arguments: ATen will run the op
    graph.output(tree_map(lambda t: env.get(id(t), t) if isinstance(t, torch.Tensor) else t, out))
    for t in tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor) and id(t) not in env:
            return None
    if not _same_shapes(out, fx_node.meta.get("val"), _used_outputs(fx_node)):
        # torch's flash-attention-for-CPU decomposition returns the attention weights
        # where the op returns its logsumexp: a backward reading it would get the wrong tensor
        return None
    return graph


def _used_outputs(fx_node: torch.fx.Node) -> set[int] | None:
    """Indices of a multi-output node's results that are read (``None``: all of them)."""
    if not isinstance(fx_node.meta.get("val"), (tuple, list)):
        return None
    used: set[int] = set()
    for user in fx_node.users:
        if user.target is operator.getitem and isinstance(user.args[1], int):
            used.add(user.args[1])
        else:
            return None
    return used


def _same_shapes(got: Any, want: Any, used: set[int] | None) -> bool:
    """Every used tensor of ``got`` has the shape and dtype of ``want``'s at its position."""
    a, b = tree_flatten(got)[0], tree_flatten(want)[0]
    if len(a) != len(b):
        return False
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if used is not None and i not in used:
            continue
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor) and (
            len(x.shape) != len(y.shape) or x.dtype != y.dtype
            or any(str(p) != str(q) for p, q in zip(x.shape, y.shape, strict=True))
        ):
            return False
    return True
