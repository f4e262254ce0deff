"""``compile_graph``: the whole pipeline from an ATen graph to a callable.

lower (graph.py) -> schedule + fuse (scheduler.py, fusion.py) -> memory plan
(memory_plan.py) -> kernels from the device's backend (codegen/registry.py:
C++ for CPU tensors) -> build + cache (``Backend.build``) -> Python wrapper
(codegen/wrapper.py). Anything that cannot be compiled runs eagerly, with the
reason logged.
"""

from __future__ import annotations

import copy
import functools
import time
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch.autograd.profiler import record_function
from torch.utils._pytree import tree_unflatten

from ember.ir.debug import debug_dir_of
from ember.ir.logs import reason as one_line
from ember.ir.logs import traceback_wanted
from ember.ir.stages import record as record_stage
from ember.ir.stages import stage
from ember.ir.updates import input_updates_of

from . import graph_cache, native_runner
from .codegen.backend import Backend, BuildStats, KernelSource
from .codegen.registry import backend_for
from .codegen.wrapper_runtime import in_layout, namespace
from .cudagraphs import CudaGraphCall, mutated_inputs, refusal
from .dynamic_floats import floats_as_tensors
from .errors import InputMismatchError
from .fx_util import attr_value, graph_device, op_name
from .graph_cache import GraphArtifact
from .logs import configure_from_env, log, output_code, perf_hints
from .modes import CUDAGRAPH_MODES, warn_mode
from .options import InductorOptions, options_from_env
from .profiling import graph_label, named_kernels, profiling
from .unbacked import Run, SplitGraph, split_compile, unbacked_symbols


@dataclass
class CompileReport:
    """What one compile produced (kernel counts for tests, timings for the CLI)."""

    kernels: int = 0
    extern_calls: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)
    compiled: int = 0
    cached: int = 0
    seconds: float = 0.0
    kernel_sources: dict[str, str] = field(default_factory=dict)
    wrapper_source: str = ""
    eager_reason: str | None = None
    #: the wrapper and kernel sources came from the on-disk graph cache (no lowering ran)
    graph_cached: bool = False
    #: file suffix of the kernel sources (``cpp``; ``py`` for Triton)
    kernel_suffix: str = "cpp"
    #: the graph's sizes are symbolic: its kernels take them as arguments (ADR 0021, 0050)
    symbolic: bool = False


