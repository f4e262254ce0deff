"""ember.minifier: shrink a graph on which a backend fails or is inaccurate into a repro.

- `minify(graph, inputs, failure)`: delta debugging over an ``ember.ir`` `GraphIR`
  (or a ``torch.fx.GraphModule``) down to a 1-minimal failing graph.
- Failure kinds: `BackendError` (compile/run error, matched by signature),
  `Inaccuracy` (vs a float64 eager reference), `Predicate` (any check).
- `write_repro(result, dir)`: graph (ember.ir) + inputs (safetensors / seeds) +
  a standalone ``repro.py``; `read_dump` reads such a directory back.
- `wrap_backend` / `maybe_wrap_backend`: the ``EMBER_REPRO_*`` hook for ember.dynamo
  and ember.aotgrad (entry point group ``ember.repro``, name ``wrap_backend``).
- CLI: ``python -m ember.minifier minify <graph_dir> --backend NAME [--accuracy]``
  and ``python -m ember.minifier run <repro_dir>``.
"""

from ember.minifier.artifacts import Dump, read_dump, write_dump, write_repro
from ember.minifier.driver import MinifyOptions, MinifyResult, Step, minify
from ember.minifier.errors import (
    BackendNotFound,
    InaccurateBackend,
    InputMismatch,
    MinifierError,
    NoFailureReproduced,
    ReproFormatError,
)
from ember.minifier.failure import (
    BackendError,
    Failure,
    Inaccuracy,
    Predicate,
    Signature,
    Verdict,
    compare_outputs,
)
from ember.minifier.hooks import ReproOptions, maybe_wrap_backend, options_from_env, wrap_backend
from ember.minifier.state import State
from ember.minifier.strategies import STRATEGIES, Strategy

__all__ = [
    "STRATEGIES",
    "BackendError",
    "BackendNotFound",
    "Dump",
    "Failure",
    "InaccurateBackend",
    "Inaccuracy",
    "InputMismatch",
    "MinifierError",
    "MinifyOptions",
    "MinifyResult",
    "NoFailureReproduced",
    "Predicate",
    "ReproFormatError",
    "ReproOptions",
    "Signature",
    "State",
    "Step",
    "Strategy",
    "Verdict",
    "compare_outputs",
    "maybe_wrap_backend",
    "minify",
    "options_from_env",
    "read_dump",
    "wrap_backend",
    "write_dump",
    "write_repro",
]
