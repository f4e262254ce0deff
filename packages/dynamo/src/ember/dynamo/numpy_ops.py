"""NumPy at run time: what graphs that hold NumPy code call (ADR 0037).

The graph-side half of ``variables.ndarray``: converting a frame's arrays to
graph inputs and graph outputs back to arrays, the graph targets that run a
``torch._numpy`` callable on tensors (:func:`numpy_op`), the table of NumPy
callables that have a ``torch._numpy`` counterpart, and the dtypes torch has.
Nothing here knows about trackers, so the runtime pieces stay importable
from the graph-call code (``output_graph``) and the public API (``wrap_numpy``).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch._numpy
from torch.utils import _pytree as pytree

#: torch's NumPy on tensors (untyped: read as Any)
tnp: Any = torch._numpy

# -- run time: conversions at the graph's edges -------------------------------------------


def ndarray_needs_copy(array: np.ndarray) -> bool:
    """torch has no negative strides and no read-only tensors: such arrays are copied."""
    return any(s < 0 for s in array.strides) or not array.flags.writeable


def ndarray_to_tensor(array: np.ndarray) -> torch.Tensor:
    """A frame's ``np.ndarray`` as the graph's input tensor (shares memory where torch can)."""
    if ndarray_needs_copy(array):
        array = array.copy()
    return torch.from_numpy(array)


def ndarrays_to_graph_inputs(*arrays: np.ndarray) -> tuple[torch.Tensor, ...]:
    """A graph call's NumPy inputs as tensors; an array given twice is one tensor."""
    seen: dict[int, torch.Tensor] = {}
    out = []
    for a in arrays:
        t = seen.get(id(a))
        if t is None:
            t = seen[id(a)] = ndarray_to_tensor(a)
        out.append(t)
    return tuple(out)


def tensor_to_ndarray(tensor: torch.Tensor) -> np.ndarray:
    """A graph's output tensor as the ``np.ndarray`` the NumPy code made."""
    return tensor.detach().cpu().numpy()


def tensors_to_ndarrays(tree: Any) -> Any:
    """``wrap_numpy``'s entry, run eagerly: every tensor in ``tree`` as an ``np.ndarray``."""
    return pytree.tree_map_only(torch.Tensor, lambda t: t.numpy(), tree)


def ndarrays_to_tensors(tree: Any) -> Any:
    """``wrap_numpy``'s exit, run eagerly: every ``np.ndarray`` in ``tree`` as a tensor."""
    return pytree.tree_map_only(np.ndarray, torch.as_tensor, tree)


if tnp._dtypes_impl._default_dtypes is None:
    # NumPy's defaults (float64, complex128, int64), set here rather than read from
    # TorchDynamo's config, which torch._numpy would import to find them
    tnp._dtypes.set_default_dtype(fp_dtype="numpy", int_dtype="numpy")


def _is_integral(x: Any) -> bool:
    if isinstance(x, tnp.ndarray):
        return not (x.dtype.torch_dtype.is_floating_point or x.dtype.torch_dtype.is_complex)
    return isinstance(x, (bool, int))


def true_divide(x1: Any, x2: Any, *args: Any, **kwargs: Any) -> Any:
    """``/`` on arrays: NumPy gives float64 for integers and bools; ``torch._numpy``
    would give torch's default float (float32)."""
    if _is_integral(x1) and _is_integral(x2) and "dtype" not in kwargs:
        float_dtype = tnp._dtypes_impl.default_dtypes().float_dtype
        if isinstance(x1, tnp.ndarray):
            x1 = x1.astype(float_dtype)
        else:
            x2 = x2.astype(float_dtype)
    return tnp.true_divide(x1, x2, *args, **kwargs)


#: ``torch._numpy`` callables replaced where their result differs from NumPy's
_FIXES: dict[Any, Callable[..., Any]] = {
    operator.truediv: true_divide,
    tnp.true_divide: true_divide,
    tnp.divide: true_divide,
}


def _as_tnp(value: Any) -> Any:
    return pytree.tree_map_only(torch.Tensor, tnp.ndarray, value)


