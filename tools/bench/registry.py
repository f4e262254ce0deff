"""What can be benchmarked: workloads and compilers, in two name-keyed registries.

The built-in workloads (``workloads.py``, ``workloads_hf.py``) and compilers
(``compilers.py``) register themselves at import. Extra ones come from plugin
files (``--plugin FILE``): a Python file that calls :func:`register_workload` /
:func:`register_compiler` when imported. Plugins are how the tests inject a
crashing or wrong compiler, and how a user benchmarks their own model; every
cell's worker process loads the same plugin files, so injected entries exist
where the cell runs.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

# A compile function takes (model_or_fn, options) and returns a callable with the
# same calling convention. ``options`` is the cell's CompileOptions.
CompileFn = Callable[[Any, "CompileOptions"], Callable[..., Any]]


@dataclass(frozen=True)
class CompileOptions:
    """What a compiler is asked to do for one cell."""

    dynamic: bool | None = None
    fullgraph: bool = False


@dataclass
class CompileStats:
    """Counters a compiler fills while it compiles (None: the compiler cannot tell)."""

    graphs: int = 0
    breaks: int | None = None
    break_reasons: list[str] = field(default_factory=list)
    counted: bool = False  # True when ``graphs`` really counts backend calls


@dataclass(frozen=True)
class Compiler:
    """One column of the table.

    ``available`` returns None when usable, else the reason it is not (shown in
    the table as ``unavailable``). ``prepare`` turns (model, options, stats) into
    the compiled callable; it must count graphs into ``stats`` when it can.
    ``reset`` clears the compiler's in-memory caches. ``rng_matches_eager``:
    random ops (dropout) surely draw the same numbers as eager with the same
    seed (true for graphs of torch-level ops run eagerly; ATen-level tracing
    may decompose dropout and draw differently, so those are checked with
    randomness off).
    """

    name: str
    description: str
    prepare: Callable[[Any, CompileOptions, CompileStats], Callable[..., Any]]
    available: Callable[[], str | None] = lambda: None
    reset: Callable[[], None] = lambda: None
    disk_cache: bool = False
    rng_matches_eager: bool = True
    is_baseline: bool = False


@dataclass
class Case:
    """One built instance of a workload, ready to run.

    ``model`` is what gets compiled (an ``nn.Module`` or a function).
    ``inputs`` lists the argument tuples, used in rotation (one entry: fixed
    shapes; several: e.g. alternating padded lengths). ``step(fn, args)`` runs
    one iteration with ``fn`` (eager model or compiled) and returns the tensors
    to compare with eager: outputs, and for training the parameter gradients.
    ``params`` are the tensors excluded from "bytes saved for backward".
    ``kwargs`` are keyword arguments every call passes (``step`` passes them itself; tools
    that call ``model`` directly, such as the break count, need them too).
    """

    model: Any
    inputs: list[tuple[Any, ...]]
    step: Callable[[Callable[..., Any], tuple[Any, ...]], list[torch.Tensor]]
    params: list[torch.Tensor] = field(default_factory=list)
    silence_stdout: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Workload:
    """One row of the table.

    ``build(device)`` makes a fresh :class:`Case` (seeded; two builds are equal).
    ``quick``: part of ``--quick``. ``suite``: part of the default run (else
    only by name, e.g. the demo's model). ``requires``: importable modules it needs
    (missing: the row is shown as unavailable). ``random``: uses random ops
    (dropout). ``amortize_steps``: also report the mean step time over this
    many steps from cold (compile included), the user's real cost.
    """

    name: str
    description: str
    build: Callable[[str], Case]
    training: bool = False
    quick: bool = True
    suite: bool = True
    requires: tuple[str, ...] = ()
    random: bool = False
    rtol: float = 1e-3
    atol: float = 1e-3
    amortize_steps: int = 0
    options: CompileOptions = CompileOptions()


WORKLOADS: dict[str, Workload] = {}
COMPILERS: dict[str, Compiler] = {}


def register_workload(w: Workload) -> Workload:
    """Add a workload (a later registration with the same name replaces it)."""
    WORKLOADS[w.name] = w
    return w


def register_compiler(c: Compiler) -> Compiler:
    """Add a compiler (a later registration with the same name replaces it)."""
    COMPILERS[c.name] = c
    return c


def load_builtins() -> None:
    """Import the built-in workloads and compilers (idempotent)."""
    from bench import (  # noqa: F401
        compilers,
        workloads,
        workloads_hf,
        workloads_vision,
        workloads_zoo,
    )


def load_plugins(paths: Sequence[str]) -> None:
    """Import each plugin file once; it registers what it adds."""
    for i, p in enumerate(paths):
        path = Path(p).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"bench plugin {p!r} does not exist")
        name = f"_bench_plugin_{i}_{path.stem}"
        if name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"bench plugin {p!r} cannot be imported as a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
