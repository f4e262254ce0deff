"""Turn one running frame into guarded, transformed code.

``convert_frame(state, compiler, options, hooks)`` is capture's side of the
contract in ``frame.py``: it interprets the frame's bytecode symbolically,
compiles the captured graph with the backend, and returns a
:class:`GuardedCode` whose ``code`` has the original signature and, when
run, calls the compiled graph and rebuilds the function's result and side
effects. At a graph break it hands over to ``split_frame``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from ember import guards
from ember.ir import GuardSet, Local

from .bytecode_transform import assemble
from .bytecode_verify import verify
from .codegen import PyCodegen
from .config import DynamoOptions
from .errors import Unsupported
from .frame import CapturedGraph, CompilerFn, FrameHooks, FrameState, GraphBreak, GuardedCode
from .instructions import UNSUPPORTED_PYTHON
from .mutable import TrailDict
from .output_graph import OutputGraph
from .shapes import ShapePolicy
from .split_frame import compile_break
from .symbolic_convert import BreakSignal, InstructionTranslator
from .variables.base import VariableTracker
from .variables.functions import CellVariable
from .variables.lazy import LazyVariable
from .weight_guards import weight_guards

__all__ = [
    "CapturedGraph",
    "CompilerFn",
    "FrameState",
    "GraphBreak",
    "GuardedCode",
    "convert_frame",
]


UNSUPPORTED_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def initial_locals(state: FrameState) -> dict[str, VariableTracker]:
    code = state.code
    out: dict[str, VariableTracker] = {}
    for name, value in state.f_locals.items():
        if name not in code.co_varnames and name not in code.co_cellvars:
            continue
        out[name] = LazyVariable(value, Local(name))
    return out


def initial_cells(state: FrameState) -> dict[str, CellVariable]:
    code = state.code
    cells: dict[str, CellVariable] = {}
    closure = state.closure or ()
    if len(closure) != len(code.co_freevars):
        raise ValueError(
            f"{state.fn_name}: closure has {len(closure)} cells but the code has "
            f"{len(code.co_freevars)} free variables"
        )
    for name, cell in zip(code.co_freevars, closure, strict=True):
        cells[name] = CellVariable(
            real=cell, source=Local(name), name=name, owner=code
        )
    return cells


def convert_frame(
    state: FrameState,
    compiler: CompilerFn,
    options: DynamoOptions,
    hooks: FrameHooks,
) -> GuardedCode:
    """Capture ``state`` into a graph; raise ``Unsupported`` if it cannot."""
    code = state.code
    if UNSUPPORTED_PYTHON is not None:
        raise Unsupported(UNSUPPORTED_PYTHON)
    if code.co_flags & UNSUPPORTED_FLAGS:
        raise Unsupported(f"`{code.co_name}` is a generator or coroutine")
    output = OutputGraph(state.f_globals, ShapePolicy(options.dynamic, state.seen_sizes))
    tx = InstructionTranslator(
        code,
        state.f_globals,
        TrailDict(output.trail, initial_locals(state)),
        TrailDict(output.trail, initial_cells(state)),
        output,
        options,
        None,
    )
    for cell in tx.cells.values():
        if cell.real is not None:
            output.real_cells[id(cell.real)] = cell
    tx.may_break = not options.fullgraph and hooks is not None
    output.shapes.env.site = output.user_line
    prior_grad = torch.is_grad_enabled()
    try:
        try:
            result = tx.run()
        except BreakSignal as sig:
            return split(state, tx, output, sig, compiler, hooks)
    finally:
        torch._C._set_grad_enabled(prior_grad)
        while output.cleanups:
            output.cleanups.pop()()
    return finish(state, tx, output, result, compiler)


def split(
    state: FrameState,
    tx: InstructionTranslator,
    output: OutputGraph,
    sig: BreakSignal,
    compiler: CompilerFn,
    hooks: FrameHooks,
) -> GuardedCode:
    """The frame's code split at a graph break (see ``split_frame``)."""
    try:
        result = compile_break(tx, sig.inst, sig.reason, compiler, hooks, state.fn_name)
    except Unsupported as e:
        e.reason = f"{sig.reason.reason}; and the frame cannot be split there: {e.reason}"
        e.located = False
        e.locate(sig.reason.user_stack)
        raise e from sig.reason
    guard_set, check_fn = finish_guards(state, output, result.graphs)
    brk = GraphBreak(sig.reason.reason, sig.reason.user_stack)
    return guarded_code(result.code, check_fn, guard_set, result.graphs, [brk], output)


def finish(
    state: FrameState,
    tx: InstructionTranslator,
    output: OutputGraph,
    result: VariableTracker,
    compiler: CompilerFn,
) -> GuardedCode:
    code = state.code
    cg = PyCodegen(code.co_cellvars, code.co_freevars, code.co_firstlineno)
    if output.side_effects.is_empty():
        result.reconstruct(cg)
    else:
        ret_tmp = cg.stash(result)
        output.side_effects.codegen(cg)
        cg.load_local(ret_tmp)
    cg.return_value()

    output.shapes.env.site = backend_site
    head, graphs = output.call_graph(code, cg, compiler, state.fn_name)
    new_code = assemble(code, head + cg.instrs)
    verify(new_code)
    guard_set, check_fn = finish_guards(state, output, graphs)
    return guarded_code(new_code, check_fn, guard_set, graphs, [], output)


def backend_site() -> str:
    return ""


def finish_guards(
    state: FrameState, output: OutputGraph, graphs: list[CapturedGraph]
) -> tuple[Any, Callable[..., bool]]:
    """The guard set (shape guards included: the backend may have added some, and the
    weights the graphs read, ``weight_guards.py``) and its check."""
    output.shape_guards()
    guard_set = output.guards.to_guard_set()
    f_locals = guard_locals(state)
    extra = weight_guards(graphs, f_locals, state.f_globals)
    if extra:
        guard_set = GuardSet(tuple(dict.fromkeys((*guard_set.guards, *extra))))
    return guard_set, compile_guards(guard_set, f_locals, state.f_globals)


def guarded_code(
    code: Any, check_fn: Callable[..., bool], guard_set: Any, graphs: list[CapturedGraph],
    breaks: list[GraphBreak], output: OutputGraph,
) -> GuardedCode:
    shapes = output.shapes
    return GuardedCode(code, check_fn, guard_set, graphs, breaks,
                       input_sizes=dict(shapes.sizes_seen), dynamic=shapes.describe_dynamic())


def guard_locals(state: FrameState) -> dict[str, Any]:
    """The ``L`` the guards read: the arguments plus the closure's contents
    (free variables are guarded as ``L['name']``)."""
    out = dict(state.f_locals)
    for name, cell in zip(state.code.co_freevars, state.closure or (), strict=True):
        try:
            out[name] = cell.cell_contents
        except ValueError:
            continue
    return out


def compile_guards(
    guard_set: Any, f_locals: dict[str, Any], f_globals: dict[str, Any]
) -> Callable[..., bool]:
    fn: Callable[..., bool] = guards.compile(guard_set, f_locals, f_globals)
    return fn
