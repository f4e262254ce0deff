"""Which ``Backend`` generates code for which device type.

``BACKENDS`` is the table: device type -> backend constructor. A graph whose
tensors live on a device type without an entry runs eagerly (ATen), with the
reason logged.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..options import InductorOptions
from .backend import Backend
from .cpp import CppBackend

BackendFactory = Callable[[InductorOptions, torch.device], Backend]


def _cpp(options: InductorOptions, device: torch.device) -> Backend:
    return CppBackend(options)


#: device type -> the backend generating its kernels, in the order they were added.
BACKENDS: dict[str, BackendFactory] = {"cpu": _cpp}


def backend_for(device: torch.device, options: InductorOptions) -> Backend | None:
    """The backend compiling graphs on ``device`` with these options, or None (none exists)."""
    factory = BACKENDS.get(device.type)
    return None if factory is None else factory(options, device)
