"""NumPy arrays and NumPy calls, traced into the graph as torch ops.

A NumPy array inside a compiled frame is a tensor in the graph with NumPy's
semantics on top. Every NumPy call or operator on such an array becomes one
graph node whose target is a small wrapper (:func:`numpy_op`): when the graph
runs (or is traced to ATen, or runs on fake tensors while capturing) the
wrapper views its tensor arguments as ``torch._numpy`` arrays, calls the
``torch._numpy`` counterpart of the NumPy function, and hands back the
tensors of the results. ``torch._numpy`` implements NumPy 2 (NEP 50
promotion, 0-D arrays for NumPy scalars, copies for negative strides) in
torch ops, so the backend sees plain torch ops and fuses them like any other.

Where arrays come from: a frame's ``np.ndarray`` argument (a graph input
read through :func:`ndarray_to_tensor`, guarded on its type, dtype, shape
and strides), ``Tensor.numpy()``, NumPy calls. Where they go: back to a real
``np.ndarray`` (:func:`tensor_to_ndarray`) when the frame returns one or a
graph break needs one, or to a tensor through ``torch.from_numpy`` /
``torch.as_tensor``. ``wrap_numpy``'s two conversion helpers
(:func:`tensors_to_ndarrays`, :func:`ndarrays_to_tensors`) are traced as
re-labelling only: no data moves.

``config.trace_numpy = False`` turns all of it off (NumPy code is a graph
break and runs with NumPy). ``np.random`` is never traced: its stream stays
NumPy's.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ember.ir import Source

from ..errors import Unsupported
from ..numpy_ops import (
    FOLD_LIMIT,
    attr_reference,
    dtype_argument,
    method_reference,
    ndarray_to_tensor,
    ndarrays_to_tensors,
    numpy_attr,
    numpy_method,
    numpy_op,
    tensor_to_ndarray,
    tensors_to_ndarrays,
    tnp,
    traceable_dtype,
)
from .base import VariableTracker
from .constant import ConstantVariable, OpaqueConstantVariable
from .dicts import DictVariable
from .lists import BaseListVariable, ListVariable, NamedTupleVariable, TupleVariable
from .tensor import SPECIAL_METHODS, TensorVariable

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx

# -- trackers ---------------------------------------------------------------------------


class NumpyNdarrayVariable(VariableTracker):
    """An ``np.ndarray`` during capture: a graph tensor with NumPy's semantics.

    ``source`` is set for a frame's own array: returning it unchanged gives the same object."""

    def __init__(self, tensor: TensorVariable, source: Source | None = None) -> None:
        super().__init__(source)
        self.tensor = tensor

    def python_type(self) -> type:
        return np.ndarray

    def describe(self) -> str:
        return f"NumPy array `{self.tensor.node.name}` {tuple(self.tensor.example.shape)}"

    def __repr__(self) -> str:
        return f"Ndarray({self.tensor.node.name})"

    def truth(self, tx: Tx) -> bool:
        raise Unsupported(
            "data-dependent control flow: the truth value of a NumPy array "
            f"(`{self.tensor.node.name}`) is only known when the graph runs"
        )

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        example = self.tensor.example
        if name == "shape":
            return ConstantVariable(tuple(_static(tx, s) for s in example.shape))
        if name in ("ndim",):
            return ConstantVariable(example.dim())
        if name == "size":
            return ConstantVariable(_static(tx, example.numel()))
        if name == "itemsize":
            return ConstantVariable(example.element_size())
        if name == "nbytes":
            return ConstantVariable(_static(tx, example.numel()) * example.element_size())
        if name == "dtype":
            return OpaqueConstantVariable(np.dtype(str(example.dtype).removeprefix("torch.")))
        if name in ("T", "mT", "real", "imag"):
            return numpy_call(tx, numpy_attr(name), [self], {}, attr_reference(name))
        if name == "__class__":
            return tx.wrap(np.ndarray, None)
        if callable(getattr(tnp.ndarray, name, None)):
            return NumpyMethodVariable(self, name)
        raise Unsupported(f"NumPy array attribute `{name}` cannot be traced")

    def call_method(
        self, tx: Tx, name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        if name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__"):
            raise Unsupported(
                f"`ndarray.{name}()` needs the array's data, which is only known when the graph runs"
            )
        if name == "__setitem__":
            numpy_call(tx, numpy_op(operator.setitem), [self, *args], kwargs)
            return ConstantVariable(None)
        if name == "__getitem__":
            return numpy_call(tx, numpy_op(operator.getitem), [self, *args], kwargs)
        if name == "__len__":
            if self.tensor.example.dim() == 0:
                raise Unsupported("len() of a 0-d NumPy array (TypeError)")
            return ConstantVariable(_static(tx, self.tensor.example.shape[0]))
        if not callable(getattr(tnp.ndarray, name, None)):
            raise Unsupported(f"NumPy array method `{name}` has no torch._numpy counterpart")
        if "out" in kwargs:
            raise Unsupported(f"`out=` of `ndarray.{name}` is not traced")
        return numpy_call(tx, numpy_method(name), [self, *args], kwargs, method_reference(name))

    def unpack(self, tx: Tx) -> list[VariableTracker]:
        if self.tensor.example.dim() == 0:
            raise Unsupported("iteration over a 0-d NumPy array (TypeError)")
        n = _static(tx, self.tensor.example.shape[0])
        getitem = numpy_op(operator.getitem)
        return [numpy_call(tx, getitem, [self, ConstantVariable(i)], {}) for i in range(n)]

    def reconstruct(self, cg: PyCodegen) -> None:
        if self.source is not None:
            cg.load_source(self.source)
            return

        def build() -> None:
            cg.load_callable_const(tensor_to_ndarray)
            cg.load_tensor(self.tensor)
            cg.call(1)

        cg.reconstruct_once(self, build)


def _static(tx: Tx, value: Any) -> int:
    if not isinstance(value, int):
        raise Unsupported("a symbolic size of a NumPy array (NumPy arrays are captured with static shapes)")
    return value


class NumpyMethodVariable(VariableTracker):
    """``a.sum`` before it is called."""

    def __init__(self, array: NumpyNdarrayVariable, name: str) -> None:
        super().__init__(None)
        self.array = array
        self.name = name

    def describe(self) -> str:
        return f"method `ndarray.{self.name}`"

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        return self.array.call_method(tx, self.name, args, kwargs)


class NumpyFunctionVariable(VariableTracker):
    """A NumPy function (``np.sum``, ``np.linalg.norm``, a ufunc, a scalar type
    like ``np.float32``) with a ``torch._numpy`` counterpart."""

    def __init__(self, value: Any, mirror: Any, source: Source | None = None) -> None:
        super().__init__(source)
        self.value = value
        self.mirror = mirror

    def python_type(self) -> type:
        return type(self.value)

    def describe(self) -> str:
        return f"NumPy function `{getattr(self.value, '__name__', self.value)}`"

    def as_python_constant(self) -> Any:
        if isinstance(self.value, type):  # np.float32 as a dtype argument
            return self.value
        return super().as_python_constant()

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        if name in ("__name__", "__qualname__", "__module__"):
            return ConstantVariable(getattr(self.value, name))
        raise Unsupported(f"attribute `{name}` of {self.describe()} (ufunc methods are not traced)")

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        if "out" in kwargs:
            raise Unsupported(f"`out=` of {self.describe()} is not traced")
        folded = self._fold(tx, args, kwargs)
        if folded is not None:
            return folded
        return numpy_call(tx, numpy_op(self.mirror), args, kwargs, self.value)

    def _fold(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker | None:
        """A call on constants is computed now, with NumPy: a scalar result as Python's
        scalar (``int(np.prod(x.shape))`` stays a constant), a small array
        (``np.full((4, 5), 7)``, ``np.eye(3)``) as a constant of the graph."""
        if isinstance(self.value, type) or not all(
            v.is_python_constant() for v in [*args, *kwargs.values()]
        ):
            return None  # np.float32(3): a 0-D array in the graph (the seed's first deviation)
        try:
            value = self.value(
                *[a.as_python_constant() for a in args],
                **{k: v.as_python_constant() for k, v in kwargs.items()},
            )
        except Exception:
            return None  # traced instead: the graph says what goes wrong
        if isinstance(value, np.generic) and not isinstance(value, np.ndarray):
            value = value.item()
        if isinstance(value, (bool, int, float, complex)):
            return ConstantVariable(value)
        if type(value) is np.ndarray and traceable_dtype(value.dtype) and value.size <= FOLD_LIMIT:
            constant = tx.output.register_attr_tensor(ndarray_to_tensor(value.copy()), None)
            return NumpyNdarrayVariable(constant)
        return None

    def reconstruct(self, cg: PyCodegen) -> None:
        if self.source is not None:
            cg.load_source(self.source)
            return
        cg.load_const(self.value)


class NumpyConversionVariable(VariableTracker):
    """``wrap_numpy``'s ``tensors_to_ndarrays`` / ``ndarrays_to_tensors``: a change of
    label between tensor and array trackers over the same graph values."""

    def __init__(self, value: Callable[..., Any], source: Source | None = None) -> None:
        super().__init__(source)
        self.value = value

    def describe(self) -> str:
        return f"`{self.value.__name__}`"

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        if len(args) != 1 or kwargs:
            raise Unsupported(f"{self.describe()} takes one argument")
        to_arrays = self.value is tensors_to_ndarrays
        return relabel(tx, args[0], to_arrays)

    def reconstruct(self, cg: PyCodegen) -> None:
        cg.load_const(self.value)


def relabel(tx: Tx, value: VariableTracker, to_arrays: bool) -> VariableTracker:
    """``value`` with every tensor as an array (``to_arrays``) or every array as a tensor."""
    if to_arrays and isinstance(value, TensorVariable):
        return NumpyNdarrayVariable(value)
    if not to_arrays and isinstance(value, NumpyNdarrayVariable):
        return as_tensor(value)
    if isinstance(value, (TupleVariable, ListVariable)) and type(value) in (TupleVariable, ListVariable):
        items = [relabel(tx, v, to_arrays) for v in value.items]
        return TupleVariable(items) if isinstance(value, TupleVariable) else ListVariable(items)
    if isinstance(value, BaseListVariable):
        raise Unsupported(f"{value.describe()} passed to a NumPy conversion")
    if type(value) is DictVariable and value.dict_type is dict:
        realized = {k: value.realize(tx, k) for k in list(value.items)}
        return DictVariable({k: relabel(tx, v, to_arrays) for k, v in realized.items()})
    return value


def as_tensor(array: NumpyNdarrayVariable) -> TensorVariable:
    """The array's graph tensor, as a tensor tracker (``torch.from_numpy``: no copy)."""
    t = array.tensor
    if t.source is None:
        return t
    # a frame's own tensor (``X.numpy()`` of an argument): the same graph value
    return TensorVariable(t.node, t.example, t.source, t.cls)


def numpy_call(
    tx: Tx,
    target: Callable[..., Any],
    args: list[VariableTracker],
    kwargs: dict[str, VariableTracker],
    reference: Callable[..., Any] | None = None,
) -> VariableTracker:
    """One graph node running ``target`` (from :func:`numpy_op`); its tensors as arrays.

    ``reference``, NumPy's own callable, is run on small arrays of the arguments' dtypes
    (:func:`check_dtypes`): where ``torch._numpy`` would give another dtype, this call is
    a graph break and NumPy runs it."""
    node_args = [_argument(tx, a) for a in args]
    node_kwargs = {k: _argument(tx, v) for k, v in kwargs.items()}
    result = tx.output.create_op("call_function", target, node_args, node_kwargs)
    tx.output.check_copied_arrays()
    if reference is not None:
        check_dtypes(reference, args, kwargs, result)
    return _arrays(result)


class _NoSample(Exception):
    """An argument with no small NumPy stand-in."""


def _sample(value: VariableTracker) -> Any:
    """A small real stand-in for an argument: arrays of the same dtype and rank, each
    dimension 0, 1 or 2 (so broadcasting between them is as it was)."""
    tensor = value.tensor if isinstance(value, NumpyNdarrayVariable) else value
    if isinstance(tensor, TensorVariable):
        example = tensor.example
        try:
            dtype = np.dtype(str(example.dtype).removeprefix("torch."))
        except TypeError as e:  # bfloat16, ...: NumPy has no such dtype
            raise _NoSample from e
        shape = tuple(min(int(d), 2) for d in example.shape)
        return np.ones(shape, dtype=dtype)
    if isinstance(value, (TupleVariable, ListVariable)) and type(value) in (TupleVariable, ListVariable):
        items = [_sample(v) for v in value.items]
        return tuple(items) if isinstance(value, TupleVariable) else items
    if value.is_python_constant():
        return value.as_python_constant()
    raise _NoSample


def _dtypes(value: Any) -> list[Any] | None:
    if isinstance(value, (np.ndarray, np.generic)):
        return [value.dtype]
    if isinstance(value, (tuple, list)):
        found = [_dtypes(v) for v in value]
        if any(f is None or len(f) != 1 for f in found):
            return None
        return [f[0] for f in found if f is not None]
    return None


def _traced_dtypes(result: VariableTracker) -> list[Any] | None:
    if isinstance(result, TensorVariable):
        try:
            return [np.dtype(str(result.example.dtype).removeprefix("torch."))]
        except TypeError:
            return None
    if type(result) in (TupleVariable, ListVariable):
        found = [_traced_dtypes(v) for v in result.items]  # type: ignore[attr-defined]
        if any(f is None or len(f) != 1 for f in found):
            return None
        return [f[0] for f in found if f is not None]
    return None


def check_dtypes(
    reference: Callable[..., Any],
    args: list[VariableTracker],
    kwargs: dict[str, VariableTracker],
    result: VariableTracker,
) -> None:
    """Raise ``Unsupported`` where NumPy gives other dtypes than the traced call
    (``torch._numpy`` differs from NumPy on some: ``np.tanh`` of int8 is float16,
    ``np.prod`` of uint8 is uint64, a NumPy float64 scalar widens a float32 array)."""
    traced = _traced_dtypes(result)
    if traced is None:
        return
    try:
        sample_args = [_sample(a) for a in args]
        sample_kwargs = {k: _sample(v) for k, v in kwargs.items()}
    except _NoSample:
        return
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            expected = reference(*sample_args, **sample_kwargs)
        except OverflowError as e:  # a Python int out of the array dtype's range: NumPy raises
            raise Unsupported(f"NumPy raises OverflowError here ({e})") from e
        except Exception:
            return  # shape-specific arguments: the small stand-ins do not fit them
    want = _dtypes(expected)
    if want is None or len(want) != len(traced):
        return  # a Python value, or a documented change of structure (tril_indices)
    if want != traced:
        name = getattr(reference, "__name__", "this call")
        raise Unsupported(
            f"torch._numpy gives {', '.join(map(str, traced))} where NumPy gives "
            f"{', '.join(map(str, want))} for `{name}`: left to NumPy"
        )


def _argument(tx: Tx, value: VariableTracker) -> VariableTracker:
    if isinstance(value, NumpyNdarrayVariable):
        return value.tensor
    if isinstance(value, (TupleVariable, ListVariable)) and type(value) in (TupleVariable, ListVariable):
        items = [_argument(tx, v) for v in value.items]
        return TupleVariable(items) if isinstance(value, TupleVariable) else ListVariable(items)
    if not isinstance(value, TensorVariable) and value.is_python_constant():
        const = value.as_python_constant()
        if isinstance(const, np.generic):
            # a NumPy scalar read from the frame: a 0-D array of its dtype (NEP 50: it
            # promotes as an array, unlike the Python number ``item()`` would give)
            array = numpy_call(
                tx, numpy_op(tnp.asarray), [ConstantVariable(const.item()), ConstantVariable(const.dtype.name)], {}
            )
            assert isinstance(array, NumpyNdarrayVariable)
            return array.tensor
        converted = dtype_argument(const)
        if converted is not const:
            return ConstantVariable(converted)
    return value


def _arrays(result: VariableTracker) -> VariableTracker:
    if isinstance(result, TensorVariable):
        return NumpyNdarrayVariable(result)
    if type(result) is TupleVariable:
        return TupleVariable([_arrays(v) for v in result.items])
    if type(result) is NamedTupleVariable:  # np.linalg.eigh, ...: a tuple of arrays
        return TupleVariable([_arrays(v) for v in result.items])
    if type(result) is ListVariable:
        return ListVariable([_arrays(v) for v in result.items])
    return result


def tensor_numpy(
    tx: Tx, tensor: TensorVariable, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker:
    """``Tensor.numpy()``: the same graph value, now with NumPy's semantics."""
    if not tx.options.trace_numpy:
        raise Unsupported("`Tensor.numpy()` with `config.trace_numpy = False`")
    force = kwargs.get("force")
    if args or (kwargs and set(kwargs) != {"force"}):
        raise Unsupported("`Tensor.numpy()` with arguments other than `force`")
    if tensor.example.requires_grad and not (force is not None and force.is_python_constant()
                                             and force.as_python_constant()):
        raise Unsupported("`Tensor.numpy()` of a tensor that requires grad (RuntimeError in eager)")
    return NumpyNdarrayVariable(tensor)


SPECIAL_METHODS["numpy"] = tensor_numpy

#: the module's eager helpers ``builder.wrap`` recognises
CONVERSIONS: tuple[Callable[..., Any], ...] = (tensors_to_ndarrays, ndarrays_to_tensors)
