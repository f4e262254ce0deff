"""``mode="reduce-overhead"``: a compiled graph's calls replayed from CUDA graphs (ADR 0039).

A compiled graph's call (``call(inputs) -> outputs``: the wrapper launching its kernels
and extern calls) is wrapped in :class:`CudaGraphCall`:

1. The first ``warmup`` calls run the wrapper as usual (Triton compiles, autotunes and
   caches its kernels, ATen initialises its libraries).
2. The next call records the wrapper into a ``torch.cuda.CUDAGraph``. Inputs with a
   static address (``nn.Parameter``, a tensor given to ``mark_static_address``, or one
   passed at the same address in the warm-up call) are recorded in place; every other
   input is copied into a static buffer of its own, which the graph reads.
3. Later calls copy the other inputs into their buffers and replay the graph:
   one launch instead of one per kernel. An input recorded in place whose address
   changed (reading memory at the recorded address is right only for the tensor that
   lives there now), or
   outputs of the last replay still held by the caller (the next replay would
   overwrite them), send the call to another recording (up to ``max_graphs``) or, when
   none fits, to the wrapper itself, with a perf hint. Inputs the graph writes in place
   are copied back after the replay.

Each call returns new tensor objects over the graph's output memory, so the caller's
autograd metadata never lands on an object the next call returns again.

Graphs are never recorded when that would be wrong or impossible; each reason is a perf
hint naming the graph: symbolic sizes (the recording is for one size), kernels that
check indices on the host after running (a host sync), ops that read values back to the
host, Triton's interpreter, or a recording that raised (an op that cannot be captured).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from .logs import perf_hints

Call = Callable[[list[Any]], list[Any]]

#: ATen ops that read values back to the host but carry neither of ATen's tags for it
#: (``data_dependent_output``, ``dynamic_output_shape``; ``_syncs`` checks those)
HOST_SYNC_OPS = frozenset({"aten::item", "aten::is_nonzero"})

#: attributes that mark a tensor's address as static (ember's and TorchDynamo's
#: ``mark_static_address``)
STATIC_ATTRS = ("_ember_static_address", "_dynamo_static_input_type")


def _op_name(target: Any) -> str:
    schema = getattr(target, "_schema", None)
    return str(schema.name) if schema is not None else ""


def refusal(gm: torch.fx.GraphModule, *, symbolic: bool, index_checks: bool) -> str | None:
    """Why this graph must not be recorded into a CUDA graph, or None."""
    if symbolic:
        return "it has symbolic sizes (a recording is for one set of sizes)"
    if index_checks:
        return (
            "its kernels check gathered indices on the host after running "
            "(embedding/index/gather: a sync a CUDA graph cannot record)"
        )
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return "Triton's interpreter runs its kernels on the host (TRITON_INTERPRET=1)"
    for node in gm.graph.nodes:
        if node.op == "call_function" and _syncs(node):
            return f"it calls {_op_name(node.target)}, which reads values back to the host"
    return None


#: ops that sync only when an index is a mask (its true positions are read on the host)
MASK_INDEX_OPS = frozenset({"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"})


def _syncs(node: torch.fx.Node) -> bool:
    name = _op_name(node.target)
    if name in MASK_INDEX_OPS:
        indices = node.args[1] if len(node.args) > 1 else ()
        for i in indices if isinstance(indices, (list, tuple)) else ():
            if isinstance(i, torch.fx.Node):
                val = i.meta.get("val")
                if not isinstance(val, torch.Tensor) or val.dtype in (torch.bool, torch.uint8):
                    return True
        return False
    tags = getattr(node.target, "tags", ())
    return (
        name in HOST_SYNC_OPS
        or torch.Tag.data_dependent_output in tags
        or torch.Tag.dynamic_output_shape in tags
    )


def mutated_inputs(gm: torch.fx.GraphModule) -> set[int] | None:
    """Positions of the inputs ``gm`` writes in place (through views too); None if unknown."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    index = {n: i for i, n in enumerate(placeholders)}
    out: set[int] = set()

    def root(x: Any) -> Any:
        while isinstance(x, torch.fx.Node) and x.op == "call_function":
            target = x.target
            if not getattr(target, "is_view", False) or not x.args:
                return x
            x = x.args[0]
        return x

    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            if callable(node.target) and getattr(node.target, "__module__", "") == "_operator":
                continue  # getitem and friends
            return None  # a Python function: what it writes is unknown
        if not schema.is_mutable:
            continue
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is None or not arg.alias_info.is_write:
                continue
            value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
            values = value if isinstance(value, (list, tuple)) else [value]
            for v in values:
                r = root(v)
                if r in index:
                    out.add(index[r])
    return out


