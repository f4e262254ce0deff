"""Public entry points: ``aot_function``, ``aot_module``, ``aot_autograd``.

The pipeline for one call signature (input shapes, dtypes, strides,
requires_grad, grad mode, non-tensor arguments), visible in one place in
:meth:`AotFunction.compile`:

    trace_graph (trace + functionalize)  ->  partition  ->  fw/bw compilers  ->  CompiledPlan

Compiled plans are cached per signature, so calling again with the same kind
of inputs only runs the compiled code.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.fx as fx
from torch.utils._pytree import TreeSpec, tree_flatten, tree_unflatten, treespec_dumps

from ember.aotgrad import logs, plan_cache
from ember.aotgrad.backward_fallback import BackwardFallback, Source
from ember.aotgrad.debug import debug_dir_from_env, own_folder, write_graphs
from ember.aotgrad.decompositions import DecompMapping, with_required
from ember.aotgrad.errors import AotGradError, FunctionalizationError, TraceError
from ember.aotgrad.exchange import example_inputs, round_trip
from ember.aotgrad.floats import (
    FLOAT_SYMBOL,
    lift_floats,
    symbolic_floats,
    tracing_floats,
    with_float_tensors,
)
from ember.aotgrad.joint import FakeInputs, TracedGraph, copy_saved_aliases, trace_graph
from ember.aotgrad.partition import (
    Partition,
    default_partition,
    min_cut_rematerialization_partition,
    node_bytes,
)
from ember.aotgrad.plan_cache import StoredPlan
from ember.aotgrad.regions import has_regions, run_marking_regions
from ember.aotgrad.runtime import Compiled, CompiledPlan
from ember.aotgrad.sizes import bind_sizes, expr_of, pass_sizes, symint_args
from ember.aotgrad.subclasses import compile_desugared, has_subclass_inputs
from ember.ir.cache_entry import default_cache_dir, paused_gc
from ember.ir.debug import debug_dir_of, set_debug_dir
from ember.ir.logs import get_logger, reason, traceback_wanted
from ember.ir.stages import record as record_stage
from ember.ir.stages import stage
from ember.ir.updates import input_updates_of, set_input_updates

LOG = get_logger("aotgrad")


class GraphCompiler(Protocol):
    """``(gm, example_inputs) -> callable``: torch.compile's backend signature."""

    def __call__(self, gm: fx.GraphModule, example_inputs: list[torch.Tensor]) -> Compiled: ...


class PartitionFn(Protocol):
    def __call__(self, joint: fx.GraphModule, *, num_fw_outputs: int) -> Partition: ...


@dataclass(frozen=True, slots=True)
class AotOptions:
    """Options of one aot_function / aot_module / aot_autograd instance.

    fallback_to_eager: if tracing or partitioning raises an AotGradError, log
        the reason (logger ``ember.aotgrad``, WARNING) and run the function
        eagerly for that signature instead of raising. On for backends, where
        a graph that cannot be compiled must still run.
    exchange_dir: when set, every graph is saved there as an ember.ir
        ATen-dialect GraphIR and loaded back before it reaches a compiler, so
        the compilers see exactly what the file contract carries.
    debug_dir: write every joint/forward/backward graph there (readable code
        and GraphIR). Defaults from ``EMBER_COMPILE_DEBUG=1`` (see debug.py).
    cache: keep traced and partitioned graphs of FX-graph functions on disk
        (``plan_cache.py``), so a second process skips tracing; the inductor
        backend turns it on. ``EMBER_AOT_CACHE=0`` turns it off everywhere.
    cache_dir: where (default ``EMBER_CACHE_DIR``, else ``~/.cache/ember``).
    strict: with ``fallback_to_eager``, still raise internal errors (everything but a
        ``TraceError`` or ``FunctionalizationError``, which name documented limits).
        None: ``EMBER_STRICT=1`` in the environment turns it on.
    """

    exchange_dir: str | None = None
    fallback_to_eager: bool = False
    debug_dir: str | None = None
    cache: bool = False
    cache_dir: str | None = None
    strict: bool | None = None


def nop_compiler(gm: fx.GraphModule, example_inputs: list[torch.Tensor]) -> Compiled:
    """A compiler that runs the graph as is (eager ATen calls)."""
    return gm


