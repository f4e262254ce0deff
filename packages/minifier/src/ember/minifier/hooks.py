"""Wiring into ember.dynamo and ember.aotgrad without either importing ember.minifier.

The frontends find `maybe_wrap_backend` through the ``ember.repro`` entry-point
group and call it on the compiler they are about to use::

    for ep in importlib.metadata.entry_points(group="ember.repro", name="wrap_backend"):
        compiler_fn = ep.load()(compiler_fn, after="dynamo")   # or after="aot"

It reads ``EMBER_REPRO_AFTER`` / ``EMBER_REPRO_LEVEL`` / ``EMBER_REPRO_DIR`` once
and returns ``compiler_fn`` unchanged unless ``EMBER_REPRO_AFTER`` names this stage.

Levels: 1 dumps the failing graph; 2 also minifies compile/run errors into a
repro; 3 also dumps every graph compiled; 4 also checks accuracy against a
float64 eager reference and minifies inaccuracies.
"""

from __future__ import annotations

import copy
import itertools
import logging
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

from ember.minifier.artifacts import failure_json, write_dump, write_repro
from ember.minifier.backends import BackendFn, ref_for
from ember.minifier.driver import minify
from ember.minifier.errors import InaccurateBackend, MinifierError, NoFailureReproduced
from ember.minifier.failure import BackendError, Failure, Inaccuracy, Signature
from ember.minifier.state import State

log = logging.getLogger("ember.minifier")

STAGES = ("dynamo", "aot")


@dataclass(frozen=True, slots=True)
class ReproOptions:
    """What the repro hook does.

    after: which graphs: ``dynamo`` (the torch-level graph handed to the backend)
        or ``aot`` (each forward/backward ATen graph handed to the inner compiler).
    level: 1 dump failing graphs, 2 + minify errors, 3 + dump every graph, 4 + accuracy.
    repro_dir: where dumps and repros go (one subdirectory per graph).
    time_budget: seconds per minification.
    tol: accuracy tolerance at level 4 (see `ember.minifier.compare_outputs`).
    """

    after: str
    level: int = 2
    repro_dir: Path = field(default_factory=lambda: Path.cwd() / "ember_repro")
    time_budget: float = 120.0
    tol: float = 1e-5


def options_from_env(environ: Mapping[str, str] | None = None) -> ReproOptions | None:
    """`ReproOptions` from ``EMBER_REPRO_*``, or ``None`` when ``EMBER_REPRO_AFTER`` is unset."""
    env = os.environ if environ is None else environ
    after = env.get("EMBER_REPRO_AFTER", "").strip().lower()
    if not after:
        return None
    if after not in STAGES:
        warnings.warn(
            f"EMBER_REPRO_AFTER={after!r} is not one of {', '.join(STAGES)}; repro dumping is off",
            stacklevel=2,
        )
        return None
    raw = env.get("EMBER_REPRO_LEVEL", "2").strip()
    if raw not in ("1", "2", "3", "4"):
        warnings.warn(f"EMBER_REPRO_LEVEL={raw!r} is not 1..4; using 2", stacklevel=2)
        raw = "2"
    directory = env.get("EMBER_REPRO_DIR") or str(Path.cwd() / "ember_repro")
    return ReproOptions(after=after, level=int(raw), repro_dir=Path(directory))


def maybe_wrap_backend(compiler_fn: BackendFn, *, after: str,
                       environ: Mapping[str, str] | None = None) -> BackendFn:
    """The ``ember.repro`` entry point: wrap ``compiler_fn`` if ``EMBER_REPRO_AFTER == after``."""
    opts = options_from_env(environ)
    if opts is None or opts.after != after:
        return compiler_fn
    return wrap_backend(compiler_fn, after=after, level=opts.level, repro_dir=opts.repro_dir)


def materialize(value: Any, seed: int) -> Any:
    """A real example value for ``value`` (fake and meta tensors become seeded random tensors)."""
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        hint = getattr(value.node, "hint", None)
        return hint if hint is not None else int(value)
    if not isinstance(value, torch.Tensor):
        return value
    fake = type(value).__name__ == "FakeTensor" or value.device.type == "meta"
    if not fake:
        return value.detach().clone().requires_grad_(value.requires_grad)
    device = getattr(value, "fake_device", value.device)
    device = torch.device("cpu") if device.type == "meta" else device
    shape = tuple(int(s) for s in value.shape)
    stride = tuple(int(s) for s in value.stride())
    out = torch.empty_strided(shape, stride, dtype=value.dtype, device=device)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        if value.dtype.is_floating_point:
            out.copy_(torch.randn(shape, generator=gen, dtype=value.dtype))
        elif value.dtype == torch.bool:
            out.copy_(torch.randint(0, 2, shape, generator=gen).bool())
        else:
            out.copy_(torch.randint(0, 8, shape, generator=gen, dtype=value.dtype))
    return out.requires_grad_(value.requires_grad)


def claim_dir(root: Path, after: str) -> Path:
    """A fresh ``<root>/<after>_graph_<n>`` (the first free n), created now.

    Claimed on disk rather than counted in memory, so the forward and backward
    compilers (wrapped separately) and earlier runs never overwrite each other.
    """
    root.mkdir(parents=True, exist_ok=True)
    for n in itertools.count():
        path = root / f"{after}_graph_{n}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")