class CompiledGraph:
    """Callable running the generated wrapper; checks inputs against what it was compiled for."""

    def __init__(
        self,
        call: Callable[[list[Any]], list[Any]],
        art: GraphArtifact,
        report: CompileReport,
        eager: Callable[..., Any],
        inputs_guarded: bool = False,
        profiled: Callable[[], Callable[[list[Any]], list[Any]]] | None = None,
    ) -> None:
        self._call = call
        # the wrapper with named kernels, built on the first call under torch's profiler
        self._make_profiled = profiled
        self._profiled: Callable[[list[Any]], list[Any]] | None = None
        self._label = graph_label()
        # a symbolic graph's wrapper checks its inputs itself (sizes vary per call)
        self._check_inputs = not inputs_guarded and not art.symbolic
        self._expect = list(art.input_layouts)
        self._n_args = len(art.input_layouts) + art.n_size_inputs
        self._out_spec = art.out_spec
        # Flat list/tuple outputs (what ATen graphs return) skip pytree on every call.
        leaves: list[Any] = [object() for _ in range(art.n_outputs)]
        self._out_kind = (
            next(
                (
                    kind
                    for kind in (list, tuple)
                    if tree_unflatten(leaves, art.out_spec) == kind(leaves)
                ),
                None,
            )
            if art.out_spec is not None
            else None
        )
        self._eager = eager
        self.report = report
        #: (the constants, ``(constants, profiled) -> call``): what ``rebind_weights`` remakes
        self._rebind: tuple[dict[str, torch.Tensor], Callable[[dict[str, torch.Tensor], bool], Any]] | None = None
        #: the CUDA-graph runner (``mode="reduce-overhead"`` on CUDA), None without one
        self.cudagraphs: CudaGraphCall | None = None
        #: compiled while the native graph runner was being built: ``_run`` remakes the
        #: call from ``_rebind`` once it is (ADR 0068)
        self._native_pending = False

    def rebind_weights(self, new_for: Mapping[int, torch.Tensor]) -> CompiledGraph | None:
        """This compiled graph reading other weights: each constant ``t`` replaced by
        ``new_for[id(t)]``, kernels and wrapper code shared (a regional compile's next block,
        whose weights have the layouts of these: ember.dynamo checks that). None when a
        constant has no replacement, or the graph replays CUDA graphs (recorded addresses)."""
        if self._rebind is None or self.cudagraphs is not None:
            return None
        constants, make = self._rebind
        new = {}
        for name, t in constants.items():
            found = new_for.get(id(t))
            if found is None:
                return None
            new[name] = found
        other = copy.copy(self)
        other._call = make(new, False)
        other._make_profiled = lambda: make(new, True)
        other._profiled = None
        other._rebind = (new, make)
        return other

    @property
    def runs_natively(self) -> bool:
        """Whether calls run the native graph runner's program (ADR 0068), not the Python wrapper."""
        return native_runner.is_program(self._call)

    def use_cuda_graphs(self, gm: torch.fx.GraphModule, art: GraphArtifact, device: torch.device) -> None:
        """Replay this graph's calls from CUDA graphs (``mode="reduce-overhead"``, ADR 0039),
        unless it cannot be recorded: then the reason is a perf hint and ``cudagraphs`` is None."""
        index_checks = any(m.get("index_check") for m in art.kernel_meta.values())
        why = refusal(gm, symbolic=art.symbolic, index_checks=index_checks)
        mutated = mutated_inputs(gm)
        if why is None and mutated is None:
            why = "it calls a Python function whose writes to its inputs are unknown"
        if why is not None:
            perf_hints.info("%s: not recorded into a CUDA graph: %s", self._label, why)
            return
        assert mutated is not None
        mutated |= {i for _, i in input_updates_of(gm)}
        self.cudagraphs = CudaGraphCall(self._call, device, mutated, self._label)
        self._call = self.cudagraphs

    def __call__(self, *args: Any) -> Any:
        if len(args) == 1 and isinstance(args[0], list) and self._n_args != 1:
            args = tuple(args[0])
        return self._run(self._checked(args) if self._check_inputs else list(args))

    def call_boxed(self, args: list[Any]) -> Any:
        """The call with its inputs handed over in ``args`` (``ember.ir.boxed``): the list
        is emptied, and the wrapper drops each input after its last use, so an input no one
        else holds (a backward's saved activation) is freed there, not when the call ends."""
        inputs = self._checked(args) if self._check_inputs else list(args)
        args.clear()
        return self._run(inputs)

    def _run(self, inputs: list[Any]) -> Any:
        """The wrapper on ``inputs`` (a list of the call's own, which the wrapper empties)."""
        if self._native_pending and not native_runner.building():
            self._native_pending = False
            if self._rebind is not None:
                constants, make = self._rebind
                self._call = make(constants, False)
        if profiling():
            outs = self._call_profiled(inputs)
        else:
            outs = self._call(inputs)
        if self._out_kind is list:
            return outs
        if self._out_kind is tuple:
            return tuple(outs)
        assert self._out_spec is not None
        return tree_unflatten(outs, self._out_spec)

    def _call_profiled(self, inputs: list[Any]) -> list[Any]:
        """One call recorded as ``ember_graph_<n>``, each kernel as ``ember_kernel_<name>``."""
        if self._profiled is None:
            self._profiled = self._make_profiled() if self._make_profiled else self._call
        with record_function(self._label):
            return self._profiled(inputs)

    def _checked(self, args: Sequence[Any]) -> list[Any]:
        """``args`` after checking sizes and dtypes; inputs with other strides are copied."""
        inputs = list(args)
        for i, (a, (size, stride, dtype)) in enumerate(zip(args, self._expect)):
            if a.shape != size or a.dtype != dtype:
                raise InputMismatchError(
                    f"input {i} has size {tuple(a.shape)} and dtype {a.dtype}, the graph was compiled for "
                    f"{size} and {dtype}. Recompile for the new shapes (ember.dynamo does this automatically)."
                )
            if a.stride() != stride and a.numel() > 1:
                inputs[i] = in_layout(a, i, size, stride)
        return inputs


class EagerGraph:
    """What ``compile_graph`` returns when a graph cannot be compiled: runs it with ATen."""

    def __init__(self, gm: torch.fx.GraphModule, reason: str) -> None:
        self.gm = gm
        self.report = CompileReport(eager_reason=reason)

    def __call__(self, *args: Any) -> Any:
        if len(args) == 1 and isinstance(args[0], list):
            args = tuple(args[0])
        return self.gm(*args)


