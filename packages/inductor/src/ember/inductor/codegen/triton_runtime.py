"""Loading, compiling, launching and autotuning Triton kernels.

Each kernel's source is a module written to ``<cache_dir>/triton/<key[:2]>/<key>.py``
(Triton reads a kernel's source from its file), keyed by the source, Triton's
version and the device's architecture, and imported once per process. On a GPU
the kernels of a graph are compiled in parallel (one ``warmup`` per candidate
configuration, in threads; Triton keeps the binaries in its own cache). For CPU
tensors the kernel runs under Triton's interpreter, with ``libdevice`` bound to
``triton_libdevice.py``.

A ``Launcher`` is what the wrapper calls: ``kernel3(buf0, buf1, 4096, 512)`` (the
buffers, then the element counts). The grid comes from the counts and the chosen
configuration. With several candidate configurations the first call benchmarks
them on the real arguments (one progress line on stderr) and the winner is
written to ``<cache_dir>/triton_tune/``, so a warm start does no tuning. On CUDA
Triton launches on the current stream.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import time
import types
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ember.ir.cache_entry import entry_path, load_entry, store_entry

from ..errors import KernelIndexError
from ..logs import log
from . import triton_direct
from .backend import BuildStats, KernelSource
from .triton_configs import PERSISTENT_RNUMEL, Config, candidate_configs, grid
from .triton_direct import DirectLaunches


@functools.cache
def triton_version() -> str:
    import triton

    return str(triton.__version__)


def device_arch(device: torch.device) -> str:
    """What compiled code depends on: the GPU's name and compute capability, or the interpreter."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"cuda {torch.cuda.get_device_name(device)} sm_{major}{minor}"
    return f"interpreter ({device.type})"


def interpreted(device: torch.device) -> bool:
    """Whether kernels for ``device`` run in Triton's interpreter: always for CPU tensors,
    and for CUDA tensors too when ``TRITON_INTERPRET=1`` made ``triton.jit`` interpret."""
    if device.type == "cpu":
        return True
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def kernel_key(source: str, device: torch.device) -> str:
    h = hashlib.sha256()
    for part in (source, triton_version(), device_arch(device)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


# Modules imported in this process, by key.
_MODULES: dict[str, types.ModuleType] = {}


def _write_source(path: Path, source: str) -> bool:
    """Make ``path`` hold ``source``; True if it already did (a cache hit)."""
    try:
        if path.read_text() == source:
            return True
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".py.tmp")
    with os.fdopen(fd, "w") as f:
        f.write(source)
    os.replace(tmp, path)
    return False


def load_module(source: str, cache_dir: str, device: torch.device) -> tuple[types.ModuleType, bool]:
    """The kernel module for ``source`` (imported once per process) and whether its file was cached."""
    key = kernel_key(source, device)
    hit = _MODULES.get(key)
    if hit is not None:
        return hit, True
    path = Path(cache_dir) / "triton" / key[:2] / f"{key}.py"
    cached = _write_source(path, source)
    name = f"ember_triton_{key[:24]}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if interpreted(device):
        _interpret(module)
    _MODULES[key] = module
    return module, cached


def _interpret(module: types.ModuleType) -> None:
    """Rebind the module's kernels to Triton's interpreter, its ``libdevice`` to numpy, and
    its ``range`` to :func:`interpreted_range`."""
    from triton.runtime.interpreter import InterpretedFunction

    from . import triton_libdevice

    for name, value in list(vars(module).items()):
        raw = getattr(value, "fn", None)
        if raw is not None and callable(raw) and type(value).__name__ in ("JITFunction", "InterpretedFunction"):
            setattr(module, name, InterpretedFunction(raw))
    module.libdevice = triton_libdevice  # type: ignore[attr-defined]
    module.range = interpreted_range  # type: ignore[attr-defined]


def _scalar(value: Any) -> Any:
    """A scalar kernel argument as a Python int: Triton's interpreter holds each one as a
    one-element numpy array (``tl.tensor`` around ``np.array([n])``)."""
    handle = getattr(value, "handle", None)
    data = getattr(handle, "data", None)
    if data is not None and getattr(data, "size", 0) == 1:
        return data.reshape(()).item()
    return value


