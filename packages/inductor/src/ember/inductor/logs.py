"""Loggers of ember.inductor (enabled with ``EMBER_LOGS=output_code,perf_hints``)."""

from __future__ import annotations

import logging
import os

perf_hints = logging.getLogger("ember.inductor.perf_hints")
output_code = logging.getLogger("ember.inductor.output_code")
log = logging.getLogger("ember.inductor")


def configure_from_env() -> None:
    """Turn on the loggers named in ``EMBER_LOGS`` (called once at the public entry points)."""
    names = {s.strip() for s in os.environ.get("EMBER_LOGS", "").split(",") if s.strip()}
    for name, logger in (("perf_hints", perf_hints), ("output_code", output_code)):
        if name in names and logger.level == logging.NOTSET:
            logger.setLevel(logging.DEBUG if name == "perf_hints" else logging.INFO)
            if not logger.handlers and not logging.getLogger().handlers:
                handler = logging.StreamHandler()
                handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
                logger.addHandler(handler)
