"""Loggers of ember.inductor: areas of ``ember.ir.logs`` (``EMBER_LOGS=output_code,perf_hints``).

``ember.output_code`` (each compiled graph's wrapper and kernels),
``ember.perf_hints`` (extern calls, fusion decisions, graphs run eagerly) and
``ember.inductor`` (everything else): the same names whichever package turns
them on, so ``ember.dynamo.set_logs(output_code=True)`` reaches them.
"""

from __future__ import annotations

from ember.ir.logs import configure_from_env, get_logger

perf_hints = get_logger("perf_hints")
output_code = get_logger("output_code")
log = get_logger("inductor")

__all__ = ["configure_from_env", "log", "output_code", "perf_hints"]