def interpreted_range(*args: Any) -> range:
    """``range`` in an interpreted kernel's body (a looped reduction's
    ``for r0offset in range(0, r0numel, RBLOCK)``).

    Python's ``range`` calls ``__index__`` on ``r0numel``, which Triton 3.6's interpreter
    defines as ``int(self.handle.data)`` of a one-element 1-D array; NumPy deprecated that
    conversion in 1.25 and refuses it from 2.4 (``TypeError: only 0-dimensional arrays can
    be converted to Python scalars``), so every looped kernel failed with Triton 3.6 and
    NumPy 2.4/2.5 (the GPU image's pair). Triton 3.8 squeezes the array first. The kernel
    module's globals are what the interpreter runs its body in, so this name shadows the
    builtin there only; a compiled kernel never sees it."""
    return range(*(_scalar(a) for a in args))


#: int32 indices hold up to here; a symbolic kernel's ``_i64`` variant runs beyond it
INT32_MAX = 2**31 - 1


def _pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


@dataclass
class Launcher:
    """Calls one kernel: picks (or tunes) its configuration, computes the grid, checks indices.

    A kernel over symbolic sizes (``meta["symbolic"]``) is called with its element counts
    and size arguments for this call; the configuration, and the variant of the kernel
    (persistent or looped reduction, int32 or int64 indices; ``triton_kernel.py``), are
    chosen once per *size bucket* (each count rounded up to a power of two) and kept, so
    calls at a new size in a known bucket cost a dictionary lookup."""

    name: str
    fn: Any
    meta: dict[str, Any]
    configs: list[Config]
    device: torch.device
    tune_path: Path | None
    chosen: Config | None = None
    err: torch.Tensor | None = field(default=None, repr=False)
    #: launch keywords per configuration (built once: ``_launch`` runs on every call)
    _kwargs: dict[Config, dict[str, Any]] = field(default_factory=dict, repr=False)

    #: compiled kernels launched without ``JITFunction.run`` (``triton_direct``), or None
    direct: DirectLaunches | None = field(default=None, repr=False)
    #: symbolic kernels: the module's variants by name (``kernel``, ``kernel_persistent_i64``)
    variants: dict[str, Any] = field(default_factory=dict, repr=False)
    #: symbolic kernels: (count buckets, int64) -> (variant, configuration)
    buckets: dict[tuple[tuple[int, ...], bool], tuple[Any, Config]] = field(
        default_factory=dict, repr=False
    )
    #: autotuning on (several candidates per bucket), and where winners are cached
    autotune: bool = True
    max_autotune: bool = False
    cache_key: str = ""
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        self.symbolic = bool(self.meta.get("symbolic"))
        self.n_numels = len(self.meta.get("numels", ()))
        if len(self.configs) == 1 and not self.symbolic:
            self.chosen = self.configs[0]
        if self.meta.get("index_check"):
            self.err = torch.zeros(1, dtype=torch.int32, device=self.device)
        if (
            self.device.type == "cuda"
            and not self.symbolic
            and not interpreted(self.device)
            and triton_direct.enabled()
            and triton_direct.supported()
            and getattr(self.fn, "arg_names", None) is not None
        ):
            self.direct = triton_direct.DirectLaunches(self.name, self.fn.arg_names)

    def _launch(
        self, config: Config, tensors: Sequence[Any], numels: Sequence[int], fn: Any = None,
        sizes: Sequence[int] = (),
    ) -> None:
        extra = (self.err,) if self.err is not None else ()
        g = grid(self.meta["kind"], numels, config)
        if g[0] == 0:
            return
        kwargs = self.kwargs(config)
        fn = self.fn if fn is None else fn
        if self.device.type == "cuda" and self.device.index != torch.cuda.current_device():
            with torch.cuda.device(self.device):  # Triton launches on the current device's stream
                fn[g](*tensors, *extra, *numels, *sizes, **kwargs)
            return
        direct = self.direct
        if direct is None:
            fn[g](*tensors, *extra, *numels, *sizes, **kwargs)
            return
        args = (*tensors, *extra, *numels)
        key = triton_direct.spec_key(args)
        tail = direct.tail(config, len(args), kwargs)
        if key is not None and tail is not None:
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            if direct.launch(config, key, g, args, tail, index):
                return
        if direct.broken:
            self.direct = None
        kernel = self.fn[g](*args, **kwargs)
        if key is not None and tail is not None and not direct.broken:
            direct.remember(config, key, kernel)

    def kwargs(self, config: Config) -> dict[str, Any]:
        """What a launch (or a compile ahead of it) passes besides the arguments."""
        kwargs = self._kwargs.get(config)
        if kwargs is None:
            kwargs = self._kwargs[config] = config.kwargs()
            if self.meta.get("asserts"):
                # device-side index checks are compiled in only with debug; the overflow
                # checks debug also turns on are not wanted (what torch's inductor passes too)
                kwargs.update(debug=True, sanitize_overflow=False)
        return kwargs

    def __call__(self, *args: Any) -> None:
        n = self.meta["n_tensors"]
        if self.symbolic:
            self._call_symbolic(args)
        else:
            tensors, numels = args[:n], args[n:]
            config = self.chosen
            if config is None:
                config = self.chosen = self._tune(tensors, numels, self.configs, self.tune_path)
            self._launch(config, tensors, numels)
        if self.err is not None and int(self.err.item()):
            self.err.zero_()
            raise KernelIndexError(
                f"index out of range in generated kernel {self.name} (an indirect index from "
                "gather/index/index_select/embedding was outside its dimension)"
            )

    def _call_symbolic(self, args: Sequence[Any]) -> None:
        """``(tensors..., counts..., size arguments..., [largest index])`` for this call."""
        n, k = self.meta["n_tensors"], self.n_numels
        tensors, numels = args[:n], args[n : n + k]
        n_sizes = len(self.meta.get("size_hints", ()))
        sizes = args[n + k : n + k + n_sizes]
        int64 = "index_bound" in self.meta and args[n + k + n_sizes] > INT32_MAX
        bucket = (tuple(_pow2(v) for v in numels), int64)
        hit = self.buckets.get(bucket)
        if hit is None:
            hit = self.buckets[bucket] = self.choose(bucket, tensors, numels, sizes)
        fn, config = hit
        self._launch(config, tensors, numels, fn, sizes)

    def plan_bucket(self, bucket: tuple[tuple[int, ...], bool]) -> tuple[Any, list[Config], dict[str, Any]]:
        """The variant and candidate configurations of a size bucket."""
        counts, int64 = bucket
        meta = dict(self.meta, numels=list(counts))
        name = "kernel"
        if "kernel_persistent" in self.meta.get("variants", ()):
            widest = max(counts[1:], default=1)
            if widest <= PERSISTENT_RNUMEL:
                name = "kernel_persistent"
                meta.update(persistent=True, rblock=max(16, widest))
        if int64 and f"{name}_i64" in self.variants:
            name = f"{name}_i64"
        configs = candidate_configs(meta, self.device, max_autotune=self.max_autotune)
        if not self.autotune:
            configs = configs[:1]
        return self.variants.get(name, self.fn), configs, meta

    def choose(
        self, bucket: tuple[tuple[int, ...], bool], tensors: Sequence[Any], numels: Sequence[int],
        sizes: Sequence[int],
    ) -> tuple[Any, Config]:
        fn, configs, _ = self.plan_bucket(bucket)
        if len(configs) == 1:
            return fn, configs[0]
        path = None
        if self.cache_dir is not None:
            path = _tune_path(self.cache_dir, self.cache_key, [*bucket[0], int(bucket[1])], configs)
        return fn, self._tune(tensors, numels, configs, path, fn, sizes)

    def _tune(
        self, tensors: Sequence[Any], numels: Sequence[int], configs: Sequence[Config],
        tune_path: Path | None, fn: Any = None, sizes: Sequence[int] = (),
    ) -> Config:
        """Benchmark every candidate on these arguments (the kernel's stores never alias its
        loads, so running it repeatedly is harmless); the winner goes to the disk cache."""
        if tune_path is not None:
            hit = load_entry(tune_path, Config.from_json, log)
            if hit is not None and hit in configs:
                return hit
        timings: list[tuple[float, Config]] = []
        start = time.perf_counter()
        for config in configs:
            try:
                t = benchmark(
                    functools.partial(self._launch, config, tensors, numels, fn, sizes), self.device
                )
            except Exception as e:  # a configuration this kernel cannot run (resources)
                log.debug("autotune %s: %s failed (%s: %s)", self.name, config, type(e).__name__, e)
                continue
            timings.append((t, config))
        if not timings:
            raise RuntimeError(f"no configuration of Triton kernel {self.name} ran")
        best_t, best = min(timings, key=lambda tc: tc[0])
        sys.stderr.write(
            f"[ember.inductor] autotuned {self.name} ({self.meta['kind']}, numels {list(numels)}): "
            f"{len(timings)} configs in {time.perf_counter() - start:.2f}s, best {best} "
            f"{best_t * 1e3:.3f} ms\n"
        )
        if tune_path is not None:
            store_entry(tune_path, best.to_json(), Config.from_json, log)
        return best


