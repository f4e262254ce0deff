"""Launching a compiled Triton kernel without ``JITFunction.run``'s per-call work.

``kernel[grid](*args)`` makes Triton bind the arguments, compute each one's
specialization (dtype, 16-byte alignment, integer width, value 1), build a cache key
from them and the options, look the binary up, check the globals it read, and
only then launch. For a graph of many small kernels that per-call Python is a large
part of a step on a GPU. A :class:`DirectLaunches` table remembers, per launch
configuration and per *specialization key* computed here, the ``CompiledKernel``
that Triton's own first launch returned, and later launches with the same key call
its launcher directly, with the arguments ``JITFunction.run`` would pass (every
parameter in signature order, constexprs included) on the current stream.

:func:`spec_key` must tell apart any two argument lists Triton would specialize
differently (``test_triton_direct.py`` checks it against Triton's own
``native_specialize_impl``): a kernel is reused only for arguments its binary was
compiled for. Arguments it does not know (anything but tensors, ints, bools,
floats) give no key: Triton's path runs. So do launches while Triton's launch hooks
are set (a profiler), and every launch after a direct one raised.

Off by default until a GPU run has checked it (``EMBER_TRITON_DIRECT_LAUNCH=1``
turns it on; ADR 0040).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from ..logs import log

_INT32 = (-(2**31), 2**31)


def enabled() -> bool:
    """Whether launches may skip ``JITFunction.run`` (``EMBER_TRITON_DIRECT_LAUNCH=1``)."""
    return os.environ.get("EMBER_TRITON_DIRECT_LAUNCH", "0") not in ("", "0")


def _arg_key(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.data_ptr() % 16 == 0)
    if type(a) is bool:
        return "u1"
    if type(a) is int:
        if a == 1:
            return 1
        if not -(2**63) <= a < 2**64:
            return None  # Triton refuses it
        width = 32 if _INT32[0] <= a < _INT32[1] else (64 if a < 2**63 else 65)
        return (width, a % 16 == 0)
    if type(a) is float:
        return "fp"
    return None


def spec_key(args: Sequence[Any]) -> tuple[Any, ...] | None:
    """What Triton specializes a kernel on, for these arguments (None: an argument of
    another kind)."""
    key = tuple(_arg_key(a) for a in args)
    return None if None in key else key


def _active(hook: Any) -> bool:
    # Triton 3.4+ keeps hooks in a HookChain (never None: empty when nothing is set)
    return hook is not None and bool(getattr(hook, "calls", True))


def _hooks_set() -> bool:
    from triton import knobs  # cached after the first call

    runtime = knobs.runtime
    return _active(runtime.launch_enter_hook) or _active(runtime.launch_exit_hook)


def supported() -> bool:
    """Whether this Triton launches as this module expects (``triton.knobs``, 3.4 and later)."""
    try:
        from triton import knobs
    except ImportError:
        return False
    return hasattr(knobs, "runtime")


class DirectLaunches:
    """One launcher's compiled kernels by (configuration, :func:`spec_key`)."""

    def __init__(self, name: str, arg_names: Sequence[str]) -> None:
        self.name = name
        self.arg_names = list(arg_names)
        self._kernels: dict[tuple[Any, Any], Any] = {}
        self._tails: dict[Any, tuple[Any, ...]] = {}
        self.broken = False
        #: launches that skipped ``JITFunction.run`` (tests and benchmarks read it)
        self.direct = 0

    def tail(self, config: Any, n_args: int, kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
        """The constexpr parameters after the ``n_args`` positional ones, in signature order."""
        tail = self._tails.get(config)
        if tail is None:
            names = self.arg_names[n_args:]
            if not all(n in kwargs for n in names):
                return None
            tail = self._tails[config] = tuple(kwargs[n] for n in names)
        return tail

    def launch(self, config: Any, key: Any, grid: Sequence[int], args: Sequence[Any],
               tail: Sequence[Any], device_index: int) -> bool:
        """Launch from the table; False where this key has no kernel yet (or hooks are set)."""
        kernel = self._kernels.get((config, key))
        if kernel is None or self.broken or _hooks_set():
            return False
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        stream = torch._C._cuda_getCurrentRawStream(device_index)
        try:
            kernel.run(grid[0], g1, g2, stream, kernel.function, kernel.packed_metadata,
                       None, None, None, *args, *tail)
        except (TypeError, ValueError, AttributeError) as e:  # an argument list it refuses
            self.broken = True
            log.warning("Triton kernel %s: launching it directly failed (%s: %s); launching "
                        "it through Triton from now on", self.name, type(e).__name__, e)
            return False
        self.direct += 1
        return True

    def remember(self, config: Any, key: Any, kernel: Any) -> None:
        """Keep what Triton's launch with these arguments returned."""
        if all(hasattr(kernel, a) for a in ("run", "function", "packed_metadata")):
            self._kernels[(config, key)] = kernel


__all__ = ["DirectLaunches", "enabled", "spec_key", "supported"]
