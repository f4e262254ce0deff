"""Errors raised by ember.minifier.

Each message says what happened, where, why, and what to do.
"""

from __future__ import annotations


class MinifierError(Exception):
    """Base class of every error ember.minifier raises on purpose."""


class NoFailureReproduced(MinifierError):
    """The graph does not fail the way the check asks for, so there is nothing to minify.

    Example::

        >>> raise NoFailureReproduced("backend 'eager'", "it compiled and ran without error")
        Traceback (most recent call last):
        ...
        ember.minifier.errors.NoFailureReproduced: no failure reproduced with backend 'eager': \
it compiled and ran without error; nothing was written. ...
    """

    def __init__(self, what: str, detail: str) -> None:
        self.what = what
        self.detail = detail
        super().__init__(
            f"no failure reproduced with {what}: {detail}; nothing was written. "
            "If the failure is intermittent or depends on state outside the graph "
            "(global flags, other threads), the minifier cannot isolate it."
        )


class BackendNotFound(MinifierError):
    """A backend name resolves neither to an ``ember.backends`` entry point nor to an import path.

    Example::

        >>> raise BackendNotFound("inductr", ["eager", "inductor"])
        Traceback (most recent call last):
        ...
        ember.minifier.errors.BackendNotFound: backend 'inductr' not found: ...
    """

    def __init__(self, name: str, available: list[str]) -> None:
        self.name = name
        self.available = available
        avail = ", ".join(sorted(available)) or "none installed"
        super().__init__(
            f"backend {name!r} not found: it is not an 'ember.backends' entry point "
            f"(available: {avail}) and not an importable 'module:attribute' path. "
            "Install the package that provides it, or pass the backend callable itself."
        )


class ReproFormatError(MinifierError):
    """A repro or dump directory is missing a file or holds a malformed one.

    Example::

        >>> raise ReproFormatError("/tmp/r", "failure.json", "file is missing")
        Traceback (most recent call last):
        ...
        ember.minifier.errors.ReproFormatError: bad repro directory /tmp/r: failure.json: ...
    """

    def __init__(self, directory: str, field: str, why: str) -> None:
        self.directory = directory
        self.field = field
        super().__init__(
            f"bad repro directory {directory}: {field}: {why}. "
            "It should be a directory written by ember.minifier (graph/, inputs.safetensors, "
            "inputs.json, failure.json); write it again with `python -m ember.minifier minify`."
        )


class GraphEditError(MinifierError):
    """A graph cannot be edited the way a strategy needs (internal: the strategy is skipped).

    Example::

        >>> raise GraphEditError("getitem_3", "its value is a list, not a tensor")
        Traceback (most recent call last):
        ...
        ember.minifier.errors.GraphEditError: cannot turn node getitem_3 into an input: ...
    """

    def __init__(self, node: str, why: str) -> None:
        self.node = node
        super().__init__(f"cannot turn node {node} into an input: {why}")


class InputMismatch(MinifierError):
    """The example inputs do not match the graph's placeholders.

    Example::

        >>> raise InputMismatch(3, 2)
        Traceback (most recent call last):
        ...
        ember.minifier.errors.InputMismatch: the graph has 3 placeholders but 2 inputs were given; ...
    """

    def __init__(self, placeholders: int, inputs: int) -> None:
        super().__init__(
            f"the graph has {placeholders} placeholders but {inputs} inputs were given; "
            "pass one example value per placeholder, in placeholder order."
        )


class InaccurateBackend(MinifierError):
    """At ``EMBER_REPRO_LEVEL=4`` a compiled graph's outputs differ from eager beyond tolerance.

    Example::

        >>> raise InaccurateBackend("ember_repro/dynamo_graph_0", "output 0: ...", "dumped ...")
        Traceback (most recent call last):
        ...
        ember.minifier.errors.InaccurateBackend: the backend's result for graph \
ember_repro/dynamo_graph_0 is inaccurate: output 0: ...; dumped ...
    """

    def __init__(self, where: str, detail: str, written: str) -> None:
        self.where = where
        self.detail = detail
        super().__init__(
            f"the backend's result for graph {where} is inaccurate: {detail}; {written}. "
            "Run the repro to debug it, or lower EMBER_REPRO_LEVEL below 4 to skip accuracy checks."
        )