def _compile_graph(compiler: GraphCompiler, gm: fx.GraphModule, name: str,
                   options: AotOptions) -> Compiled:
    inputs = example_inputs(gm)
    if options.exchange_dir is not None:
        folder = debug_dir_of(gm)
        updates = input_updates_of(gm)
        gm = round_trip(gm, options.exchange_dir, name)
        set_debug_dir(gm, folder)
        set_input_updates(gm, updates)
    return compiler(gm, inputs)


def _signature(t: torch.Tensor) -> Hashable:
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype, t.device,
            t.requires_grad, type(t))


def _const_key(value: Any) -> Hashable:
    try:
        hash(value)
        return (type(value), value)
    except TypeError:
        return (type(value), repr(value))


def _autocast_state() -> Hashable:
    """Autocast changes which ops get traced, so it is part of the cache key."""
    return tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d))
                 for d in ("cpu", "cuda"))


@functools.cache
def _repro_hooks() -> tuple[Any, ...]:
    """Installed ``ember.repro`` hooks, looked up once per process (a scan costs ~50 ms)."""
    return tuple(entry_points(group="ember.repro", name="wrap_backend"))


def _with_repro_hook(compiler: GraphCompiler) -> GraphCompiler:
    """Let an installed ember.minifier wrap ``compiler`` (``EMBER_REPRO_AFTER=aot``).

    The hook is found by entry point (group ``ember.repro``, name ``wrap_backend``),
    so aotgrad never imports the minifier; it returns ``compiler`` unchanged
    unless its environment settings ask for the aot stage.
    """
    for ep in _repro_hooks():
        try:
            wrapped: GraphCompiler = ep.load()(compiler, after="aot")
        except Exception as e:  # a broken optional hook must not break compiling
            LOG.warning("ignoring the ember.repro hook %s: %s: %s", ep.value, type(e).__name__, e)
            continue
        return wrapped
    return compiler


