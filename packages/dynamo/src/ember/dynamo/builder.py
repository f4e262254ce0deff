"""``wrap(tx, value, source)``: the one place a real value becomes a tracker.

It picks the tracker class for the value's kind and records, through the
translator's ``GuardCollector``, what the capture now assumes about it.
Values without a source (created while tracing, or results of folding) get
no guards: nothing outside the frame can change them. Trackers reach it as
``tx.wrap(value, source)`` (and ``tx.wrap_constant(value)`` for
:func:`wrap_constant_result`), so no tracker module imports this one.
"""

from __future__ import annotations

import builtins
import collections
import collections.abc
import enum
import functools
import inspect
import math
import operator
import types
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ember.ir import Attr, DictEntry, Item, Source

from . import trace_rules
from .errors import Unsupported
from .function_entry import CompiledFunction
from .numpy_ops import numpy_counterpart, traceable_dtype
from .tensor_subclass import is_placement
from .variables import hooks as _hooks  # noqa: F401  (registers Tensor.register_hook)
from .variables.autograd_function import AutogradFunctionClassVariable, is_autograd_function
from .variables.base import VariableTracker
from .variables.builtins import BuiltinVariable
from .variables.classes import ClassVariable, ObjectNewVariable, PythonModuleVariable
from .variables.constant import (
    ConstantVariable,
    OpaqueConstantVariable,
    is_constant_value,
    is_typing_value,
)
from .variables.dicts import DictVariable
from .variables.functions import PartialVariable, UserFunctionVariable, UserMethodVariable
from .variables.functorch import (
    TRANSFORM_FUNCTIONS,
    AssociativeScanVariable,
    TransformVariable,
    is_associative_scan,
)
from .variables.higher_order import HIGHER_ORDER_FUNCTIONS, HigherOrderVariable
from .variables.lazy import LazyVariable
from .variables.lists import ListVariable, TupleVariable
from .variables.misc import ControlFunctionVariable, OpaqueObjectVariable
from .variables.ndarray import (
    CONVERSIONS,
    NumpyConversionVariable,
    NumpyFunctionVariable,
    NumpyNdarrayVariable,
)
from .variables.nn_module import NNModuleVariable
from .variables.objects import (
    MODELLED_BASES,
    BaseMethodVariable,
    UserObjectVariable,
    base_method_owner,
)
from .variables.sets import SetVariable
from .variables.stdlib import wrap_stdlib
from .variables.torch import (
    AUTOCAST_CLASSES,
    GRAD_MODE_OBJECTS,
    GradModeExit,
    GradModeVariable,
    TorchFunctionVariable,
    wrap_grad_mode_exit,
)

if TYPE_CHECKING:
    from .translator_core import TranslatorCore as Tx

BUILTIN_FUNCTIONS = frozenset(
    v for v in vars(builtins).values() if isinstance(v, types.BuiltinFunctionType)
)
BUILTIN_TYPES = frozenset(
    {list, tuple, dict, int, float, bool, str, complex, range, slice, enumerate, zip,
     reversed, type, frozenset, set, object, bytes, super, property, staticmethod, classmethod}
)
GRAD_MODE = (torch.no_grad, torch.enable_grad, torch.set_grad_enabled, torch.inference_mode)
TENSOR_BASES = (torch.Tensor, torch._C.TensorBase)


def is_torch_callable(value: Any) -> bool:
    if (
        isinstance(value, types.FunctionType)
        and hasattr(value, "__wrapped__")
        and not trace_rules.names_itself(value)
    ):
        # functools.wraps wrappers made at run time (``torch.vmap(torch.sum)``) carry
        # the wrapped function's names but are not it
        return False
    if any(value is g for g in GRAD_MODE) or any(value is a for a in AUTOCAST_CLASSES):
        return True
    if isinstance(value, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        return getattr(value, "__objclass__", None) in TENSOR_BASES
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)) or type(value).__name__ in (
        "builtin_function_or_method",
        "_VariableFunctionsClass",
    ):
        mod = getattr(value, "__module__", None) or ""
        self_obj = getattr(value, "__self__", None)
        if mod == "torch" or mod.startswith("torch.") or mod.startswith("torch._C"):
            return True
        if self_obj is not None and getattr(self_obj, "__name__", "").startswith("torch"):
            return True
    return type(value).__name__ == "OpOverloadPacket" or isinstance(value, torch._ops.OpOverload)