def benchmark(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds per call of ``fn`` (CUDA: Triton's event-timed ``do_bench``; else best of 3)."""
    if device.type == "cuda":
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=5, rep=25)) / 1e3
    fn()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _tune_path(cache_dir: str, source_key: str, numels: Sequence[int], configs: Sequence[Config]) -> Path:
    h = hashlib.sha256(
        json.dumps([source_key, list(numels), [c.to_json() for c in configs]]).encode()
    ).hexdigest()
    return entry_path(cache_dir, "triton_tune", h)


def build(
    kernels: Mapping[str, KernelSource],
    cache_dir: str,
    device: torch.device,
    *,
    max_autotune: bool,
    autotune: bool,
    threads: int,
    stats: BuildStats,
) -> dict[str, Launcher]:
    """Load every kernel's module and make its launcher; on a GPU, compile the candidate
    configurations of all kernels in parallel before the first call."""
    launchers: dict[str, Launcher] = {}
    for name, k in kernels.items():
        module, cached = load_module(k.source, cache_dir, device)
        stats.cached += cached
        stats.compiled += not cached
        key = kernel_key(k.source, device)
        if k.meta.get("symbolic"):  # configurations are chosen per size bucket, at call time
            variants = {v: getattr(module, v) for v in k.meta["variants"]}
            launchers[name] = Launcher(
                name, module.kernel, k.meta, [], device, None, variants=variants,
                autotune=autotune, max_autotune=max_autotune, cache_key=key, cache_dir=cache_dir,
            )
            continue
        configs = candidate_configs(k.meta, device, max_autotune=max_autotune)
        if not autotune:
            configs = configs[:1]
        path = _tune_path(cache_dir, key, k.meta["numels"], configs)
        launchers[name] = Launcher(name, module.kernel, k.meta, configs, device, path)
    if device.type == "cuda":
        _precompile(launchers, kernels, threads)
    return launchers