class AotFunction:
    """``fn`` compiled ahead of time; call it like ``fn``."""

    def __init__(
        self,
        fn: Callable[..., Any],
        fw_compiler: GraphCompiler,
        bw_compiler: GraphCompiler | None = None,
        partition_fn: PartitionFn = min_cut_rematerialization_partition,
        decompositions: DecompMapping | None = None,
        options: AotOptions | None = None,
        source_graph: fx.GraphModule | None = None,
    ) -> None:
        logs.configure_from_env()
        self.fn = fn
        #: the FX graph ``fn`` runs, when it is one: what the plan cache key is made from
        self.source_graph = source_graph
        self._table_text: str | None = None
        self.fw_compiler = _with_repro_hook(fw_compiler)
        self.bw_compiler = (self.fw_compiler if bw_compiler is None
                            else _with_repro_hook(bw_compiler))
        self.partition_fn = partition_fn
        self.decompositions = with_required(decompositions)
        options = options or AotOptions()
        if options.debug_dir is None:
            options = replace(options, debug_dir=debug_dir_from_env())
        if options.strict is None:
            options = replace(options, strict=os.environ.get("EMBER_STRICT") == "1")
        self.options = options
        self.cache: dict[Hashable, tuple[CompiledPlan | None, TreeSpec | None]] = {}
        self.last_traced: TracedGraph | None = None
        self.last_partition: Partition | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat, in_spec, tensors, positions = _flatten_call(args, kwargs)
        key = (
            in_spec,
            tuple(positions),
            tuple(_signature(t) for t in tensors),
            tuple(_const_key(a) for a in flat if not isinstance(a, torch.Tensor)),
            torch.is_grad_enabled(),
            _autocast_state(),
        )
        entry = self.cache.get(key)
        if entry is None:
            entry = self._compile_or_fallback(flat, positions, in_spec, tensors)
            self.cache[key] = entry
        plan, out_spec = entry
        if plan is None:
            return self.fn(*args, **kwargs)
        assert out_spec is not None
        return tree_unflatten(plan(tensors), out_spec)

    def _compile_or_fallback(
        self, flat: list[Any], positions: list[tuple[int, int]], in_spec: TreeSpec,
        tensors: list[torch.Tensor],
    ) -> tuple[CompiledPlan | None, TreeSpec | None]:
        try:
            return self.compile(flat, positions, in_spec, tensors)
        except Exception as e:
            if not _falls_back(self.options, e):
                raise
            _log_fallback(getattr(self.fn, "__qualname__", type(self.fn).__name__), e)
            return None, None

    def compile_symbolic(
        self, args: tuple[Any, ...], fakes: dict[int, torch.Tensor]
    ) -> SymbolicCall:
        """Trace once for every size the symbolic fakes allow; ``fakes`` maps ``id`` of a
        real argument tensor to a fake of it whose sizes are ember size symbols (the
        others are traced with their real sizes). The caller (ember.dynamo's guards)
        ensures later calls fit; the plan is not looked up by input sizes."""
        flat, in_spec, tensors, positions = _flatten_call(args, {})
        plan, out_spec = self.compile_fakes(flat, positions, in_spec, tensors, fakes)
        return SymbolicCall(self, plan, out_spec, in_spec, positions)

    def compile_fakes(
        self, flat: list[Any], positions: list[tuple[int, int]], in_spec: TreeSpec,
        tensors: list[torch.Tensor], fakes: dict[int, torch.Tensor],
    ) -> tuple[CompiledPlan, TreeSpec]:
        """:meth:`compile`, traced with the symbolic fakes of ``fakes`` (by ``id`` of the
        real tensor) instead of the real sizes, and never looked up in the plan cache."""

        def fake_inputs(mode: Any) -> list[torch.Tensor]:
            return [symbolic_fake(mode, fakes[id(t)], t) if id(t) in fakes
                    else mode.from_tensor(t.detach()) for t in tensors]

        stored = self._trace(flat, positions, in_spec, tensors, fake_inputs)
        joint = self.last_traced.gm if self.last_traced is not None and self.last_traced.is_joint \
            else None
        self._report(stored, joint)
        source = self._source(flat, positions, in_spec, symbolic=True)
        return self._compile_stored(stored, source), stored.out_spec

    def _debug_folder(self) -> Path | None:
        """Where this compile's graphs go: the folder the frontend named for the
        source graph, else (``EMBER_COMPILE_DEBUG``) a fresh one of aotgrad's own."""
        named = debug_dir_of(self.source_graph)
        if named is not None:
            return Path(named)
        if self.options.debug_dir is not None:
            name = getattr(self.fn, "__qualname__", type(self.fn).__name__)
            return own_folder(self.options.debug_dir, name)
        return None

    def _report(self, stored: StoredPlan, joint: fx.GraphModule | None) -> None:
        """Log and write (``EMBER_COMPILE_DEBUG``) the graphs about to be compiled,
        traced now or loaded from the plan cache; name the compilers' folders."""
        if stored.backward is not None:
            graphs = {"forward": stored.forward, "backward": stored.backward}
            saves = f"{stored.num_saved} values"
            part = self.last_partition
            if joint is not None and part is not None:
                logs.log_graph("joint graph", joint)
                saved_bytes = sum(node_bytes(n) for n in part.backward.graph.nodes
                                  if n.op == "placeholder" and n.name in part.saved)
                saves += f", {saved_bytes} bytes: {', '.join(part.saved)}"
            logs.log_graph(f"forward graph (saves {saves})", stored.forward)
            logs.log_graph("backward graph", stored.backward)
        else:
            graphs = {"inference": stored.forward}
            logs.log_graph("inference graph", stored.forward)
        folder = self._debug_folder()
        if folder is None:
            return
        write_graphs(folder, {"joint": joint, **graphs} if joint is not None else graphs)
        for kind, gm in graphs.items():
            set_debug_dir(gm, folder / f"compiled_{kind}")

    def compile(
        self, flat: list[Any], positions: list[tuple[int, int]], in_spec: TreeSpec,
        tensors: list[torch.Tensor],
    ) -> tuple[CompiledPlan, TreeSpec]:
        key = self._persistent_key(flat, positions, in_spec, tensors)
        source = self.source_graph
        stored = plan_cache.lookup(self._cache_dir(), key, source) if key is not None else None
        if key is not None:
            record_stage(debug_dir_of(source), stage="aotgrad.plan_cache",
                         cache="miss" if stored is None else "hit")
        joint: fx.GraphModule | None = None
        if stored is None:
            stored = self._trace(flat, positions, in_spec, tensors)
            if key is not None:
                plan_cache.store(self._cache_dir(), key, stored, source)
            if self.last_traced is not None and self.last_traced.is_joint:
                joint = self.last_traced.gm
        else:
            LOG.debug("ember.aotgrad: traced graphs of %s loaded from the plan cache",
                      getattr(self.fn, "__qualname__", "?"))
            self._report(stored, joint)
            with paused_gc():  # a warm start: the backend's caches hit too (cache_entry.paused_gc)
                return self._compile_stored(
                    stored, self._source(flat, positions, in_spec, symbolic=False)), stored.out_spec
        self._report(stored, joint)
        return self._compile_stored(
            stored, self._source(flat, positions, in_spec, symbolic=False)), stored.out_spec

    def _source(self, flat: list[Any], positions: list[tuple[int, int]],
                in_spec: TreeSpec, symbolic: bool) -> Source | None:
        """The traced function as ``inputs -> flat outputs`` (what a backward that raised
        runs again, ``backward_fallback.py``); None where a call's other arguments are not
        those of the trace (a size passed as an int to a graph traced with symbolic sizes)."""
        if symbolic and any(isinstance(a, (int, float, torch.SymInt, torch.SymFloat))
                            and not isinstance(a, bool)
                            for a in flat if not isinstance(a, torch.Tensor)):
            return None
        fn = self.fn
        # the trace's own tensors are not held: every one is replaced by a call's input
        template = [None if isinstance(a, torch.Tensor) else a for a in flat]

        def source(inputs: list[Any]) -> list[Any]:
            values = list(template)
            for pos, k in positions:
                values[pos] = inputs[k]
            a, kw = tree_unflatten(values, in_spec)
            return list(tree_flatten(fn(*a, **kw))[0])

        return source

    def _compile_stored(self, stored: StoredPlan, source: Source | None = None) -> CompiledPlan:
        fallback: BackwardFallback | None = None
        if stored.backward is not None:
            fw = _compile_graph(self.fw_compiler, stored.forward, "forward", self.options)
            bw = _compile_graph(self.bw_compiler, stored.backward, "backward", self.options)
            if self.options.fallback_to_eager and not self.options.strict:
                # a compiled backward that raises: the gradients another way (ADR 0047)
                name = getattr(self.fn, "__qualname__", type(self.fn).__name__)
                fallback = BackwardFallback.of(name, stored.forward, stored.backward, source,
                                               stored.outputs, stored.mutated_inputs)
        else:
            # output k of an inference graph is the new value of input mutated_inputs[k]: a
            # compiler may write it into that input and return the input itself (ADR 0032)
            set_input_updates(stored.forward, enumerate(stored.mutated_inputs))
            fw = _compile_graph(self.fw_compiler, stored.forward, "inference", self.options)
            bw = None
        return CompiledPlan(forward=fw, backward=bw, fallback=fallback, **stored.bookkeeping())

    def _trace(
        self, flat: list[Any], positions: list[tuple[int, int]], in_spec: TreeSpec,
        tensors: list[torch.Tensor], fake_inputs: FakeInputs | None = None,
    ) -> StoredPlan:
        """Trace (and partition, when gradients are needed): the graphs and their bookkeeping."""
        wrapped = [i for i, t in enumerate(tensors) if _functorch_wrapped(t)]
        if wrapped:
            raise TraceError(
                f"inputs {wrapped} are tensors of a torch.func transform (vmap, grad, jacrev, "
                "...) the compiled function is called inside; ember.aotgrad traces plain "
                "tensors, so the graph runs eagerly under the transform")
        out_spec: list[TreeSpec] = []

        def flat_fn(*inputs: torch.Tensor) -> Sequence[Any]:
            values = list(flat)
            for pos, k in positions:
                values[pos] = inputs[k]
            a, k = tree_unflatten(values, in_spec)
            outs, spec = tree_flatten(self.fn(*a, **k))
            out_spec.append(spec)
            return outs

        joint = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
        folder = debug_dir_of(self.source_graph)
        with stage("aotgrad.trace", folder=folder):
            traced = trace_graph(flat_fn, tensors, self.decompositions, joint=joint,
                                 fake_inputs=fake_inputs)
        self.last_traced = traced
        backward: fx.GraphModule | None = None
        if traced.is_joint:
            with symint_args(), stage("aotgrad.partition", folder=folder):
                part = self.partition_fn(traced.gm, num_fw_outputs=traced.num_fw_outputs)
            part = pass_sizes(part)
            copy_saved_aliases(part.forward, traced)
            self.last_partition = part
            forward, backward, num_saved = part.forward, part.backward, len(part.saved)
        else:
            forward, num_saved = bind_sizes(traced.gm), 0
        return StoredPlan(
            forward=forward,
            backward=backward,
            num_inputs=traced.num_inputs,
            mutated_inputs=traced.mutated_inputs,
            num_user_outputs=traced.num_user_outputs,
            outputs=traced.outputs,
            tangent_mask=traced.tangent_mask,
            grad_inputs=traced.grad_inputs,
            num_saved=num_saved,
            out_spec=out_spec[-1],
            copied_inputs=traced.copied_inputs,
            grad_tangents=traced.grad_tangents,
            output_strides=traced.output_strides,
        )

    def _cache_dir(self) -> str:
        return self.options.cache_dir or default_cache_dir()

    def _persistent_key(
        self, flat: list[Any], positions: list[tuple[int, int]], in_spec: TreeSpec,
        tensors: list[torch.Tensor],
    ) -> str | None:
        """The plan cache key of this call, or None (cache off, or ``fn`` is not an FX graph)."""
        if (not self.options.cache or self.source_graph is None
                or os.environ.get("EMBER_AOT_CACHE") == "0"):
            return None
        try:
            spec = treespec_dumps(in_spec)
        except Exception:  # a container pytree cannot write: no persistent key
            return None
        call = repr((
            spec,
            positions,
            [(tuple(t.shape), tuple(t.stride()), t.storage_offset(), str(t.dtype), str(t.device),
              t.requires_grad, type(t).__qualname__) for t in tensors],
            [repr(a) for a in flat if not isinstance(a, torch.Tensor)],
            torch.is_grad_enabled(),
            _autocast_state(),
            _weight_aliases(self.source_graph),
        ))
        if self._table_text is None:
            self._table_text = plan_cache.table_fingerprint(self.decompositions)
        return plan_cache.plan_key(self.source_graph, call, self._table_text,
                                   plan_cache.fn_name(self.partition_fn))


