"""The columns: eager, ember's backends and torch.compile's, each behind one interface.

Every compiler counts the graphs its backend is handed (a wrapper around the
backend callable), so graph and recompile counts mean the same thing in every
column. ember's compilers are available only when ``ember.dynamo`` imports and
lists the backend (checked by importing it in ``bench.probe``'s throwaway process);
anything else is an ``unavailable`` cell, never an error. Inside a measuring worker
both families are only looked up (``LOOKUP_ONLY``): importing the compiler belongs to
its measured compile time (``torch.compile`` imports TorchDynamo there,
``ember.dynamo.compile``'s caller imports ember.dynamo there).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

import torch

from bench.registry import CompileOptions, Compiler, CompileStats, register_compiler

Backend = Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]


def _counting(inner: Backend, stats: CompileStats) -> Backend:
    """Wrap a torch.compile-style backend so every graph it compiles is counted."""

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        stats.graphs += 1
        return inner(gm, example_inputs)

    stats.counted = True
    return backend


# --- eager --------------------------------------------------------------------------------


def _eager_prepare(model: Any, options: CompileOptions, stats: CompileStats) -> Any:
    stats.breaks = 0
    return model


register_compiler(
    Compiler(
        name="eager",
        description="plain PyTorch eager (the baseline every speedup is relative to)",
        prepare=_eager_prepare,
        is_baseline=True,
    )
)


# --- ember --------------------------------------------------------------------------------


def _ember_dynamo() -> Any:
    import ember.dynamo

    return ember.dynamo


#: Set by the measuring worker: availability checks look modules and entry points up
#: without importing a compiler (the probe, a throwaway process, imports them).
LOOKUP_ONLY = False


def _ember_lookup(backend: str) -> str | None:
    """The lookup-only check: ember.dynamo installed and ``backend`` an entry point, or
    None as well when ember.dynamo is already imported (then ``list_backends`` decides)."""
    if importlib.util.find_spec("ember.dynamo") is None:
        return "ember.dynamo is not installed"
    names = {ep.name for ep in importlib.metadata.entry_points(group="ember.backends")}
    if backend not in names:
        return f"backend {backend!r} is not an ember.backends entry point ({sorted(names)})"
    return None


def _ember_available(backend: str) -> Callable[[], str | None]:
    def check() -> str | None:
        if LOOKUP_ONLY and "ember.dynamo" not in sys.modules:
            # the import of ember.dynamo (sympy, ember.ir, ...) is part of what a user
            # pays before the first compiled call: it stays inside the measured span
            return _ember_lookup(backend)
        try:
            dynamo = _ember_dynamo()
        except Exception as exc:  # an unfinished package may fail in any way on import
            return f"ember.dynamo does not import: {type(exc).__name__}: {_first_line(exc)}"
        for attr in ("compile", "list_backends"):
            if not hasattr(dynamo, attr):
                return f"ember.dynamo has no {attr}()"
        try:
            names = list(dynamo.list_backends())
        except Exception as exc:
            return f"ember.dynamo.list_backends() failed: {_first_line(exc)}"
        if backend not in names:
            return f"backend {backend!r} not listed by ember.dynamo.list_backends() ({names})"
        return None

    return check


def _ember_backend_fn(backend: str) -> Backend | None:
    """The backend callable, found the way ember.dynamo finds it (entry point)."""
    dynamo = _ember_dynamo()
    lookup = getattr(dynamo, "lookup_backend", None)
    if lookup is not None:
        try:
            fn = lookup(backend)
            if callable(fn):
                return fn  # type: ignore[no-any-return]
        except Exception:
            pass
    for ep in importlib.metadata.entry_points(group="ember.backends"):
        if ep.name == backend:
            return ep.load()  # type: ignore[no-any-return]
    return None


def _ember_prepare(
    backend: str, mode: str | None = None
) -> Callable[[Any, CompileOptions, CompileStats], Any]:
    def prepare(model: Any, options: CompileOptions, stats: CompileStats) -> Any:
        dynamo = _ember_dynamo()
        # The backend goes by its registered name, as a user writes it: ember keeps
        # compiled frames on disk (warm start) only for a backend named so (a backend
        # object may hold state). Graphs are counted from capture events instead.
        target: Any = backend
        if not _count_ember_graphs(stats):
            fn = _ember_backend_fn(backend)
            target = _counting(fn, stats) if fn is not None else backend
        return dynamo.compile(
            model, backend=target, fullgraph=options.fullgraph, dynamic=options.dynamic, mode=mode
        )

    return prepare


def _count_ember_graphs(stats: CompileStats) -> bool:
    """Count the graphs of every frame ember captures or loads from its frame cache."""
    try:
        from ember.dynamo import api
    except ImportError:
        return False
    listeners = getattr(getattr(api, "STATE", None), "listeners", None)
    if not isinstance(listeners, list):
        return False

    def listen(event: Any) -> None:
        guarded = getattr(event, "guarded", None)
        if event.kind == "capture" and guarded is not None:
            stats.graphs += len(guarded.graphs)

    listeners.append(listen)
    stats.counted = True
    return True


def _ember_reset() -> None:
    # Nothing to reset before ember.dynamo is imported; importing it here would take its
    # import out of the measured compile time (as for TorchDynamo below).
    dynamo = sys.modules.get("ember.dynamo")
    if dynamo is not None and hasattr(dynamo, "reset"):
        dynamo.reset()


for _name, _desc, _rng in (
    ("eager", "ember.dynamo capture, graphs run by torch eager", True),
    ("aot_eager", "ember.dynamo + ember.aotgrad fwd/bwd graphs, run eagerly", False),
    ("inductor", "ember.dynamo + ember.aotgrad + ember.inductor kernels", False),
):
    register_compiler(
        Compiler(
            name=f"ember-{_name}",
            description=_desc,
            prepare=_ember_prepare(_name),
            available=_ember_available(_name),
            reset=_ember_reset,
            disk_cache=_name == "inductor",
            rng_matches_eager=_rng,
        )
    )

register_compiler(
    Compiler(
        name="ember-inductor-ro",
        description="ember.dynamo.compile(backend='inductor', mode='reduce-overhead'): CUDA graphs",
        prepare=_ember_prepare("inductor", "reduce-overhead"),
        available=_ember_available("inductor"),
        reset=_ember_reset,
        disk_cache=True,
        rng_matches_eager=False,
    )
)


# --- torch.compile ------------------------------------------------------------------------


def _torch_available(backend: str) -> Callable[[], str | None]:
    def check() -> str | None:
        # Only looked up, not imported: torch.compile imports TorchDynamo itself (seconds),
        # and that import belongs to its compile time. An unknown backend name fails in
        # prepare, with torch's own message.
        if importlib.util.find_spec("torch._dynamo") is None:
            return "this torch has no torch._dynamo"
        return None

    return check


def _torch_prepare(backend: str) -> Callable[[Any, CompileOptions, CompileStats], Any]:
    def prepare(model: Any, options: CompileOptions, stats: CompileStats) -> Any:
        import torch._dynamo

        inner = torch._dynamo.lookup_backend(backend)
        return torch.compile(
            model,
            backend=_counting(inner, stats),
            fullgraph=options.fullgraph,
            dynamic=options.dynamic,
        )

    return prepare


def _torch_ro_prepare(model: Any, options: CompileOptions, stats: CompileStats) -> Any:
    """torch.compile(mode="reduce-overhead"): the mode needs inductor named by its string
    (a wrapped backend callable would drop it), so graphs are not counted here."""
    return torch.compile(
        model, mode="reduce-overhead", fullgraph=options.fullgraph, dynamic=options.dynamic
    )


def _torch_reset() -> None:
    # Nothing to reset before the first torch.compile; importing TorchDynamo here would
    # take its import out of the measured compile time.
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.reset()


def _torch_ember_available() -> str | None:
    reason = _torch_available("inductor")()
    if reason is None and importlib.util.find_spec("ember.inductor") is None:
        reason = "ember.inductor is not installed"
    return reason


def _torch_ember_prepare(model: Any, options: CompileOptions, stats: CompileStats) -> Any:
    """torch.compile with ember.inductor as its backend: the two inductors behind one frontend."""
    import ember.inductor

    return torch.compile(
        model,
        backend=_counting(ember.inductor.backend, stats),
        fullgraph=options.fullgraph,
        dynamic=options.dynamic,
    )


register_compiler(
    Compiler(
        name="torch-ember-inductor",
        description="torch.compile(backend=ember.inductor.backend): TorchDynamo + ember.inductor",
        prepare=_torch_ember_prepare,
        available=_torch_ember_available,
        reset=_torch_reset,
        disk_cache=True,
        rng_matches_eager=False,
    )
)


def torch_break_stats(stats: CompileStats) -> None:
    """Fill break count and reasons from torch._dynamo's counters."""
    from torch._dynamo.utils import counters

    breaks: dict[str, int] = counters.get("graph_break", {})
    stats.breaks = int(sum(breaks.values()))
    stats.break_reasons = [str(k).splitlines()[0] for k in breaks]


