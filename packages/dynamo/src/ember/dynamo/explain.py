"""``explain(fn)(*args, **kwargs)``: what capture did with one call, as a report.

Runs ``fn`` once through a fresh runtime (backend ``eager``, or the one
given) and collects every frame captured during the call -- the function
itself and any resume functions or callees captured through the same
runtime -- into an :class:`ExplainOutput`: graphs, graph count, break count,
break reasons with user stacks, ops per graph, guards, compile times.

The older form of the FAQs, ``explanation, out_guards, graphs, ops_per_graph =
explain(fn, *args, **kwargs)``, runs the call at once and returns a
:class:`LegacyExplanation` (the same report as TorchDynamo's four-tuple).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, overload

import torch

from .api import new_runtime, snapshot_options, wrap_target
from .backends import lookup_backend
from .frame import CompilerFn
from .function_entry import CaptureEvent
from .optimizer import CompiledOptimizerStep, is_optimizer_step
from .testing import count_ops


@dataclass(frozen=True)
class BreakReason:
    """One graph break (or a frame capture gave up on): why, and where in user code."""

    reason: str
    user_stack: list[traceback.FrameSummary] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [self.reason]
        for fs in self.user_stack:
            lines.append(f'  File "{fs.filename}", line {fs.lineno}, in {fs.name}')
            if fs.line:
                lines.append(f"    {fs.line.strip()}")
        return "\n".join(lines)


@dataclass
class ExplainOutput:
    """The report ``explain`` returns; ``str()`` prints it TorchDynamo-style."""

    graphs: list[torch.fx.GraphModule] = field(default_factory=list)
    graph_count: int = 0
    graph_break_count: int = 0
    break_reasons: list[BreakReason] = field(default_factory=list)
    op_count: int = 0
    ops_per_graph: list[list[str]] = field(default_factory=list)
    out_guards: list[Any] = field(default_factory=list)
    compile_time: float = 0.0
    result: Any = None

    def __str__(self) -> str:
        lines = [
            f"Graph Count: {self.graph_count}",
            f"Graph Break Count: {self.graph_break_count}",
            f"Op Count: {self.op_count}",
            "Break Reasons:",
        ]
        for i, reason in enumerate(self.break_reasons, 1):
            text = str(reason).replace("\n", "\n    ")
            lines.append(f"  Break Reason {i}:\n    Reason: {text}")
        lines.append("Ops per Graph:")
        for i, ops in enumerate(self.ops_per_graph, 1):
            lines.append(f"  Ops {i}:")
            lines += [f"    {op}" for op in ops]
        lines.append("Out Guards:")
        for i, guard_set in enumerate(self.out_guards, 1):
            lines.append(f"  Guard {i}:")
            lines += [f"    {line}" for line in str(guard_set).splitlines()]
        lines.append(f"Compile Time: {self.compile_time:.4f} s")
        return "\n".join(lines)


def _op_text(node: torch.fx.Node) -> str:
    target = node.target
    if node.op == "call_function":
        name = getattr(target, "__name__", str(target))
        module = getattr(target, "__module__", None)
        return f"<{module}.{name}>" if module else f"<{name}>"
    if node.op == "call_method":
        return f"<method {target}>"
    return f"<module {target}>"


def _ops(gm: torch.fx.GraphModule) -> list[str]:
    return [_op_text(n) for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]


class LegacyExplanation(NamedTuple):
    """What ``explain(fn, *args)`` returns: TorchDynamo's four-tuple.

    ``explanation`` reads "ember.dynamo produced 3 graphs, with 2 graph breaks and
    6 ops." followed by the numbered break reasons with their user lines.
    """

    explanation: str
    out_guards: list[Any]
    graphs: list[torch.fx.GraphModule]
    ops_per_graph: list[list[str]]


def legacy_explanation(out: ExplainOutput) -> LegacyExplanation:
    """``out`` in the older four-tuple form."""
    breaks = "break" if out.graph_break_count == 1 else "breaks"
    lines = [
        f"ember.dynamo produced {out.graph_count} graphs, with {out.graph_break_count} "
        f"graph {breaks} and {out.op_count} ops.",
        " Break reasons:",
    ]
    for i, reason in enumerate(out.break_reasons, 1):
        lines.append(f"{i}. " + str(reason).replace("\n", "\n   "))
    return LegacyExplanation("\n".join(lines), out.out_guards, out.graphs, out.ops_per_graph)


@overload
def explain(fn: Any, /, *, backend: str | CompilerFn = ...) -> Callable[..., ExplainOutput]: ...


@overload
def explain(
    fn: Any, arg: Any, /, *args: Any, backend: str | CompilerFn = ..., **kwargs: Any
) -> LegacyExplanation: ...


def explain(
    fn: Any, /, *args: Any, backend: str | CompilerFn = "eager", **kwargs: Any
) -> Callable[..., ExplainOutput] | LegacyExplanation:
    """``explain(fn)(*args, **kwargs)`` runs ``fn`` once and reports what capture did.

    ``explain(fn, *args, **kwargs)`` (the older FAQs' form) runs it at once and
    returns ``(explanation, out_guards, graphs, ops_per_graph)``.
    """
    if args or kwargs:
        return legacy_explanation(explain(fn, backend=backend)(*args, **kwargs))
    # ``wrap_target`` unwraps ember's own wrappers; a ``functools.wraps`` decorator's
    # ``__wrapped__`` is not unwrapped (through a bound method it drops ``self``)
    target = fn
    compiler = lookup_backend(backend)

    def run(*args: Any, **kwargs: Any) -> ExplainOutput:
        out = ExplainOutput()
        backend_fn = compiler
        if is_optimizer_step(target) or isinstance(target, CompiledOptimizerStep):
            # an optimizer step is traced whole (no frame capture to listen to): its
            # graphs are the ones handed to the backend
            def backend_fn(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
                out.graphs.append(gm)
                out.ops_per_graph.append(_ops(gm))
                out.op_count += count_ops(gm)
                return compiler(gm, example_inputs)

        runtime = new_runtime(backend_fn, snapshot_options())

        def listen(event: CaptureEvent) -> None:
            if event.kind == "capture":
                guarded = event.guarded
                for captured in guarded.graphs:
                    out.graphs.append(captured.gm)
                    out.ops_per_graph.append(_ops(captured.gm))
                    out.op_count += count_ops(captured.gm)
                for brk in guarded.graph_breaks:
                    out.break_reasons.append(BreakReason(brk.reason, list(brk.user_stack)))
                out.out_guards.append(guarded.guard_set)
            elif event.kind == "skip" and event.reason:
                stack = list(getattr(event, "user_stack", None) or [])
                out.break_reasons.append(BreakReason(event.reason, stack))

        runtime.listeners.append(listen)
        compiled = wrap_target(target, runtime)
        start = time.perf_counter()
        out.result = compiled(*args, **kwargs)
        out.compile_time = time.perf_counter() - start
        out.graph_count = len(out.graphs)
        out.graph_break_count = len(out.break_reasons)
        return out

    return run