def _is_static(t: torch.Tensor) -> bool:
    return isinstance(t, torch.nn.Parameter) or any(getattr(t, a, False) for a in STATIC_ATTRS)


@dataclass
class _Recording:
    #: replays the recorded work (``CUDAGraph.replay``)
    replay: Callable[[], Any]
    #: per input: the static buffer the graph reads, or None (recorded in place)
    buffers: list[torch.Tensor | None]
    #: per input recorded in place: the address it had
    addresses: dict[int, int]
    outputs: list[Any]
    #: per output: the input position it is (the caller's own tensor), if any
    output_is_input: dict[int, int]
    #: per output tensor: (its storage handle, the storage's use count while only this
    #: recording holds it)
    baseline: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: per output tensor: what a replay's fresh tensor over it is made from
    #: (a tensor to call ``new()`` on, the storage, offset, sizes, strides)
    views: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    #: (position, static buffer) of each input a replay copies in
    copied: list[tuple[int, torch.Tensor]] = field(default_factory=list)

    def fits(self, inputs: Sequence[Any]) -> bool:
        return all(inputs[i].data_ptr() == p for i, p in self.addresses.items())

    def free(self) -> bool:
        """Whether the caller let go of every output of the last replay."""
        count = torch._C._storage_Use_Count
        return all(count(handle) <= n for handle, n in self.baseline.values())

    def prepare(self) -> None:
        """Note what each replay does: the inputs it copies in, how it rebuilds each output,
        and each output storage's use count while only this recording holds it."""
        self.copied = [(i, b) for i, b in enumerate(self.buffers) if b is not None]
        for k, o in enumerate(self.outputs):
            if isinstance(o, torch.Tensor) and k not in self.output_is_input:
                storage = o.untyped_storage()  # held here: its handle stays valid
                self.views[k] = (o, storage, o.storage_offset(), o.size(), o.stride())
        for k, (_, storage, *_rest) in self.views.items():
            handle = storage._cdata
            self.baseline[k] = (handle, int(torch._C._storage_Use_Count(handle)))


