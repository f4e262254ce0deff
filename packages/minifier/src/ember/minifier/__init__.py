"""ember.minifier: shrink a graph on which a backend fails or is inaccurate into a repro.

    >>> result = minify(graph, inputs, BackendError("inductor"))   # doctest: +SKIP
    >>> write_repro(result, "repro_dir")                            # doctest: +SKIP
"""

from ember.minifier.driver import MinifyOptions, MinifyResult, Step, minify
from ember.minifier.errors import (
    BackendNotFound,
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
from ember.minifier.state import State
from ember.minifier.strategies import STRATEGIES, Strategy

__all__ = [
    "STRATEGIES",
    "BackendError",
    "BackendNotFound",
    "Failure",
    "Inaccuracy",
    "InputMismatch",
    "MinifierError",
    "MinifyOptions",
    "MinifyResult",
    "NoFailureReproduced",
    "Predicate",
    "ReproFormatError",
    "Signature",
    "State",
    "Step",
    "Strategy",
    "Verdict",
    "compare_outputs",
    "minify",
]