def _as_graph_module(graph: Any) -> torch.fx.GraphModule:
    if isinstance(graph, torch.fx.GraphModule):
        return graph
    import ember.ir as eir

    to_fx = getattr(eir, "to_fx", None)
    if to_fx is None:
        raise TypeError(
            "compile_graph needs a torch.fx.GraphModule or an ember.ir GraphIR (ember.ir.to_fx missing)"
        )
    gm: torch.fx.GraphModule = to_fx(graph)
    return gm


def _eager_reason(
    gm: torch.fx.GraphModule, example_inputs: list[Any], backend: Backend | str
) -> str | None:
    device = graph_device(example_inputs)
    for i, x in enumerate(example_inputs):
        symbolic = isinstance(x, torch.SymInt) or (
            isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in x.shape)
        )
        if symbolic and not isinstance(backend, str) and not backend.symbolic_sizes:
            return f"input {i} has symbolic sizes; the {backend.label} backend compiles static sizes only"
        if isinstance(x, torch.SymInt) and getattr(x.node, "hint", None) is not None:
            continue  # a symbolic size the graph reads (a dynamic-shapes backward's input)
        if not isinstance(x, torch.Tensor):
            return f"input {i} is a {type(x).__name__}; only tensor inputs are compiled"
        if isinstance(backend, str):
            return f"input {i} is on {x.device}; {backend}"
        if x.device != device:
            return f"input {i} is on {x.device}, input 0 on {device}; one graph runs on one device"
        if x.is_sparse:
            return f"input {i} is sparse"
    if not any(n.op == "call_function" for n in gm.graph.nodes):
        return "graph has no operations"
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        if isinstance(val, torch.SymFloat) or (
                n.target is torch.ops.aten._local_scalar_dense.default
                and not _unbacked_int(val)):
            return ("graph computes with a float that is not an elementwise operand, a dynamic "
                    "Python float (ADR 0044) or one `.item()` read (ADR 0060); ember.inductor's "
                    "kernels take constant scalars only")
    return None


def _unbacked_int(val: object) -> bool:
    """Whether ``val`` is an int read from tensor data (``.item()``: an unbacked value, ADR
    0060), which the graph's runs around unbacked symbols handle (ADR 0046)."""
    env = getattr(getattr(val, "node", None), "env", None)
    return isinstance(val, torch.SymInt) and env is not None and bool(env.has_unbacked(val.node.expr))


def _compile_around_unbacked(
    gm: torch.fx.GraphModule, options: InductorOptions | None, unbacked: list[str]
) -> SplitGraph | EagerGraph:
    """A graph with sizes that depend on data (ADR 0046): the runs of ops without them
    compiled, the rest through ATen; the whole graph through ATen when no run is worth
    compiling, the graph writes its inputs, or the split fails."""
    names = ", ".join(unbacked)
    why = (f"sizes {names} depend on tensor data (boolean-mask indexing, nonzero, "
           "masked_select, `.item()`); ember.inductor binds sizes from its inputs only (ADR 0046)")
    split: tuple[list[Run], int] | None = None
    if not input_updates_of(gm):
        try:
            split = split_compile(gm, lambda sub, inputs: compile_graph(sub, inputs, options))
        except Exception as e:
            if not options_from_env(options).fallback_on_error:
                raise
            log.warning("ember.inductor could not split a graph around sizes %s (%s: %s); "
                        "running it through ATen", names, type(e).__name__, e)
    if split is None:
        reason = f"{why}, and no part of the graph without them is worth compiling"
        perf_hints.info("running graph eagerly: %s", reason)
        return EagerGraph(gm, reason)
    runs, compiled = split
    reason = f"{why}: {len(runs) - compiled} of {len(runs)} runs of ops go through ATen"
    perf_hints.info("graph compiled in parts: %s", reason)
    return SplitGraph(gm, runs, CompileReport(eager_reason=reason))