class CudaGraphCall:
    """``call`` replayed from CUDA graphs after ``warmup`` ordinary calls (module docstring)."""

    def __init__(
        self,
        call: Call,
        device: torch.device,
        mutated: set[int],
        label: str,
        *,
        warmup: int = 1,
        max_graphs: int = 4,
    ) -> None:
        self._call = call
        self._device = device
        self._mutated = mutated
        self._label = label
        self._warmup = warmup
        self._max_graphs = max_graphs
        self._calls = 0
        #: the inputs' addresses at the last warm-up call
        self._last: list[int | None] = []
        self._records: list[_Recording] = []
        self._pool: Any = None
        self._disabled: str | None = None
        self._hinted = False
        #: replays and recordings so far (tests and benchmarks read them)
        self.replays = 0

    @property
    def recordings(self) -> int:
        return len(self._records)

    @property
    def disabled_reason(self) -> str | None:
        return self._disabled

    def __call__(self, inputs: list[Any]) -> list[Any]:
        self._calls += 1
        if self._disabled is not None:
            return self._call(inputs)
        if self._calls <= self._warmup:
            self._last = [a.data_ptr() if isinstance(a, torch.Tensor) else None for a in inputs]
            return self._call(inputs)
        if self._device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return self._call(inputs)  # the caller records a graph around ours
        for rec in self._records:
            if rec.fits(inputs) and rec.free():
                return self._replay(rec, inputs)
        if len(self._records) < self._max_graphs:
            new = self._record(inputs)
            if new is not None:
                self._records.append(new)
                return self._replay(new, inputs)
            return self._call(inputs)
        if not self._hinted:
            self._hinted = True
            perf_hints.info(
                "%s: every one of its %d CUDA graphs has outputs the caller still holds or "
                "static inputs at other addresses; calls run without CUDA graphs meanwhile",
                self._label,
                len(self._records),
            )
        return self._call(inputs)

    def _record(self, inputs: list[Any]) -> _Recording | None:
        buffers: list[torch.Tensor | None] = []
        addresses: dict[int, int] = {}
        static_inputs: list[Any] = []
        for i, a in enumerate(inputs):
            stable = i < len(self._last) and isinstance(a, torch.Tensor) and self._last[i] == a.data_ptr()
            if not isinstance(a, torch.Tensor) or stable or _is_static(a):
                buffers.append(None)
                static_inputs.append(a)
                if isinstance(a, torch.Tensor):
                    addresses[i] = a.data_ptr()
                continue
            buf = torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device=a.device)
            buf.copy_(a)
            buffers.append(buf)
            static_inputs.append(buf)
        try:
            replay, outputs = self._capture(lambda: self._call(list(static_inputs)), static_inputs)
        except Exception as e:  # an op that cannot be recorded: never try again
            self._disable(f"recording it raised {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            return None
        output_is_input: dict[int, int] = {}
        buffer_storages = {
            b.untyped_storage().data_ptr(): i for i, b in enumerate(buffers) if b is not None
        }
        for k, o in enumerate(outputs):
            if not isinstance(o, torch.Tensor):
                continue
            same = next((i for i, a in enumerate(static_inputs) if o is a), None)
            if same is not None:
                output_is_input[k] = same
                continue
            copied = buffer_storages.get(o.untyped_storage().data_ptr())
            if copied is not None and copied not in self._mutated:
                self._disable(
                    f"output {k} is a view of input {copied}, which would alias a static copy of it"
                )
                return None
        rec = _Recording(replay, buffers, addresses, list(outputs), output_is_input)
        rec.prepare()
        perf_hints.info(
            "%s: recorded CUDA graph %d (%d inputs copied per call)",
            self._label,
            len(self._records) + 1,
            sum(b is not None for b in buffers),
        )
        return rec

    def _capture(
        self, run: Callable[[], list[Any]], inputs: Sequence[Any]
    ) -> tuple[Callable[[], Any], list[Any]]:
        """Record ``run``'s work (over ``inputs``) into a CUDA graph: (its replay, the outputs
        the graph writes). Recording runs nothing: the inputs are untouched until a replay."""
        graph = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        torch.cuda.synchronize(self._device)
        try:
            with torch.cuda.device(self._device), torch.cuda.graph(graph, pool=self._pool):
                outputs = run()
        except Exception:
            torch.cuda.synchronize(self._device)
            raise
        return graph.replay, outputs

    def _disable(self, why: str) -> None:
        self._disabled = why
        perf_hints.info("%s: not recorded into a CUDA graph: %s", self._label, why)

    def _replay(self, rec: _Recording, inputs: list[Any]) -> list[Any]:
        for i, buf in rec.copied:
            buf.copy_(inputs[i])
        rec.replay()
        self.replays += 1
        for i, buf in rec.copied:
            if i in self._mutated:
                inputs[i].copy_(buf)
        out: list[Any] = []
        views = rec.views
        for k, o in enumerate(rec.outputs):
            view = views.get(k)
            if view is not None:  # a new tensor object (own version counter) over the output
                like, storage, offset, size, stride = view
                out.append(like.new().set_(storage, offset, size, stride))
            elif k in rec.output_is_input:
                out.append(inputs[rec.output_is_input[k]])
            else:
                out.append(o)
        return out


__all__ = ["HOST_SYNC_OPS", "CudaGraphCall", "mutated_inputs", "refusal"]
