"""Log areas: one naming scheme for every ember package.

Every ember logger is ``ember.<area>``, and :data:`AREAS` is the closed list
of areas, whichever package writes to them: the stage-crossing ones
(``graph_breaks``, ``recompiles``, ``guards``, ``bytecode``, ``graph_code``,
``graph``, ``aot_graphs``, ``output_code``, ``perf_hints``) and one per package
for everything else (``dynamo``, ``aotgrad``, ``inductor``, ``minifier``,
``ir``). ember.ir holds the list because every package depends on ember.ir
and on nothing else in common, so ``ember.dynamo.set_logs(output_code=True)``
reaches ember.inductor's logger without either package importing the other.

Areas are off (``WARNING``) until enabled by ``EMBER_LOGS`` or
:func:`set_logs`::

    EMBER_LOGS="graph_breaks,recompiles,+guards"   # +area: DEBUG, -area: off, all
    ember.dynamo.set_logs(graph_breaks=True, guards="debug")

Enabled areas print to stderr through one handler on the ``ember`` logger;
users may add their own handlers to any ``ember.<area>`` logger as usual.
``EMBER_LOGS`` is parsed once per process, by the first public entry point
of any package that runs (:func:`configure_from_env`).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Mapping

#: area -> what it logs (the package that writes it first).
AREAS: dict[str, str] = {
    "graph_breaks": "dynamo: each graph break with the user's line and the reason",
    "recompiles": "dynamo: why a cached entry was rejected",
    "guards": "dynamo: the guards of each capture (+guards: the generated check function)",
    "frame_cache": "dynamo: frames stored on disk, loaded from it, or kept in this process (and why)",
    "bytecode": "dynamo: original and transformed bytecode side by side",
    "graph_code": "dynamo: each captured graph's Python code",
    "graph": "dynamo: each captured graph as a node table",
    "aot_graphs": "aotgrad: joint, forward and backward graphs",
    "output_code": "inductor: each compiled graph's wrapper and kernels",
    "perf_hints": "inductor: extern calls, fusion decisions, graphs run eagerly",
    "dynamo": "ember.dynamo in general (+dynamo: every traced instruction)",
    "aotgrad": "ember.aotgrad in general (fallbacks, cache use)",
    "inductor": "ember.inductor in general (fallbacks, cache use)",
    "minifier": "ember.minifier's progress",
    "ir": "ember.ir in general",
}

ROOT = "ember"
HANDLER_NAME = "ember.logs.stderr"


class LogSettingsError(ValueError):
    """An ``EMBER_LOGS`` entry or ``set_logs`` argument naming no area.

    Example::

        EMBER_LOGS names unknown log area 'recompile'; known areas: aot_graphs,
        aotgrad, bytecode, dynamo, graph, graph_breaks, ...
    """


def _unknown(area: str, where: str) -> str:
    return f"{where} names unknown log area {area!r}; known areas: {', '.join(sorted(AREAS))}"


def get_logger(area: str) -> logging.Logger:
    """The logger for ``area`` (``ember.<area>``); an unknown area raises."""
    if area not in AREAS:
        raise LogSettingsError(_unknown(area, "get_logger"))
    return logging.getLogger(f"{ROOT}.{area}")


def enabled(area: str, level: int = logging.INFO) -> bool:
    """Whether ``area`` logs at ``level`` (cheap; check before building a costly message)."""
    return logging.getLogger(f"{ROOT}.{area}").isEnabledFor(level)


#: how much of an exception's message a handled-failure warning keeps
REASON_LIMIT = 300


def reason(exc: BaseException, limit: int = REASON_LIMIT) -> str:
    """``Type: first line of the message`` (cut at ``limit`` characters): the reason of an
    internal failure that ember handles (runs eagerly), as one log line. A compiler's
    message can be pages long (g++ output); the whole of it and the traceback are in
    the stage's debug log (:func:`traceback_wanted`)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    if len(first) > limit:
        first = first[: limit - 3] + "..."
    more = " (...)" if len(lines) > 1 else ""
    return f"{type(exc).__name__}: {first}{more}" if first else type(exc).__name__


def traceback_wanted(area: str) -> bool:
    """Whether a handled internal failure logged under ``area`` carries its traceback:
    only at DEBUG, for that area (``EMBER_LOGS=+aotgrad``) or for ``dynamo``
    (``EMBER_LOGS=+dynamo``, the switch for every stage). By default the failure is
    one warning line (:func:`reason`)."""
    return enabled(area, logging.DEBUG) or enabled("dynamo", logging.DEBUG)


def parse_log_spec(spec: str) -> dict[str, int]:
    """``"graph_breaks,+guards"`` -> ``{"graph_breaks": INFO, "guards": DEBUG}``.

    ``all`` / ``+all`` name every area; ``-area`` turns one off.
    """
    levels: dict[str, int] = {}
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        level = logging.INFO
        if item.startswith("+"):
            level = logging.DEBUG
            item = item[1:]
        elif item.startswith("-"):
            level = logging.WARNING
            item = item[1:]
        names = tuple(AREAS) if item == "all" else (item,)
        for name in names:
            if name not in AREAS:
                raise LogSettingsError(_unknown(name, "EMBER_LOGS"))
            levels[name] = level
    return levels


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of the record (test capture, redirects)."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def _ensure_handler() -> None:
    root = logging.getLogger(ROOT)
    if any(h.get_name() == HANDLER_NAME for h in root.handlers):
        return
    handler = _StderrHandler()
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    root.addHandler(handler)


def apply(levels: Mapping[str, int]) -> None:
    """Set each area's level; the first enabled area installs the stderr handler."""
    if any(level < logging.WARNING for level in levels.values()):
        _ensure_handler()
    for area, level in levels.items():
        logging.getLogger(f"{ROOT}.{area}").setLevel(level)


def set_logs(**areas: bool | str) -> None:
    """Enable (``True`` / ``"info"``), debug (``"debug"``) or disable (``False``) areas.

    ``set_logs(graph_breaks=True, output_code=True, guards="debug")``; areas not
    named keep their level. ``set_logs(all=True)`` enables every area.
    """
    levels: dict[str, int] = {}
    for name, value in areas.items():
        if value is True or value == "info":
            level = logging.INFO
        elif value == "debug":
            level = logging.DEBUG
        elif value is False:
            level = logging.WARNING
        else:
            raise LogSettingsError(
                f"set_logs({name}={value!r}): use True, False, 'info' or 'debug'"
            )
        targets = tuple(AREAS) if name == "all" else (name,)
        for area in targets:
            if area not in AREAS:
                raise LogSettingsError(_unknown(area, "set_logs"))
            levels[area] = level
    apply(levels)


@functools.cache
def _configure_from_process_env() -> None:
    spec = os.environ.get("EMBER_LOGS", "")
    if spec:
        apply(parse_log_spec(spec))


def configure_from_env(environ: Mapping[str, str] | None = None) -> None:
    """Apply ``EMBER_LOGS``: from the process environment once per process
    (every package's public entry points call this), or from ``environ`` now."""
    if environ is None:
        _configure_from_process_env()
        return
    spec = environ.get("EMBER_LOGS", "")
    if spec:
        apply(parse_log_spec(spec))