def _as_tensors(value: Any) -> Any:
    return pytree.tree_map_only(tnp.ndarray, lambda a: a.tensor, value)


@functools.cache
def numpy_op(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The graph target running ``fn`` (a ``torch._numpy`` callable) on tensors
    viewed as NumPy arrays. One wrapper per ``fn``, so equal graphs have equal targets."""

    impl = _FIXES.get(fn, fn)

    def run(*args: Any, **kwargs: Any) -> Any:
        return _as_tensors(impl(*_as_tnp(args), **_as_tnp(kwargs)))

    name = getattr(fn, "__name__", type(fn).__name__).strip("_") or "op"
    run.__name__ = run.__qualname__ = f"numpy_{name}"
    run.__module__ = __name__
    return run


@functools.cache
def numpy_method(name: str) -> Callable[..., Any]:
    """``ndarray.<name>(...)`` as a graph target."""

    def call(array: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(array, name)(*args, **kwargs)

    call.__name__ = f"ndarray_{name.strip('_')}"
    return numpy_op(call)


@functools.cache
def numpy_attr(name: str) -> Callable[..., Any]:
    """``ndarray.<name>`` (a property: ``T``, ``real``) as a graph target."""

    def read(array: Any) -> Any:
        return getattr(array, name)

    read.__name__ = f"ndarray_attr_{name}"
    return numpy_op(read)


@functools.cache
def method_reference(name: str) -> Callable[..., Any]:
    def call(array: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(array, name)(*args, **kwargs)

    call.__name__ = f"ndarray.{name}"
    return call


@functools.cache
def attr_reference(name: str) -> Callable[..., Any]:
    def read(array: Any) -> Any:
        return getattr(array, name)

    read.__name__ = f"ndarray.{name}"
    return read


# -- which NumPy callables have a torch._numpy counterpart ---------------------------------

#: NumPy namespaces traced, with their ``torch._numpy`` counterparts (``np.random`` is not:
#: TorchDynamo leaves it to NumPy by default too, so the random stream stays NumPy's)
_NAMESPACES: tuple[tuple[Any, Any], ...] = ((np, tnp), (np.linalg, tnp.linalg), (np.fft, tnp.fft))


@functools.cache
def _counterparts() -> dict[int, tuple[Any, Any]]:
    """id(NumPy callable) -> (the callable, its ``torch._numpy`` counterpart)."""
    table: dict[int, tuple[Any, Any]] = {}
    for real_ns, torch_ns in _NAMESPACES:
        for name in dir(real_ns):
            if name.startswith("_"):
                continue
            real = getattr(real_ns, name, None)
            mirror = getattr(torch_ns, name, None)
            if real is None or mirror is None or not callable(real) or not callable(mirror):
                continue
            if isinstance(real, type) and not issubclass(real, np.generic):
                continue  # np.ndarray, np.dtype, ...: classes stay classes
            table.setdefault(id(real), (real, mirror))
    return table


def numpy_counterpart(value: Any) -> Any | None:
    """The ``torch._numpy`` callable standing for NumPy's ``value``, or None."""
    try:
        hit = _counterparts().get(id(value))
    except TypeError:
        return None
    return hit[1] if hit is not None and hit[0] is value else None


#: the NumPy dtypes torch has (native byte order only)
TRACEABLE_DTYPES = frozenset(
    np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                          np.uint32, np.uint64, np.float16, np.float32, np.float64, np.complex64,
                          np.complex128)
)


def traceable_dtype(dtype: np.dtype) -> bool:
    """Whether an array of ``dtype`` can be a graph tensor."""
    return dtype in TRACEABLE_DTYPES and dtype.isnative


def dtype_argument(value: Any) -> Any:
    """NumPy dtypes (``np.float32``, ``np.dtype("f4")``) as the names ``torch._numpy``
    reads: graph code can spell a string, not a NumPy class."""
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return np.dtype(value).name
    if value in (bool, int, float, complex):  # `a.astype(int)`: NumPy's default for the type
        return np.dtype(value).name
    return value


#: the most elements an array computed from constants may have to become a graph constant
FOLD_LIMIT = 1 << 16