def compile_graph(
    graph: Any,
    example_inputs: list[Any],
    options: InductorOptions | None = None,
    *,
    inputs_guarded: bool = False,
) -> CompiledGraph | EagerGraph | SplitGraph:
    """Compile an ATen-level graph (``GraphModule`` or ember.ir ``GraphIR``) for these inputs.

    Returns a callable taking the inputs (positionally or as one list) and
    returning what the graph returns. ``.report`` says how many kernels and
    extern calls were generated and how many kernels came from the cache.

    Each call checks the inputs' sizes and dtypes against the example inputs
    (raising ``InputMismatchError``) and copies inputs with other strides into
    the compiled layout. A frontend whose guards already ensure all three
    (ember.dynamo, torch.compile with static shapes) passes ``inputs_guarded``
    to skip that check: about 0.5 µs per input per call.
    """
    configure_from_env()
    opts = options_from_env(options)
    gm = _as_graph_module(graph)
    device = graph_device(example_inputs)
    backend = backend_for(device, opts)
    gm = floats_as_tensors(gm)  # dynamic floats read from their 0-d tensors (ADR 0055)
    reason = _eager_reason(gm, example_inputs, backend)
    if reason is not None:
        perf_hints.info("running graph eagerly: %s", reason)
        return EagerGraph(gm, reason)
    unbacked = unbacked_symbols(gm)
    if unbacked:
        return _compile_around_unbacked(gm, options, unbacked)
    assert not isinstance(backend, str)
    warn_mode(opts.mode, device, backend.label)
    try:
        return _compile(gm, example_inputs, opts, backend, inputs_guarded)
    except Exception as e:
        if not opts.fallback_on_error:
            raise
        log.warning(
            "ember.inductor could not compile a graph (%s); running it eagerly",
            one_line(e),
            exc_info=e if traceback_wanted("inductor") else None,
        )
        return EagerGraph(gm, f"{type(e).__name__}: {e}")


def _compile(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    opts: InductorOptions,
    backend: Backend,
    inputs_guarded: bool = False,
) -> CompiledGraph:
    start = time.perf_counter()
    assert opts.cache_dir is not None
    key_fields = opts.cache_key_fields() + repr(input_updates_of(gm))  # ADR 0032
    key = graph_cache.graph_key(gm, example_inputs, key_fields) if opts.graph_cache else None
    art = graph_cache.lookup(opts.cache_dir, key) if key is not None else None
    hit = art is not None
    folder = debug_dir_of(gm)
    if key is not None:
        record_stage(folder, stage="inductor.graph_cache", cache="hit" if hit else "miss")
    if art is None:
        with stage("inductor.lower", folder=folder):
            art = _generate(gm, example_inputs, opts, backend)
        if key is not None:
            graph_cache.store(opts.cache_dir, key, art)
    else:
        for op, reason in art.externs:
            perf_hints.info("extern kernel for %s: %s", op, reason)
    report = CompileReport(
        kernels=len(art.kernel_sources),
        extern_calls=len(art.externs),
        fallbacks=dict(art.fallbacks),
        kernel_sources=dict(art.kernel_sources),
        wrapper_source=art.wrapper_source,
        graph_cached=hit,
        kernel_suffix=backend.suffix,
        symbolic=art.symbolic,
    )
    _emit_debug(report, opts, folder)
    stats = BuildStats()
    with stage("inductor.build", folder=folder):
        kernels = backend.build(art.kernels(), stats)
    record_stage(folder, stage="inductor.kernels", kernels=len(art.kernel_sources),
                 compiled=stats.compiled, cached=stats.cached, externs=len(art.externs))
    constants = {name: _attr(gm, target) for name, target in art.constant_targets.items()}
    code = _wrapper_code(art.wrapper_source)

    def make(constants: dict[str, torch.Tensor], profiled: bool) -> Callable[[list[Any]], list[Any]]:
        """The graph's call: the generated wrapper executed into a namespace of the kernels
        and ``constants``; for C++ kernels run by the native graph runner where it can be
        (``native_runner.py``); with kernels named for torch's profiler when ``profiled``."""
        ns = namespace(backend, named_kernels(kernels) if profiled else kernels, constants, art.consts)
        exec(code, ns)
        if backend.name == "cpp" and not profiled:
            native = native_runner.native_call(art.wrapper_source, ns, art.consts)
            if native is not None:
                return native
        return ns["call"]  # type: ignore[no-any-return]

    call = make(constants, False)
    report.compiled, report.cached = stats.compiled, stats.cached
    report.seconds = time.perf_counter() - start
    compiled = CompiledGraph(
        call, art, report, gm, inputs_guarded, profiled=lambda: make(constants, True)
    )
    compiled._rebind = (constants, make)
    compiled._native_pending = backend.name == "cpp" and native_runner.building()
    device = graph_device(example_inputs)
    if device.type == "cuda" and opts.mode in CUDAGRAPH_MODES:
        compiled.use_cuda_graphs(gm, art, device)
    return compiled


