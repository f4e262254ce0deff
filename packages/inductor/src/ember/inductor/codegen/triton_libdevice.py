"""``libdevice`` for Triton's interpreter: the CUDA math functions ember's kernels call, in numpy.

Triton's interpreter runs ``tl.`` math with numpy but refuses ``libdevice``
(an external call into CUDA's libm). Kernels for CPU tensors are loaded with
this module bound to the name ``libdevice``, so the source the interpreter runs
is the source a GPU compiles. Each function takes and returns the interpreter's
``tl.tensor`` (a numpy array inside a ``TensorHandle``).

Version-sensitive: it reaches into the interpreter's ``TensorHandle(data, dtype)``
(the same in triton 3.0 to 3.9).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def _wrap(like: Any, data: np.ndarray) -> Any:
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    handle = like.handle
    return tl.core.tensor(TensorHandle(data.astype(handle.data.dtype), handle.dtype), like.type)


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[Any], Any]:
    def call(x: Any) -> Any:
        with np.errstate(all="ignore"):
            return _wrap(x, fn(x.handle.data))

    return call


def _data(x: Any, like: Any) -> np.ndarray:
    """A block's array, or a Python constant (``libdevice.pow(x, 6.0)``: a compiled kernel
    converts it to a tensor) as an array of ``like``'s element type."""
    handle = getattr(x, "handle", None)
    if handle is not None:
        return np.asarray(handle.data)
    return np.asarray(x, dtype=like.handle.data.dtype)


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[Any, Any], Any]:
    def call(a: Any, b: Any) -> Any:
        blocks = [x for x in (a, b) if getattr(x, "handle", None) is not None]
        like = max(blocks, key=lambda x: len(x.type.shape) if x.type.is_block() else 0)
        with np.errstate(all="ignore"):
            return _wrap(like, fn(_data(a, like), _data(b, like)))

    return call


expm1 = _unary(np.expm1)
log10 = _unary(np.log10)
log1p = _unary(np.log1p)
tan = _unary(np.tan)
asin = _unary(np.arcsin)
acos = _unary(np.arccos)
atan = _unary(np.arctan)
sinh = _unary(np.sinh)
cosh = _unary(np.cosh)
tanh = _unary(np.tanh)
asinh = _unary(np.arcsinh)
acosh = _unary(np.arccosh)
atanh = _unary(np.arctanh)
trunc = _unary(np.trunc)
nearbyint = _unary(np.rint)
atan2 = _binary(np.arctan2)
hypot = _binary(np.hypot)
pow = _binary(np.power)
fmod = _binary(np.fmod)


def _erfc(x: np.ndarray) -> np.ndarray:
    import torch

    out: np.ndarray = torch.special.erfc(torch.from_numpy(np.ascontiguousarray(x))).numpy()
    return out


erfc = _unary(_erfc)