for _name, _desc, _rng in (
    ("eager", "torch.compile(backend='eager'): dynamo capture only", True),
    ("aot_eager", "torch.compile(backend='aot_eager'): + AOTAutograd", False),
    ("inductor", "torch.compile(backend='inductor'): the default", False),
):
    register_compiler(
        Compiler(
            name=f"torch-{_name}",
            description=_desc,
            prepare=_torch_prepare(_name),
            available=_torch_available(_name),
            reset=_torch_reset,
            disk_cache=_name == "inductor",
            rng_matches_eager=_rng,
        )
    )


def ember_break_stats(
    model: Any, args: tuple[Any, ...], stats: CompileStats, kwargs: dict[str, Any] | None = None
) -> None:
    """Fill break count from ember.dynamo's explain() when it has one."""
    dynamo = _ember_dynamo()
    explain = getattr(dynamo, "explain", None)
    if explain is None:
        return
    out = explain(model)(*args, **(kwargs or {}))
    for attr in ("graph_break_count", "break_count", "breaks"):
        value = getattr(out, attr, None)
        if isinstance(value, int):
            stats.breaks = value
            break
        if isinstance(value, list | tuple):
            stats.breaks = len(value)
            break
    reasons = getattr(out, "break_reasons", None)
    if isinstance(reasons, list | tuple):
        stats.break_reasons = [_first_line(r) for r in reasons]


def _first_line(obj: object) -> str:
    text = str(obj).strip()
    return text.splitlines()[0] if text else type(obj).__name__


register_compiler(
    Compiler(
        name="torch-inductor-ro",
        description="torch.compile(mode='reduce-overhead'): inductor with CUDA graphs",
        prepare=_torch_ro_prepare,
        available=_torch_available("inductor"),
        reset=_torch_reset,
        disk_cache=True,
        rng_matches_eager=False,
    )
)