class _Reporter:
    """Dumps, minifies and annotates one failing graph (once)."""

    def __init__(self, compiler_fn: BackendFn, after: str, level: int, root: Path,
                 time_budget: float, directory: Path | None = None) -> None:
        self.compiler_fn = compiler_fn
        self.after = after
        self.level = level
        self.root = root
        self._dir = directory
        self.time_budget = time_budget
        self.done = False

    @property
    def dir(self) -> Path:
        if self._dir is None:
            self._dir = claim_dir(self.root, self.after)
        return self._dir

    def report(self, gm: fx.GraphModule, inputs: Sequence[Any], failure: Failure) -> str:
        """Write what the level asks for; log and return a sentence saying where it went.

        Logged as well as returned: a frontend may catch the error and fall back to
        eager, and the user must still learn that a repro was written.
        """
        said = self._report(gm, inputs, failure)
        log.warning("%s", said)
        return said

    def _report(self, gm: fx.GraphModule, inputs: Sequence[Any], failure: Failure) -> str:
        if self.done:
            return f"ember.minifier: already reported in {self.dir}"
        self.done = True
        ref = ref_for(self.compiler_fn)
        record = failure_json(failure, ref, after=self.after)
        try:
            write_dump(self.dir / "failing", gm, inputs, record)
        except Exception as exc:
            return f"ember.minifier: could not dump the failing graph to {self.dir}: {exc}"
        said = f"ember.minifier: dumped the failing graph to {self.dir / 'failing'}"
        if self.level < 2:
            return said + " (EMBER_REPRO_LEVEL=2 also minifies it)"
        try:
            result = minify(gm, list(inputs), failure, time_budget=self.time_budget,
                            progress=lambda line: log.warning("%s", line))
            path = write_repro(result, self.dir / "minified", extra={"after": self.after})
        except NoFailureReproduced as exc:
            return f"{said}; minifying it did not reproduce the failure ({exc})"
        except MinifierError as exc:
            return f"{said}; minifying it failed: {exc}"
        except Exception as exc:
            log.exception("ember.minifier failed while minifying %s", self.dir)
            return f"{said}; the minifier itself failed ({type(exc).__name__}: {exc}), see the log"
        tail = "run it with `python repro.py`" if (path / "repro.py").exists() else (
            "no repro.py: the backend is not importable by name")
        return f"{said}; minified {result.start_nodes} -> {result.final_nodes} nodes into {path} ({tail})"


def wrap_backend(compiler_fn: BackendFn, *, after: str = "dynamo", level: int = 2,
                 repro_dir: str | Path | None = None, time_budget: float = 120.0,
                 tol: float = 1e-5) -> BackendFn:
    """``compiler_fn`` with failures dumped (and at level >= 2 minified) under ``repro_dir``.

    Errors still propagate, with a note saying where the dump and repro went; at
    level 4 an inaccurate graph raises `InaccurateBackend`.
    """
    root = Path(repro_dir) if repro_dir is not None else Path.cwd() / "ember_repro"

    def wrapped(gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        pristine = copy.deepcopy(gm)
        real = [materialize(v, 1000 + i) for i, v in enumerate(example_inputs)]
        directory = None
        if level >= 3:  # written before compiling: survives a backend that kills the process
            directory = claim_dir(root, after)
            ref = ref_for(compiler_fn)
            write_dump(directory / "graph", pristine, real,
                       {"after": after, "backend": ref.to_json() if ref else None})
        reporter = _Reporter(compiler_fn, after, level, root, time_budget, directory)
        try:
            compiled = compiler_fn(gm, example_inputs)
        except Exception as exc:
            exc.add_note(reporter.report(pristine, real, BackendError(
                compiler_fn, Signature.of("compile", exc))))
            raise
        if level >= 4:
            _check_accuracy(compiler_fn, pristine, real, tol, reporter)
        return _guard_runtime(compiled, pristine, reporter)

    wrapped.__qualname__ = f"wrap_backend({getattr(compiler_fn, '__qualname__', compiler_fn)})"
    return wrapped


def _check_accuracy(compiler_fn: BackendFn, gm: fx.GraphModule, inputs: list[Any], tol: float,
                    reporter: _Reporter) -> None:
    failure = Inaccuracy(compiler_fn, tol=tol)
    verdict = failure.check(State(gm, tuple(inputs)))
    if verdict.failed:
        where = reporter.report(gm, inputs, failure)
        raise InaccurateBackend(str(reporter.dir), verdict.detail, where)


def _guard_runtime(compiled: Callable[..., Any], gm: fx.GraphModule,
                   reporter: _Reporter) -> Callable[..., Any]:
    boxed = bool(getattr(compiled, "_boxed_call", False))

    def run(*args: Any) -> Any:
        saved = list(args[0]) if boxed else list(args)
        try:
            return compiled(*args)
        except Exception as exc:
            real = [materialize(v, 2000 + i) for i, v in enumerate(saved)]
            exc.add_note(reporter.report(gm, real, BackendError(
                reporter.compiler_fn, Signature.of("run", exc))))
            raise

    run._boxed_call = boxed  # type: ignore[attr-defined]
    return run
