"""``InductorOptions``: every knob of a compile, passed in and hashed into cache keys."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any

from ember.ir.cache_entry import default_cache_dir
from ember.ir.debug import package_folder

__all__ = ["CppOptions", "InductorOptions", "default_cache_dir", "options_from_env"]


@dataclass(frozen=True, slots=True)
class CppOptions:
    """Settings of the C++/OpenMP code generator and its compiler (CPU tensors)."""

    #: C++ compiler executable.
    cxx: str = "g++"
    #: Compiler flags. ``-fno-tree-sink``/``-fno-tree-pre`` stop gcc 12 from moving math calls
    #: into branches (which blocks vectorizing a loop with a ``where``); ``-fno-math-errno``
    #: lets it call libmvec's vector variants.
    cflags: tuple[str, ...] = (
        "-O3",
        "-march=native",
        "-fopenmp",
        "-fno-math-errno",
        "-fno-tree-sink",
        "-fno-tree-pre",
        "-shared",
        "-fPIC",
    )
    #: Kernels with fewer elements of work than this run single-threaded.
    parallel_threshold: int = 32768
    #: Emit reductions over a strided dim (``x.sum(0)``) with the loops interchanged, so the
    #: kept dim is the vectorized inner loop (see ``codegen/cpp_column.py``).
    column_reductions: bool = True


@dataclass(frozen=True, slots=True)
class TritonOptions:
    """Settings of the Triton code generator (CUDA tensors; CPU tensors with ``cpu_backend``)."""

    #: Benchmark a kernel's candidate launch configurations on its first call and keep the
    #: fastest (cached on disk); False: use the first candidate.
    autotune: bool = True


#: ``mode=`` values (torch.compile's): what each asks of ember.inductor is in ADR 0011.
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: Code generators ``cpu_backend`` may name.
CPU_BACKENDS = ("cpp", "triton")


@dataclass(frozen=True, slots=True)
class InductorOptions:
    """Options of one compile. Fields that change generated code are part of cache keys.

    General settings are fields here; each code generator's own settings are one nested
    field (``cpp``).
    """

    #: The C++ code generator's and compiler's settings.
    cpp: CppOptions = CppOptions()
    #: The Triton code generator's settings.
    triton: TritonOptions = TritonOptions()
    #: Which generator compiles graphs on CPU tensors: ``"cpp"`` (C++/OpenMP), or
    #: ``"triton"`` (Triton kernels run by Triton's interpreter: slow, for testing the
    #: Triton backend without a GPU; needs the ``triton`` package).
    cpu_backend: str = "cpp"
    #: torch.compile's ``mode``: ``"max-autotune"``/``"max-autotune-no-cudagraphs"`` widen
    #: the Triton autotuning space and try a Triton matmul template against ATen's;
    #: ``"reduce-overhead"`` replays graphs on CUDA tensors from CUDA graphs (ADR 0039;
    #: elsewhere it warns, ADR 0011).
    mode: str = "default"
    #: Directory for compiled kernels; None means ``default_cache_dir()`` at the entry point.
    cache_dir: str | None = None
    #: Threads building the kernels of one graph (compiler processes).
    compile_threads: int = 2
    #: A pointwise value read by several consumers is stored once it loads more than this many inputs.
    realize_reads_threshold: int = 4
    #: ... or once its body has more than this many ops.
    realize_ops_threshold: int = 40
    #: Most ops inlined into one value before it is stored regardless of users.
    max_inline_ops: int = 200
    #: Most nodes in one fused kernel.
    max_fusion_size: int = 64
    #: Merge independent pointwise kernels over the same loops into one (an optimizer
    #: step's per-parameter updates; ``horizontal.py``).
    horizontal_fusion: bool = True
    #: ATen ops kept as extern calls even when they have a lowering ("aten::op.overload" names).
    force_fallback: frozenset[str] = field(default_factory=frozenset)
    #: Log the wrapper and kernels under the ``output_code`` logger.
    output_code: bool = False
    #: On an internal error, log it and run the graph eagerly (False: raise; tests use this).
    #: ``EMBER_STRICT=1`` sets it False.
    fallback_on_error: bool = True
    #: Write generated code and IR dumps here (None: off).
    debug_dir: str | None = None
    #: Keep whole compiled graphs (wrapper and kernel sources) in ``cache_dir`` too, so a
    #: second process skips lowering and codegen (``graph_cache.py``). ``EMBER_GRAPH_CACHE=0``
    #: turns it off.
    graph_cache: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"InductorOptions.mode={self.mode!r}: known modes are {', '.join(MODES)}")
        if self.cpu_backend not in CPU_BACKENDS:
            raise ValueError(
                f"InductorOptions.cpu_backend={self.cpu_backend!r}: known CPU backends are "
                f"{', '.join(CPU_BACKENDS)}"
            )

    def cache_key_fields(self) -> str:
        skip = {
            "cache_dir",
            "compile_threads",
            "output_code",
            "debug_dir",
            "fallback_on_error",
            "graph_cache",
        }
        return repr(
            sorted(
                (f.name, repr(getattr(self, f.name))) for f in fields(self) if f.name not in skip
            )
        )


def options_from_env(base: InductorOptions | None = None) -> InductorOptions:
    """Apply ``EMBER_CACHE_DIR``, ``EMBER_GRAPH_CACHE``, ``EMBER_COMPILE_DEBUG``
    (``<debug base>/inductor``, ember.ir.debug) and ``EMBER_STRICT`` once. ``EMBER_LOGS``
    is ember.ir's (``logs.configure_from_env``): ``output_code`` enables the logger, not
    an option."""
    from dataclasses import replace

    opts = base or InductorOptions()
    changes: dict[str, Any] = {}
    if opts.cache_dir is None:
        changes["cache_dir"] = default_cache_dir()
    if os.environ.get("EMBER_GRAPH_CACHE") == "0" and opts.graph_cache:
        changes["graph_cache"] = False
    if os.environ.get("EMBER_STRICT") == "1" and opts.fallback_on_error:
        changes["fallback_on_error"] = False
    if opts.debug_dir is None:
        debug_dir = package_folder("inductor")
        if debug_dir is not None:
            changes["debug_dir"] = debug_dir
    return replace(opts, **changes) if changes else opts