def _functorch_wrapped(t: torch.Tensor) -> bool:
    """Whether ``t`` is a torch.func transform's wrapper (a batched or grad-tracking tensor)."""
    return bool(torch._C._functorch.is_functorch_wrapped_tensor(t))


def _weight_aliases(gm: fx.GraphModule) -> list[list[str]]:
    """The source graph's weights that are one tensor under several names (tied weights):
    a stored plan names each graph constant by one weight, so a plan traced with
    ``head.weight`` tied to ``embed.weight`` must not serve the same graph untied."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    named = (*gm.named_parameters(remove_duplicate=False),
             *gm.named_buffers(remove_duplicate=False))
    for name, t in named:
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape),
               tuple(t.stride()), t.dtype)
        groups.setdefault(key, []).append(name)
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)


def _flatten_call(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[Any], TreeSpec, list[torch.Tensor], list[tuple[int, int]]]:
    """(flat arguments, their spec, the distinct tensors, (flat position, tensor index))."""
    flat, in_spec = tree_flatten((args, kwargs))
    # each distinct tensor is one graph input, however often it is passed
    index: dict[int, int] = {}
    tensors: list[torch.Tensor] = []
    positions: list[tuple[int, int]] = []
    for i, a in enumerate(flat):
        if isinstance(a, torch.Tensor):
            if id(a) not in index:
                index[id(a)] = len(tensors)
                tensors.append(a)
            positions.append((i, index[id(a)]))
    return flat, in_spec, tensors, positions


def symbolic_fake(mode: Any, like: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """A fake of ``real`` in ``mode`` with the symbolic sizes and strides of ``like``."""
    env = shape_env_of_tensor(like)
    if env is None:
        plain: torch.Tensor = mode.from_tensor(real.detach())
        if hasattr(like, FLOAT_SYMBOL):  # a dynamic Python float's tensor (ADR 0044)
            setattr(plain, FLOAT_SYMBOL, getattr(like, FLOAT_SYMBOL))
        return plain
    # sizes a guard pinned since capture started (``Eq(s2, 32)``) are traced as ints
    sizes = [env.simplify(expr_of(s)) if expr_of(s) is not None else int(s) for s in like.shape]
    strides = [env.simplify(expr_of(s)) if expr_of(s) is not None else int(s) for s in like.stride()]
    fake: torch.Tensor = env.fake_tensor(mode, sizes, strides, real.dtype, real.device)
    return fake


def shape_env_of_tensor(t: torch.Tensor) -> Any:
    """The ember ShapeEnv of a fake tensor's symbolic sizes (``None`` for other tensors)."""
    for s in (*t.shape, *t.stride()):
        env = getattr(getattr(s, "node", None), "env", None)
        if env is not None and expr_of(s) is not None:
            return env
    return None


