"""Which ``Backend`` generates code for which device type.

``BACKENDS`` is the table: device type -> backend constructor (C++ for ``cpu``,
Triton for ``cuda``). ``InductorOptions.cpu_backend="triton"`` gives CPU tensors
to the Triton backend instead (run by Triton's interpreter: how that backend is
tested without a GPU). A graph whose device has no usable backend runs eagerly
(ATen), with the reason logged.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import torch

from ..errors import InductorError
from ..options import InductorOptions
from .backend import Backend
from .cpp import CppBackend

BackendFactory = Callable[[InductorOptions, torch.device], Backend]


def _cpp(options: InductorOptions, device: torch.device) -> Backend:
    return CppBackend(options)


def _triton(options: InductorOptions, device: torch.device) -> Backend:
    from .triton import TritonBackend

    return TritonBackend(options, device)


#: device type -> the backend generating its kernels, in the order they were added.
BACKENDS: dict[str, BackendFactory] = {"cpu": _cpp, "cuda": _triton}
#: the backends ``InductorOptions.cpu_backend`` names
CPU_BACKENDS: dict[str, BackendFactory] = {"cpp": _cpp, "triton": _triton}


def backend_for(device: torch.device, options: InductorOptions) -> Backend | str:
    """The backend compiling graphs on ``device`` with these options, or why there is none."""
    if device.type == "cpu":
        name = options.cpu_backend
        factory = CPU_BACKENDS[name]
    else:
        name = "triton" if device.type == "cuda" else device.type
        found = BACKENDS.get(device.type)
        if found is None:
            return f"ember.inductor has no code generator for {device.type} tensors"
        factory = found
    if name == "triton" and importlib.util.find_spec("triton") is None:
        reason = f"the Triton backend ({device.type} tensors) needs the triton package (ember-inductor[triton])"
        if device.type == "cpu":  # asked for by name: an error, not a quiet fallback
            raise InductorError(f"InductorOptions(cpu_backend='triton'): {reason}")
        return reason
    if name == "triton" and device.type == "cpu":
        _check_interpreter()
    return factory(options, device)


def _check_interpreter() -> None:
    """Triton's interpreter runs only if ``TRITON_INTERPRET=1`` was set when triton was imported
    (its standard library, ``tl.sum`` and friends, is built for one mode at import)."""
    import triton.language.standard as std
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(std.sum, InterpretedFunction):
        raise InductorError(
            "InductorOptions(cpu_backend='triton') runs Triton kernels on CPU tensors in Triton's "
            "interpreter, which needs TRITON_INTERPRET=1 in the environment before triton is first "
            "imported (set it at the top of the program, or in the shell)"
        )
