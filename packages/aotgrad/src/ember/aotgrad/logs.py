"""The ``aot_graphs`` log area: joint, forward and backward graphs.

Logger ``ember.aot_graphs`` (the same name ember.dynamo's ``EMBER_LOGS`` uses,
so either package can switch it on). ``EMBER_LOGS`` is parsed once, by the
first public entry point that runs (:func:`configure_from_env`). The stderr
handler is shared with ember.dynamo by name, so enabling the area from both
packages prints each line once.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

import torch.fx as fx

LOG = logging.getLogger("ember.aot_graphs")
_HANDLER_NAME = "ember.logs.stderr"
_configured = False


def _ensure_handler() -> None:
    root = logging.getLogger("ember")
    if any(h.get_name() == _HANDLER_NAME for h in root.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(logging.Formatter("[ember %(name)s] %(message)s"))
    root.addHandler(handler)


def configure_from_env(environ: Mapping[str, str] | None = None) -> None:
    """Enable ``aot_graphs`` if ``EMBER_LOGS`` names it (``aot_graphs``, ``+aot_graphs``, ``all``)."""
    global _configured
    if _configured and environ is None:
        return
    _configured = True
    env = os.environ if environ is None else environ
    items = [item.strip() for item in env.get("EMBER_LOGS", "").split(",")]
    for item in items:
        name = item.lstrip("+-")
        if name not in ("aot_graphs", "all"):
            continue
        if item.startswith("-"):
            LOG.setLevel(logging.WARNING)
            continue
        LOG.setLevel(logging.DEBUG if item.startswith("+") else logging.INFO)
        _ensure_handler()


def log_graph(title: str, gm: fx.GraphModule) -> None:
    """Print ``gm`` as readable Python under ``title`` when the area is on."""
    if LOG.isEnabledFor(logging.INFO):
        LOG.info("===== %s =====\n%s", title, gm.print_readable(print_output=False))