class SymbolicCall:
    """A plan traced with symbolic sizes, called without a per-size lookup.

    Falls back to the per-signature path of its :class:`AotFunction` when the
    call's structure differs from the traced one (an argument passed twice).
    """

    def __init__(self, aot: AotFunction, plan: CompiledPlan, out_spec: TreeSpec,
                 in_spec: TreeSpec, positions: list[tuple[int, int]]) -> None:
        self.aot = aot
        self.plan = plan
        self.out_spec = out_spec
        self.in_spec = in_spec
        self.positions = positions

    def __call__(self, *args: Any) -> Any:
        _, in_spec, tensors, positions = _flatten_call(args, {})
        if positions != self.positions or in_spec != self.in_spec:
            return self.aot(*args)
        return tree_unflatten(self.plan(tensors), self.out_spec)


def aot_function(
    fn: Callable[..., Any],
    fw_compiler: GraphCompiler,
    bw_compiler: GraphCompiler | None = None,
    partition_fn: PartitionFn = min_cut_rematerialization_partition,
    decompositions: DecompMapping | None = None,
    options: AotOptions | None = None,
) -> AotFunction:
    """Trace ``fn``'s forward and backward ahead of time and compile each graph.

    ``fw_compiler(gm, example_inputs)`` receives the forward graph (and the
    inference graph when no gradient is needed), ``bw_compiler`` (default: the
    forward compiler) the backward graph; example inputs are fake tensors.
    ``partition_fn`` splits the joint graph (default: min-cut
    rematerialization); ``decompositions`` maps ATen ops to decompositions
    applied while tracing.
    """
    return AotFunction(fn, fw_compiler, bw_compiler, partition_fn, decompositions, options)


