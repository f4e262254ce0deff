"""TorchDynamo's config names that the seed documents use, mapped onto ember's.

``ember.dynamo.config`` holds :class:`~ember.dynamo.config.DynamoOptions`'
fields; these are the older names users meet in torch.compile's FAQs and the
TorchDynamo README. Each one either does what those documents say, through
ember's own settings, or is accepted with a one-time warning saying why it has
no meaning in ember -- never an ``AttributeError``, never silently (ADR 0016):

========================  =============================================================
``dynamic_shapes``        ``dynamic``: reads True unless it is ``False``; setting True is
                          ``dynamic=True``, False is ``dynamic=False``. The environment's
                          ``TORCHDYNAMO_DYNAMIC_SHAPES``/``EMBER_DYNAMIC_SHAPES`` (1 or 0)
                          set the same at import and ``reset()``
``debug``                 logs each compiled frame's graph, bytecode and guards
``log_level``             a ``logging`` level: which areas log (TorchDynamo's levels)
``suppress_errors``       ``not strict``: a capture that fails inside ember runs eagerly
``replay_record_enabled`` no meaning: ember records no replays (use the minifier)
``capture_func_transforms`` no meaning: ``torch.func`` transforms are always captured
========================  =============================================================

``verbose`` and ``trace_numpy`` are ``DynamoOptions`` fields of their own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .logs import set_logs

#: What ``config.debug = True`` turns on: the README's printout (graph table, original
#: and modified bytecode, guards) for every compiled frame.
DEBUG_AREAS: tuple[str, ...] = ("graph", "bytecode", "guards")


def _log_level_areas(level: int) -> dict[str, bool | str]:
    """TorchDynamo's ``log_level`` as ember log areas.

    ``ERROR``: errors only; ``WARNING``: + graph breaks; ``INFO``: + each compiled
    function's original and modified bytecode, its graph, recompiles and guards;
    ``DEBUG``: + capture's own debug trace and the generated guard checks.
    """
    areas: dict[str, bool | str] = {}
    if level <= logging.WARNING:
        areas["graph_breaks"] = True
    if level <= logging.INFO:
        areas.update(recompiles=True, bytecode=True, graph=True, guards=True)
    if level <= logging.DEBUG:
        areas.update(dynamo="debug", guards="debug")
    return areas


def _apply_debug(value: Any, options: dict[str, Any]) -> None:
    set_logs(**dict.fromkeys(DEBUG_AREAS, bool(value)))


def _apply_log_level(value: Any, options: dict[str, Any]) -> None:
    level = logging.getLevelName(value) if isinstance(value, str) else value
    if not isinstance(level, int):
        raise ValueError(
            f"ember.dynamo.config.log_level must be a logging level (logging.DEBUG, "
            f"logging.INFO, logging.WARNING, logging.ERROR), got {value!r}"
        )
    set_logs(all=False)
    set_logs(**_log_level_areas(level))


def _apply_dynamic_shapes(value: Any, options: dict[str, Any]) -> None:
    options["dynamic"] = bool(value)


@dataclass(frozen=True, slots=True)
class LegacySetting:
    """One older config name: its default, what setting it does, and what it reads back."""

    default: Any
    #: Applies a new value (to ember's option values or its loggers); None: nothing to apply.
    apply: Callable[[Any, dict[str, Any]], None] | None = None
    #: Reads the current value from ember's option values; None: the last value set.
    read: Callable[[dict[str, Any]], Any] | None = None
    #: Said once per process when the name is set to a value other than its default,
    #: for names ember gives no meaning (or none yet).
    warning: str | None = None


LEGACY_SETTINGS: dict[str, LegacySetting] = {
    # Reads True unless dynamic shapes are off (``dynamic=False``): the default, automatic
    # dynamic, is dynamic shapes on, as in torch 2.x. Setting True is the seed documents'
    # "disable size specialization" (``dynamic=True``: symbolic from the first compile).
    "dynamic_shapes": LegacySetting(
        default=True,
        apply=_apply_dynamic_shapes,
        read=lambda options: options["dynamic"] is not False,
    ),
    "debug": LegacySetting(default=False, apply=_apply_debug),
    # TorchDynamo's switch for running a frame eagerly when capture fails: ember's `strict`, inverted
    "suppress_errors": LegacySetting(
        default=True,
        apply=lambda value, options: options.__setitem__("strict", not value),
        read=lambda options: not options["strict"],
    ),
    "log_level": LegacySetting(default=logging.WARNING, apply=_apply_log_level),
    "replay_record_enabled": LegacySetting(
        default=False,
        warning=(
            "ember.dynamo.config.replay_record_enabled has no meaning in ember: ember records "
            "no execution replays. To rerun only the failing part, set EMBER_REPRO_AFTER="
            "dynamo (or aot) and ember.minifier writes a standalone repro.py of the graph "
            "that fails; EMBER_DEBUG_FUNCTION=<name> compiles only functions of that name."
        ),
    ),
    "capture_func_transforms": LegacySetting(
        default=False,
        warning=(
            "ember.dynamo.config.capture_func_transforms changes nothing in ember: "
            "torch.vmap and torch.func.vmap/grad/grad_and_value/jacrev/jacfwd/hessian of a "
            "function of its arguments alone (no closure cells, defaults or non-module "
            "globals) are always captured as one graph node, and "
            "torch.func.functional_call is traced into; other uses are graph breaks that say why."
        ),
    ),
}