def is_member(value: Any, group: frozenset[Any]) -> bool:
    try:
        return value in group
    except TypeError:  # unhashable
        return False


def control_kind(value: Any) -> str | None:
    """How the runtime's registries say a callable must be treated (``trace_rules``),
    or ``"compiled"`` for an ember compiled callable (traced as its original)."""
    if not callable(value) or isinstance(value, (type, torch.nn.Module)):
        return None
    if isinstance(value, CompiledFunction):
        return "compiled"
    return trace_rules.control_kind(value)


def is_slotted_python_object(value: Any) -> bool:
    """An instance of a class written in Python that keeps its attributes in
    ``__slots__`` (``dataclasses.Field``): read through its slots as any object."""
    cls = type(value)
    return bool(cls.__flags__ & (1 << 9)) and any("__slots__" in k.__dict__ for k in cls.__mro__[:-1])


#: constant dict keys a guard pins by value at their position (``wrap_identity_keyed_dict``)
POSITIONAL_KEY_CONSTANTS = (str, int, float, type(None), torch.dtype, torch.device)


def is_identity_key(key: Any) -> bool:
    """A dict key that is itself and has no literal text: a class, a ``typing``
    construct, a function, an enum member."""
    return isinstance(key, (type, types.FunctionType, types.BuiltinFunctionType, enum.Enum)) or is_typing_value(key)


def wrap_identity_keyed_dict(tx: Tx, value: dict[Any, Any], source: Source | None) -> VariableTracker:
    """A dict whose keys include classes, ``typing`` constructs, functions or constants
    no source text names (a registry of handlers per type: ``{list: check_list, Union:
    check_union}``; diffusers' ``{torch.float64: ("mps",)}``).
    No source text names such a key, so the dict is read by position
    (``DictEntry``): its length, each key (by identity, or by value for constants)
    and, when used, each value at its position are guarded."""
    if not all(isinstance(k, POSITIONAL_KEY_CONSTANTS) or is_identity_key(k) for k in value):
        raise Unsupported(
            "dict with keys other than constants (str, int, float, dtype, device), classes and "
            "functions read from the frame"
        )
    g = tx.output.guards if source is not None else None
    if g is not None and source is not None:
        g.add_type(source, value)
        g.add_length(source, value)
        for i, k in enumerate(value):
            key_source = DictEntry(source, i, "keys")
            if is_identity_key(k):
                g.add_id(key_source, k)
            else:
                g.add_constant(key_source, k)
    return tx.output.side_effects.existing_dict(
        value,
        lambda: DictVariable(
            {
                k: LazyVariable(v, DictEntry(source, i, "values")) if source else wrap(tx, v, None)
                for i, (k, v) in enumerate(value.items())
            },
            source,
            dict_type=type(value),
        ),
    )