def _precompile(launchers: Mapping[str, Launcher], kernels: Mapping[str, KernelSource], threads: int) -> None:
    """Compile each (kernel, configuration) ahead of the first call, ``threads`` at a time
    (first run on a GPU on 2026-11-27: ``tools/gpu_check.sh``, README "On a GPU")."""
    jobs: list[Callable[[], Any]] = []
    for name, launcher in launchers.items():
        dtypes = kernels[name].meta["arg_dtypes"]
        dummies = [torch.empty(16, dtype=getattr(torch, d), device=launcher.device) for d in dtypes]
        if launcher.err is not None:
            dummies.append(launcher.err)
        meta = kernels[name].meta
        fn, configs, numels = launcher.fn, launcher.configs, list(meta["numels"])
        if launcher.symbolic:  # the bucket of the sizes compiled with
            numels = list(meta["numel_hints"]) + list(meta.get("size_hints", ()))
            bucket = (
                tuple(_pow2(v) for v in meta["numel_hints"]),
                meta.get("index_bound_hint", 0) > INT32_MAX,
            )
            fn, configs, _ = launcher.plan_bucket(bucket)
        for config in configs:
            jobs.append(
                functools.partial(fn.warmup, *dummies, *numels, grid=(1,), **launcher.kwargs(config))
            )
    with ThreadPoolExecutor(max(1, threads)) as pool:
        for fut in [pool.submit(job) for job in jobs]:
            try:
                fut.result()
            except Exception as e:  # the configuration fails again at tuning and is skipped
                log.debug("precompiling a Triton kernel failed: %s: %s", type(e).__name__, e)