class AotModule(torch.nn.Module):
    """``mod`` with its forward compiled by aot_function; parameters stay live."""

    def __init__(self, mod: torch.nn.Module, compiled: AotFunction) -> None:
        super().__init__()
        self.orig_module = mod
        self._compiled = compiled

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        params = dict(self.orig_module.named_parameters())
        buffers = dict(self.orig_module.named_buffers())
        return self._compiled(params, buffers, *args, **kwargs)


class _MarkingRegions(torch.nn.Module):
    """Runs ``gm`` through ``regions.run_marking_regions`` (its tensors under ``gm.``)."""

    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__()
        self.gm = gm

    def forward(self, *args: Any) -> Any:
        return run_marking_regions(self.gm, *args)


def aot_module(
    mod: torch.nn.Module,
    fw_compiler: GraphCompiler,
    bw_compiler: GraphCompiler | None = None,
    partition_fn: PartitionFn = min_cut_rematerialization_partition,
    decompositions: DecompMapping | None = None,
    options: AotOptions | None = None,
) -> AotModule:
    """Like :func:`aot_function` for ``mod.forward``; parameters and buffers become
    graph inputs, so training updates are seen and buffer updates (BatchNorm
    running statistics) are written back to ``mod``."""

    target: torch.nn.Module = mod
    prefix = ""
    if isinstance(mod, fx.GraphModule) and has_regions(mod):
        # checkpointed regions: run the graph node by node so the ATen ops of each
        # region are marked (``regions.py``)
        target, prefix = _MarkingRegions(mod), "gm."

    def functional(params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor],
                   *args: Any, **kwargs: Any) -> Any:
        if prefix:
            params = {prefix + k: v for k, v in params.items()}
            buffers = {prefix + k: v for k, v in buffers.items()}
        return torch.func.functional_call(target, (params, buffers), args, kwargs)

    functional.__qualname__ = f"{type(mod).__name__}.forward"
    compiled = AotFunction(functional, fw_compiler, bw_compiler, partition_fn, decompositions,
                           options, mod if isinstance(mod, fx.GraphModule) else None)
    return AotModule(mod, compiled)