def wrap(tx: Tx, value: Any, source: Source | None) -> VariableTracker:
    """The tracker for ``value`` read from ``source`` (guards recorded)."""
    g = tx.output.guards if source is not None else None

    if isinstance(value, torch.Tensor):
        if source is None:
            return tx.output.register_attr_tensor(value, None)
        return tx.output.add_input(value, source)
    if type(value) is np.ndarray and source is not None and tx.options.trace_numpy:
        if traceable_dtype(value.dtype):
            return NumpyNdarrayVariable(tx.output.add_numpy_input(value, source), source)
        if g is not None:  # strings, datetimes, float128...: passed through, used by NumPy
            g.add_type(source, value)
            g.add_constant(Attr(Attr(source, "dtype"), "str"), value.dtype.str)
        return OpaqueObjectVariable(value, source)
    if isinstance(value, GradModeExit) and source is not None:
        return wrap_grad_mode_exit(tx, value, source)
    if isinstance(value, torch.nn.Module):
        if g is not None and source is not None:
            g.add_module(source, value)
        return NNModuleVariable(value, source)
    if type(value) is float and source is not None:
        sym = tx.output.shapes.float_symbol(source, value, tx.options.specialize_float)
        if sym is not None:
            return tx.output.add_float_input(value, source, sym)
    if isinstance(value, (bool, int, float, str, bytes, type(None), complex, torch.dtype,
                          torch.device, torch.Size, range, slice, torch.layout,
                          torch.memory_format, type(Ellipsis), frozenset)):
        if g is not None and source is not None:
            g.add_constant(source, value)
        return ConstantVariable(value, source)
    if tx.options.trace_numpy:
        mirror = numpy_counterpart(value)
        if mirror is not None:
            if g is not None and source is not None:
                g.add_id(source, value)
            return NumpyFunctionVariable(value, mirror, source)
    if any(value is c for c in CONVERSIONS):
        if g is not None and source is not None:
            g.add_id(source, value)
        return NumpyConversionVariable(value, source)
    if isinstance(value, enum.Enum) or is_typing_value(value):
        if g is not None and source is not None:
            g.add_id(source, value)
        return OpaqueConstantVariable(value, source)
    if isinstance(value, tuple) and type(value) is tuple:
        if g is not None and source is not None:
            g.add_length(source, value)
        return TupleVariable(
            [wrap(tx, v, Item(source, i) if source else None) for i, v in enumerate(value)],
            source,
        )
    if type(value) is list:
        if g is not None and source is not None:
            g.add_length(source, value)
        return tx.output.side_effects.existing_list(
            value,
            lambda: ListVariable(
                [wrap(tx, v, Item(source, i) if source else None) for i, v in enumerate(value)],
                source,
            ),
        )
    if type(value) in (set, frozenset) and all(is_constant_value(v) for v in value):
        # a module-level set of names (``if kind in SUPPORTED:``): guarded by value
        if g is not None and source is not None:
            g.add_constant(source, value)
        return SetVariable(
            {v: ConstantVariable(v) for v in value}, frozen=type(value) is frozenset, source=source
        )
    if type(value) in (dict, collections.OrderedDict):
        if not all(type(k) in (str, int) for k in value):  # (a str enum member is no literal)
            return wrap_identity_keyed_dict(tx, value, source)
        if g is not None and source is not None:
            g.add_dict_keys(source, value)
        return tx.output.side_effects.existing_dict(
            value,
            lambda: DictVariable(
                {
                    k: LazyVariable(v, Item(source, k)) if source else wrap(tx, v, None)
                    for k, v in value.items()
                },
                source,
                dict_type=type(value),
            ),
        )
    owner = base_method_owner(value)
    if owner is not None:  # object.__setattr__, dict.__setitem__, ... read from the class
        return BaseMethodVariable(owner, value.__name__, None)
    if any(value is cls.__new__ for cls in MODELLED_BASES):
        return ObjectNewVariable(value)
    stdlib = wrap_stdlib(value, source)
    if stdlib is not None:
        if g is not None and source is not None:
            g.add_id(source, value)
        return stdlib
    if isinstance(value, GRAD_MODE_OBJECTS):
        # a `torch.no_grad()` object (a decorator's saved context)
        if g is not None and source is not None:
            g.add_type(source, value)
        if isinstance(value, torch.set_grad_enabled):
            if g is not None and source is not None:
                g.add_constant(Attr(source, "mode"), value.mode)
            return GradModeVariable(value.mode)
        if isinstance(value, torch.inference_mode):  # grad mode off in the graph (variables.torch)
            if g is not None and source is not None:
                g.add_constant(Attr(source, "mode"), value.mode)
            return GradModeVariable(False if value.mode else None)
        return GradModeVariable(isinstance(value, torch.enable_grad))
    control = control_kind(value)
    if control is not None:
        if control == "compiled":
            return wrap(tx, value.__wrapped__, Attr(source, "__wrapped__") if source else None)
        return ControlFunctionVariable(value, control)
    if is_member(value, TRANSFORM_FUNCTIONS):
        if g is not None and source is not None:
            g.add_function(source, value)
        return TransformVariable(value, source)
    if is_associative_scan(value):
        if g is not None and source is not None:
            g.add_function(source, value)
        return AssociativeScanVariable(value, source)
    if is_member(value, HIGHER_ORDER_FUNCTIONS):
        if g is not None and source is not None:
            g.add_function(source, value)
        return HigherOrderVariable(value, source)
    if is_torch_callable(value) and not trace_rules.is_inlined_torch_function(value):
        if g is not None and source is not None:
            g.add_function(source, value)
        return TorchFunctionVariable(value, source)
    if (
        is_member(value, BUILTIN_FUNCTIONS)
        or is_member(value, BUILTIN_TYPES)
        or (isinstance(value, types.BuiltinFunctionType) and getattr(value, "__module__", "") in ("math", "_operator", "operator"))
    ):
        if g is not None and source is not None:
            g.add_id(source, value)
        return BuiltinVariable(value)
    if isinstance(value, types.FunctionType):
        if value.__module__ and (value.__module__ in ("operator", "math")):
            if g is not None and source is not None:
                g.add_function(source, value)
            return BuiltinVariable(value)
        if g is not None and source is not None:
            # By code, not by object: a closure or lambda made afresh on every
            # call is the same program; what it closes over, its defaults and
            # globals are guarded where they are read.
            g.add_type(source, value)
            g.add_id(Attr(source, "__code__"), value.__code__)
        return UserFunctionVariable(value, source)
    if isinstance(value, types.MethodType):
        obj_src = Attr(source, "__self__") if source else None
        fn_src = Attr(source, "__func__") if source else None
        fn = value.__func__
        if isinstance(value.__self__, GRAD_MODE_OBJECTS):
            return wrap(tx, value.__self__, obj_src).var_getattr(tx, fn.__name__)
        if not isinstance(fn, types.FunctionType):
            raise Unsupported(f"bound method `{getattr(fn, '__name__', fn)}` of a C type")
        return UserMethodVariable(UserFunctionVariable(fn, fn_src), wrap(tx, value.__self__, obj_src))
    if isinstance(value, types.ModuleType):
        if g is not None and source is not None:
            g.add_id(source, value)
        return PythonModuleVariable(value, source)
    if isinstance(value, type):
        if g is not None and source is not None:
            g.add_id(source, value)
        if is_autograd_function(value):
            return AutogradFunctionClassVariable(value, source)
        return ClassVariable(value, source)
    if isinstance(value, (torch.finfo, torch.iinfo)):
        return OpaqueConstantVariable(value, source)
    if type(value) is functools.partial:
        if g is not None and source is not None:
            g.add_type(source, value)
        part = (lambda name: Attr(source, name)) if source is not None else (lambda name: None)
        args_src, kw_src = part("args"), part("keywords")
        return PartialVariable(
            wrap(tx, value.func, part("func")),
            [wrap(tx, a, Item(args_src, i) if args_src else None) for i, a in enumerate(value.args)],
            {k: wrap(tx, v, Item(kw_src, k) if kw_src else None) for k, v in value.keywords.items()},
            source,
        )
    if is_placement(value) and not isinstance(value, type):
        # ``Shard(0)`` kept on a module (a parallel style's layouts): a value (ADR 0069)
        if g is not None and source is not None:
            g.add_placement(source, value)
        return OpaqueConstantVariable(value, source)
    if type(value).__module__.startswith("torch") and source is not None and not callable(value):
        if g is not None:
            g.add_type(source, value)
        return OpaqueObjectVariable(value, source)
    if type(value).__module__.startswith(("numpy", "torch")):
        raise Unsupported(f"value of type `{type(value).__qualname__}` cannot be traced")
    if (hasattr(value, "__dict__") or is_slotted_python_object(value)) and (
        not callable(value)
        or isinstance(inspect.getattr_static(type(value), "__call__", None), types.FunctionType)
    ):
        if g is not None and source is not None:
            g.add_type(source, value)
        return UserObjectVariable(value, source)
    raise Unsupported(f"value of type `{type(value).__qualname__}` cannot be traced")


