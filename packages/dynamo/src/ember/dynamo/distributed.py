"""DistributedDataParallel: graphs split at gradient-bucket boundaries.

DDP all-reduces gradients bucket by bucket from autograd hooks, so that
communication overlaps the rest of backward. A captured forward compiled
into one graph has one backward (one ``autograd.Function``): every
parameter's gradient appears at its very end, and no bucket can start early.
As TorchDynamo's DDPOptimizer does, ember splits such a graph where DDP's
buckets end (walking the graph backwards, as backward runs, a new piece
starts once the parameters seen fill ``bucket_bytes_cap``) and compiles each
piece with the backend on its own, so each piece's backward finishes, and its
bucket's all-reduce starts, before the earlier pieces' backward runs.

Both ways round are handled: ``compile(DDP(model))`` runs DDP's forward as
it is and the wrapped module's forward compiled (:class:`DDPForward`), and
``DDP(compile(model))`` needs nothing more; in both, graphs compiled while
DDP's forward is active (``DistributedDataParallel._active_ddp_module``) are
split by :func:`split_for_ddp`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from torch.fx.passes.split_module import split_module

from .frame import CompilerFn
from .hooked_call import forward_replaced
from .logs import get_logger

log = get_logger("dynamo")
perf_log = get_logger("perf_hints")


def ddp_type() -> type[torch.nn.Module] | None:
    """``DistributedDataParallel`` when torch.distributed is built, else ``None``."""
    if not torch.distributed.is_available():
        return None
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel


def is_ddp(module: Any) -> bool:
    cls = ddp_type()
    return cls is not None and isinstance(module, cls)


def wrapped_module(module: torch.nn.Module) -> torch.nn.Module:
    """The module a DDP wraps (its ``module`` submodule); ``module`` itself otherwise."""
    if not is_ddp(module):
        return module
    inner = module.module
    if not isinstance(inner, torch.nn.Module):
        raise TypeError(f"DistributedDataParallel.module is a {type(inner).__name__}, not a module")
    return inner


def active_ddp_module() -> torch.nn.Module | None:
    """The DDP module whose forward is running now (DDP sets it around the
    wrapped module's call), or ``None``."""
    cls = ddp_type()
    if cls is None:
        return None
    return getattr(cls, "_active_ddp_module", None)


FULLGRAPH_MESSAGE = (
    "ember.dynamo.compile(DistributedDataParallel(...), fullgraph=True): DDP cannot run as "
    "one graph. Its forward synchronizes buffers and prepares gradient buckets in Python, "
    "and its all-reduces run from autograd hooks between backward pieces, so ember splits "
    "the captured forward at gradient-bucket boundaries (bucket_cap_mb). Drop fullgraph=True, "
    "or compile the inner module with fullgraph=True and wrap it in DDP "
    "(DDP(ember.dynamo.compile(model, fullgraph=True))) to get one unsplit graph whose "
    "all-reduces all wait for the end of backward."
)


class DDPForward:
    """``forward`` of ``compile(DDP(model))``: DDP's own forward, eagerly, with
    the wrapped module's ``forward`` replaced by ``compiled`` for the call."""

    def __init__(self, ddp: torch.nn.Module, compiled: Callable[..., Any]) -> None:
        self.ddp = ddp
        self.compiled = compiled

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with forward_replaced(wrapped_module(self.ddp), self.compiled):
            return self.ddp.forward(*args, **kwargs)


# -- splitting a graph at bucket boundaries ---------------------------------------


def _node_params(gm: torch.fx.GraphModule, node: torch.fx.Node) -> list[torch.nn.Parameter]:
    """The trainable parameters ``node`` reads: a ``get_attr`` of one, or every
    parameter of the submodule a ``call_module`` runs."""
    if node.op not in ("get_attr", "call_module"):
        return []
    value: Any = gm
    for part in str(node.target).split("."):
        value = getattr(value, part, None)
    if isinstance(value, torch.nn.Module):
        return [p for p in value.parameters() if p.requires_grad]
    if isinstance(value, torch.nn.Parameter) and value.requires_grad:
        return [value]
    return []


def bucket_partitions(gm: torch.fx.GraphModule, bucket_bytes_cap: int) -> dict[torch.fx.Node, int]:
    """Each computing node's piece, numbered in forward order.

    Walks the graph backwards (the order backward runs in) and starts a new
    piece once the current one holds at least ``bucket_bytes_cap`` bytes of
    trainable parameters, as DDP fills its buckets. A parameter read twice
    counts where backward meets it first.
    """
    reverse_buckets: dict[torch.fx.Node, int] = {}
    seen: set[int] = set()
    bucket, filled = 0, 0
    for node in reversed(gm.graph.nodes):
        if node.op in ("placeholder", "output"):
            continue
        fresh = [p for p in _node_params(gm, node) if id(p) not in seen]
        seen.update(id(p) for p in fresh)
        size = sum(p.numel() * p.element_size() for p in fresh)
        if size and filled >= bucket_bytes_cap:
            bucket, filled = bucket + 1, 0
        filled += size
        reverse_buckets[node] = bucket
    last = bucket
    return {node: last - b for node, b in reverse_buckets.items()}


def split_for_ddp(
    gm: torch.fx.GraphModule, bucket_bytes_cap: int
) -> tuple[torch.fx.GraphModule, int]:
    """``gm`` split into one submodule per bucket (``submod_<i>``), and their count."""
    partitions = bucket_partitions(gm, bucket_bytes_cap)
    count = len(set(partitions.values())) or 1
    if count == 1:
        return gm, 1
    split = split_module(gm, gm, lambda node: partitions[node], keep_original_order=True)
    return split, count


class _LazySubgraph(torch.nn.Module):
    """One piece of a split graph, compiled by ``compiler`` on its first call
    (with that call's tensors as example inputs, as capture gives them)."""

    def __init__(self, gm: torch.fx.GraphModule, compiler: CompilerFn) -> None:
        super().__init__()
        self.gm = gm
        self._compiler = compiler
        self._compiled: Callable[..., Any] | None = None

    def forward(self, *args: Any) -> Any:
        if self._compiled is None:
            self._compiled = self._compiler(self.gm, list(args))
        return self._compiled(*args)


def split_at_ddp_buckets(compiler: CompilerFn, fullgraph: bool) -> CompilerFn:
    """``compiler`` that splits graphs captured inside DDP's forward at its
    bucket boundaries (each piece compiled on its own); other graphs as they are."""

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        ddp = active_ddp_module()
        if ddp is None:
            return compiler(gm, example_inputs)
        if fullgraph:
            perf_log.warning(
                "DDP with fullgraph=True: the graph is not split at gradient-bucket boundaries, "
                "so every bucket's all-reduce waits for the whole backward"
            )
            return compiler(gm, example_inputs)
        cap = int(getattr(ddp, "bucket_bytes_cap", 25 * 1024 * 1024))
        split, count = split_for_ddp(gm, cap)
        log.info("DDP: graph split into %d piece(s) at bucket boundaries (bucket_bytes_cap=%d)", count, cap)
        if count == 1:
            return compiler(gm, example_inputs)
        for name, child in list(split.named_children()):
            if isinstance(child, torch.fx.GraphModule):
                setattr(split, name, _LazySubgraph(child, compiler))
        return split.forward

    return compile_graph