def aot_inference(
    gm: fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    compiler: GraphCompiler,
    decompositions: DecompMapping | None = None,
    options: AotOptions | None = None,
) -> Callable[..., Any]:
    """Compile ``gm`` for inference, for inputs exactly like ``example_inputs`` (or, where
    ``gm``'s placeholders hold ember size symbols, for every size the frontend's guards admit).

    For frontends that guard their inputs (ember.dynamo, torch.compile with static
    shapes) and call under ``no_grad`` or with nothing requiring grad: the graph is
    traced once (functionalized: in-place ops become functional ones), compiled by
    ``compiler``, and the callable checks nothing per call. Inputs the graph mutates
    are written back and outputs that alias inputs or each other are rebuilt as views
    (see ``aliasing.py``); a graph with neither is returned as ``compiler`` made it.
    Graphs that cannot be traced run eagerly (logged), unless ``options`` says otherwise.
    """
    if has_subclass_inputs(gm, example_inputs):  # DTensors: traced over their local tensors
        return _desugared(gm, example_inputs, options, lambda g, ex: aot_inference(
            g, ex, compiler, decompositions, options))
    floats = symbolic_floats(gm)
    if floats:  # dynamic Python floats: traced as 0-d float64 tensor inputs (ADR 0044)
        lifted, examples, table = lift_floats(gm, example_inputs, floats)
        with tracing_floats(table):
            inner = aot_inference(lifted, examples, compiler, decompositions, options)
        return with_float_tensors(inner, sorted(floats))
    opts = options or AotOptions(fallback_to_eager=True)
    fn = AotFunction(gm, compiler, None, default_partition, decompositions, opts, gm)
    tensors = list(example_inputs)
    flat, in_spec = tree_flatten((tuple(tensors), {}))
    positions = [(i, i) for i in range(len(tensors))]
    fakes = _symbolic_fakes(gm, tensors)
    try:
        with torch.no_grad():
            if fakes:  # traced now for every size the frontend's guards admit (no plan cache)
                plan, out_spec = fn.compile_fakes(flat, positions, in_spec, tensors, fakes)
            else:
                plan, out_spec = fn.compile(flat, positions, in_spec, tensors)
    except Exception as e:
        if not _falls_back(fn.options, e):
            raise
        _log_fallback(getattr(gm, "__qualname__", type(gm).__name__), e)
        return gm
    if plan.is_direct and out_spec.num_leaves == len(plan.outputs) and out_spec.type in (
            list, tuple):
        return plan.forward  # outputs in order, no write-backs, no views: nothing to add
    if not fakes and plan.mutated_inputs:
        # static sizes: every call's inputs have these layouts (the frontend guards them),
        # so which mutated inputs overlap themselves is known now, not checked per call
        plan = replace(plan, overlapping=frozenset(
            i for i in plan.mutated_inputs if torch._debug_has_internal_overlap(tensors[i]) == 1))

    def run(*args: torch.Tensor) -> Any:
        return tree_unflatten(plan(list(args)), out_spec)

    return run


def _desugared(gm: fx.GraphModule, example_inputs: Sequence[Any], options: AotOptions | None,
               backend: Callable[[fx.GraphModule, list[Any]], Callable[..., Any]]
               ) -> Callable[..., Any]:
    """``gm`` over DTensors compiled over their local tensors (``subclasses.py``); a graph
    that cannot be desugared runs eagerly (logged), as an untraceable one does."""
    try:
        return compile_desugared(gm, example_inputs, backend)
    except Exception as e:
        if not _falls_back(options or AotOptions(fallback_to_eager=True), e):
            raise
        _log_fallback(getattr(gm, "__qualname__", type(gm).__name__), e, " (tensor subclasses)")
        return gm