@functools.lru_cache(maxsize=256)
def _wrapper_code(source: str) -> types.CodeType:
    """The wrapper's code object, compiled once per source text: each call of it gets its own
    namespace (kernels, constants), and a regional compile or a warm start loads one
    wrapper once per block."""
    return compile(source, "<ember.inductor wrapper>", "exec")


def _generate(
    gm: torch.fx.GraphModule, example_inputs: list[Any], opts: InductorOptions, backend: Backend
) -> GraphArtifact:
    """Lower, schedule and generate code: everything a compiled graph is rebuilt from."""
    # the lowering stack (and sympy) is imported on the first graph generated, not by
    # ``import ember.inductor``: a graph found in the graph cache needs none of it
    from .codegen.wrapper import WrapperWriter
    from .graph import GraphLowering
    from .inplace import candidate_updates
    from .kernel_plan import KernelPlan
    from .memory_plan import plan_memory
    from .scheduler import schedule

    lowered = GraphLowering(
        gm,
        example_inputs,
        opts,
        backend.dtypes,
        backend.label,
        welford=backend.welford,
        calls_need_unit_stride=backend.vector_calls_need_unit_stride,
    ).run()
    steps = schedule(lowered, opts, backend.private_bytes, candidate_updates(lowered, gm))
    memory = plan_memory(lowered, steps)
    dtypes = {b.name: b.layout.dtype for b in lowered.buffers}
    dtypes.update({b.name: b.layout.dtype for b in lowered.inputs})
    dtypes.update({name: t.dtype for name, t in lowered.constants.items()})
    kernels: dict[str, KernelSource] = {}
    externs: list[tuple[str, str]] = []
    for step in steps:
        if isinstance(step, KernelPlan):
            kernels[step.name] = backend.generate(step, dtypes)
        else:
            externs.append((op_name(step.kernel.op), step.kernel.reason))
    wrapper = WrapperWriter(lowered, steps, kernels, memory, backend).write()
    return GraphArtifact(
        wrapper_source=wrapper.source,
        kernel_sources={name: k.source for name, k in kernels.items()},
        kernel_args={name: k.args for name, k in kernels.items()},
        kernel_meta={name: k.meta for name, k in kernels.items() if k.meta},
        kernel_sizes={name: k.sizes for name, k in kernels.items() if k.sizes},
        n_size_inputs=len(lowered.size_inputs),
        symbolic=bool(lowered.hints),
        consts=wrapper.constants,
        constant_targets=dict(lowered.constant_targets),
        input_layouts=[(b.layout.size, b.layout.stride, b.layout.dtype) for b in lowered.inputs],
        out_spec=lowered.out_spec,
        n_outputs=len(lowered.outputs),
        fallbacks=dict(lowered.fallbacks),
        externs=externs,
    )


def _attr(gm: torch.fx.GraphModule, target: str) -> torch.Tensor:
    value = attr_value(gm, target)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"get_attr {target!r} is a {type(value).__name__}, not a tensor")
    return value


def _emit_debug(report: CompileReport, opts: InductorOptions, folder: str | None) -> None:
    """Log the code (``output_code``) and write it to ``folder`` (the one the frontend
    named for this graph, ember.ir.debug) or, without one, under ``opts.debug_dir``."""
    if opts.output_code or output_code.isEnabledFor(20):
        mark = "#" if report.kernel_suffix == "py" else "//"
        text = "\n".join(f"{mark} {name}\n{src}" for name, src in report.kernel_sources.items())
        output_code.info("wrapper:\n%s\nkernels:\n%s", report.wrapper_source, text)
    if folder is not None:
        d = Path(folder)
    elif opts.debug_dir:
        d = Path(opts.debug_dir) / f"graph_{abs(hash(report.wrapper_source)) % 10**10}"
    else:
        return
    d.mkdir(parents=True, exist_ok=True)
    (d / "output_code.py").write_text(report.wrapper_source)
    for name, src in report.kernel_sources.items():
        (d / f"{name}.{report.kernel_suffix}").write_text(src)
