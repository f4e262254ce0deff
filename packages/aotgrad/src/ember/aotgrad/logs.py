"""The ``aot_graphs`` log area: joint, forward and backward graphs.

Logger ``ember.aot_graphs``, one of the areas of ``ember.ir.logs`` (so
``EMBER_LOGS=aot_graphs`` and ``ember.dynamo.set_logs(aot_graphs=True)`` both
reach it); ``ember.aotgrad`` is the package's general logger. ``EMBER_LOGS``
is parsed once per process (:func:`configure_from_env`).
"""

from __future__ import annotations

import logging

import torch.fx as fx

from ember.ir.logs import configure_from_env, get_logger

LOG = get_logger("aot_graphs")

__all__ = ["LOG", "configure_from_env", "log_graph"]


def log_graph(title: str, gm: fx.GraphModule) -> None:
    """Print ``gm`` as readable Python under ``title`` when the area is on."""
    if LOG.isEnabledFor(logging.INFO):
        LOG.info("===== %s =====\n%s", title, gm.print_readable(print_output=False))