def _falls_back(options: AotOptions, e: Exception) -> bool:
    """Whether a compile failure runs the function eagerly (else it is raised)."""
    if not options.fallback_to_eager:
        return False
    return not options.strict or isinstance(e, (TraceError, FunctionalizationError))


def _log_fallback(name: str, e: Exception, what: str = "") -> None:
    """One warning line: the graph, the stage and the reason; the traceback (and a long
    message's rest) at ``EMBER_LOGS=+aotgrad`` or ``+dynamo``."""
    kind = "could not compile" if isinstance(e, AotGradError) else "failed compiling"
    LOG.warning("ember.aotgrad %s %s%s, running it eagerly: %s", kind, name, what, reason(e),
                exc_info=e if traceback_wanted("aotgrad") else None)


def aot_autograd(
    fw_compiler: GraphCompiler,
    bw_compiler: GraphCompiler | None = None,
    partition_fn: PartitionFn = min_cut_rematerialization_partition,
    decompositions: DecompMapping | None = None,
    options: AotOptions | None = None,
) -> Callable[[fx.GraphModule, list[torch.Tensor]], Callable[..., Any]]:
    """A dynamo backend ``(gm, example_inputs) -> callable`` that runs ``gm`` through aotgrad.

    Graphs that cannot be traced fall back to running ``gm`` eagerly, with the
    reason logged (``ember.aotgrad`` logger), unless ``options`` says otherwise.
    """
    opts = options or AotOptions(fallback_to_eager=True)

    def backend(gm: fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        if has_subclass_inputs(gm, example_inputs):  # DTensors: traced over their local tensors
            return _desugared(gm, example_inputs, opts, backend)
        floats = symbolic_floats(gm)
        if floats:  # dynamic Python floats: traced as 0-d float64 tensor inputs (ADR 0044)
            lifted, examples, table = lift_floats(gm, example_inputs, floats)
            with tracing_floats(table):
                inner = backend(lifted, examples)
            return with_float_tensors(inner, sorted(floats))
        compiled = aot_module(gm, fw_compiler, bw_compiler, partition_fn, decompositions, opts)
        symbolic = _symbolic_call(compiled, gm, example_inputs, opts)
        if symbolic is not None:
            return symbolic

        # The frontend made ``gm`` for this backend and never changes which tensors it
        # holds (an in-place update or ``.data =`` keeps the objects, and their metadata
        # is in the call's cache key), so they are collected once: walking the module
        # tree cost ~0.1-0.3 ms per call on a 2-layer ViT+GPT-2 training step.
        params, buffers = dict(gm.named_parameters()), dict(gm.named_buffers())
        call = compiled._compiled

        def run(*args: Any) -> Any:
            return call(params, buffers, *args)

        return run

    return backend


def _symbolic_call(compiled: AotModule, gm: fx.GraphModule, example_inputs: list[Any],
                   options: AotOptions) -> Callable[..., Any] | None:
    """For a graph whose inputs have ember size symbols (ember.dynamo's dynamic shapes):
    trace it once, now, with those symbols, so guards the tracing adds reach the
    frontend before it builds its guard set. ``None`` for a static graph."""
    fakes = _symbolic_fakes(gm, example_inputs)
    if not fakes:
        return None
    mod = compiled.orig_module
    params = dict(mod.named_parameters())
    buffers = dict(mod.named_buffers())
    try:
        call = compiled._compiled.compile_symbolic((params, buffers, *example_inputs), fakes)
    except Exception as e:
        if not _falls_back(compiled._compiled.options, e):
            raise
        _log_fallback(type(gm).__name__, e, " (symbolic sizes)")
        return gm.forward

    def run(*args: Any) -> Any:
        return call(dict(mod.named_parameters()), dict(mod.named_buffers()), *args)

    return run


def _symbolic_fakes(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> dict[int, torch.Tensor]:
    """``id`` of each example input whose placeholder holds ember size symbols -> that fake."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    fakes: dict[int, torch.Tensor] = {}
    for node, real in zip(placeholders, example_inputs):
        value = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(real, torch.Tensor) and isinstance(value, torch.Tensor) and (
            shape_env_of_tensor(value) is not None or hasattr(value, FLOAT_SYMBOL)
        ):
            fakes[id(real)] = value
    return fakes