def wrap_constant_result(value: Any) -> VariableTracker:
    """A tracker for a value computed while tracing from constants."""
    if is_constant_value(value):
        return ConstantVariable(value)
    if type(value) is tuple:
        return TupleVariable([wrap_constant_result(v) for v in value])
    if type(value) is list:
        return ListVariable([wrap_constant_result(v) for v in value])
    if type(value) is dict or isinstance(value, types.MappingProxyType):
        return DictVariable({k: wrap_constant_result(v) for k, v in value.items()})
    if isinstance(value, (collections.abc.KeysView, collections.abc.ValuesView, collections.abc.ItemsView)):
        return TupleVariable([wrap_constant_result(v) for v in value])
    if is_member(value, BUILTIN_FUNCTIONS) or is_member(value, BUILTIN_TYPES):
        return BuiltinVariable(value)
    if isinstance(value, (torch.finfo, torch.iinfo, enum.Enum)) or is_typing_value(value):
        return OpaqueConstantVariable(value)
    if isinstance(value, type):
        return ClassVariable(value)
    if callable(value) and getattr(value, "__module__", "") in ("math", "operator"):
        return BuiltinVariable(value)
    if isinstance(value, torch.Tensor):
        raise Unsupported("a constant computation produced a tensor")
    raise Unsupported(f"constant folding produced a `{type(value).__qualname__}`")


OPERATORS = (operator, math)
