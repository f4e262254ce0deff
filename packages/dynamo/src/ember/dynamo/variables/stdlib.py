"""The standard library pieces model code calls, with their meaning modelled.

``functools.reduce``/``wraps``/``update_wrapper``, ``inspect.signature``,
``dataclasses.fields``/``is_dataclass``, ``operator.itemgetter``/
``attrgetter``/``methodcaller``, ``itertools.chain.from_iterable``,
``typing.cast``, ``functools.lru_cache`` wrappers, ``os.environ`` reads and
``logging`` calls (a logging call is replayed after the graph, like a
side effect, so the message is still printed). The builder maps each real
value in :data:`STDLIB` to a :class:`StdlibFunctionVariable`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import logging
import operator
import os
import types
import typing
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ember.ir import Source

from ..errors import Unsupported
from .base import VariableTracker
from .classes import ClassVariable
from .constant import ConstantVariable
from .copying import COPY_FUNCTIONS
from .functions import (
    NestedFunctionVariable,
    PartialVariable,
    UserFunctionVariable,
    UserMethodVariable,
)
from .iterators import items_of
from .lists import ListIteratorVariable, TupleVariable
from .misc import BoundCallVariable
from .nn_module import NNModuleVariable
from .operators import Args, Kwargs

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx

Handler = Callable[["Tx", Args, Kwargs], VariableTracker]


def reduce(tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
    if kwargs or not 2 <= len(args) <= 3:
        raise Unsupported("functools.reduce(function, iterable[, initial])")
    fn, items = args[0], items_of(tx, args[1])
    if len(args) == 3:
        acc = args[2]
    elif items:
        acc, items = items[0], items[1:]
    else:
        raise Unsupported("reduce() of an empty iterable with no initial value (TypeError)")
    for item in items:
        acc = fn.call_function(tx, [acc, item], {})
    return acc


WRAPPER_ASSIGNMENTS = ("__module__", "__name__", "__qualname__", "__doc__")


def update_wrapper(tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
    """``functools.update_wrapper(wrapper, wrapped)``: the wrapper (a function
    made in the frame) takes the wrapped function's name, docs and
    ``__wrapped__``."""
    bound = [*args, *([kwargs["wrapped"]] if "wrapped" in kwargs else [])]
    if len(bound) != 2 or set(kwargs) - {"wrapped"}:
        raise Unsupported("functools.update_wrapper with custom `assigned`/`updated`")
    wrapper, wrapped = bound
    if not isinstance(wrapper, NestedFunctionVariable):
        raise Unsupported(f"functools.wraps on {wrapper.describe()}")
    for name in WRAPPER_ASSIGNMENTS:
        try:
            value = wrapped.var_getattr(tx, name)
        except Unsupported:
            continue
        wrapper.store_attr(tx, name, value)
    wrapper.store_attr(tx, "__wrapped__", wrapped)
    return wrapper


def wraps(tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
    if len(args) != 1 or kwargs:
        raise Unsupported("functools.wraps with custom arguments")
    wrapped = args[0]
    return PartialVariable(StdlibFunctionVariable(functools.update_wrapper), [], {"wrapped": wrapped})


def signature_of(tx: Tx, v: VariableTracker) -> inspect.Signature:
    """``inspect.signature`` of what ``v`` stands for, computed now: the
    callable's parameters depend only on its code, defaults and binding,
    which the tracker pins."""
    if isinstance(v, UserFunctionVariable):
        return inspect.signature(v.fn)
    if isinstance(v, NestedFunctionVariable):
        shell = types.FunctionType(
            v.code, {}, v.code.co_name, tuple(v._defaults) or None,
            tuple(types.CellType() for _ in v.code.co_freevars) or None,
        )
        shell.__kwdefaults__ = dict(v._kwdefaults) or None
        return inspect.signature(shell)
    if isinstance(v, UserMethodVariable):
        sig = signature_of(tx, v.fn)
        params = list(sig.parameters.values())
        if not params or params[0].kind not in (
            inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD
        ):
            raise Unsupported("inspect.signature of a method without a leading parameter")
        return sig.replace(parameters=params[1:])
    if isinstance(v, PartialVariable):
        base = signature_of(tx, v.fn)

        def stand_in(*a: Any, **k: Any) -> None:
            return None

        stand_in.__signature__ = base  # type: ignore[attr-defined]
        bound = functools.partial(stand_in, *[None] * len(v.args), **dict.fromkeys(v.kwargs))
        return inspect.signature(bound)
    if isinstance(v, NNModuleVariable):
        return inspect.signature(v.value)
    if v.is_python_constant():
        return inspect.signature(v.as_python_constant())
    raise Unsupported(f"inspect.signature of {v.describe()}")


def signature(tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
    if len(args) != 1 or kwargs:
        raise Unsupported("inspect.signature with extra arguments")
    try:
        sig = signature_of(tx, args[0])
    except (TypeError, ValueError) as e:
        raise Unsupported(f"inspect.signature raised {type(e).__name__}: {e}") from e
    return ConstantVariable(sig)


def fields(tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
    target = args[0] if len(args) == 1 and not kwargs else None
    if target is None:
        raise Unsupported("dataclasses.fields takes one argument")
    cls = target.as_python_constant() if isinstance(target, ClassVariable) else target.python_type()
    if not dataclasses.is_dataclass(cls):
        raise Unsupported(f"dataclasses.fields of {target.describe()} (TypeError)")
    # the class is pinned by the tracker (an ID guard or a class made here)
    return TupleVariable([ConstantVariable(f) for f in dataclasses.fields(cls)])


def is_dataclass(tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
    target = args[0]
    cls = target.as_python_constant() if isinstance(target, ClassVariable) else target.python_type()
    return ConstantVariable(dataclasses.is_dataclass(cls))


def cast(tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
    if len(args) != 2 or kwargs:
        raise Unsupported("typing.cast(type, value)")
    return args[1]


def chain_from_iterable(tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
    return ListIteratorVariable([x for it in items_of(tx, args[0]) for x in items_of(tx, it)])


class GetterVariable(VariableTracker):
    """``operator.itemgetter(*keys)`` / ``attrgetter(*names)`` / ``methodcaller(name, ...)``."""

    def __init__(self, kind: Any, args: Args, kwargs: Kwargs) -> None:
        super().__init__(None)
        self.kind = kind
        self.args = tuple(args)
        self.kwargs = dict(kwargs)

    def describe(self) -> str:
        return f"`operator.{self.kind.__name__}`"

    def call_function(self, tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
        if len(args) != 1 or kwargs:
            raise Unsupported(f"{self.describe()} takes one argument")
        obj = args[0]
        if self.kind is operator.methodcaller:
            name = self.args[0].as_python_constant()
            return obj.call_method(tx, name, list(self.args[1:]), self.kwargs)
        results: list[VariableTracker] = []
        for key in self.args:
            if self.kind is operator.itemgetter:
                results.append(tx.getitem(obj, key))
                continue
            value = obj
            for part in str(key.as_python_constant()).split("."):
                value = value.var_getattr(tx, part)
            results.append(value)
        return results[0] if len(results) == 1 else TupleVariable(results)


def getter(kind: Any) -> Handler:
    return lambda tx, args, kwargs: GetterVariable(kind, args, kwargs)


def deferred_call(tx: Tx, fn: Any, args: Args, kwargs: Kwargs) -> VariableTracker:
    """A call made for its output only (a log message, a warning): replayed
    after the graph runs, with the same arguments."""
    tx.output.side_effects.record_call(fn, args, kwargs)
    return ConstantVariable(None)


def warn(tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
    return deferred_call(tx, warnings.warn, args, kwargs)


def lru_cache_call(tx: Tx, fn: Any, args: Args, kwargs: Kwargs) -> VariableTracker:
    """A ``functools.lru_cache`` function: a cached result is a function of
    its arguments, so on constant arguments it is computed now; otherwise the
    function it wraps is inlined."""
    values = [*args, *kwargs.values()]
    if all(v.is_python_constant() for v in values):
        try:
            result = fn(*[a.as_python_constant() for a in args],
                        **{k: v.as_python_constant() for k, v in kwargs.items()})
        except Exception as e:
            raise Unsupported(f"`{fn.__name__}` raised {type(e).__name__}: {e}") from e
        return tx.wrap_constant(result)
    return tx.wrap(fn.__wrapped__, None).call_function(tx, args, kwargs)


STDLIB: dict[Any, Handler] = {
    functools.reduce: reduce,
    functools.update_wrapper: update_wrapper,
    functools.wraps: wraps,
    inspect.signature: signature,
    dataclasses.fields: fields,
    dataclasses.is_dataclass: is_dataclass,
    typing.cast: cast,
    itertools.chain.from_iterable: chain_from_iterable,
    operator.itemgetter: getter(operator.itemgetter),
    operator.attrgetter: getter(operator.attrgetter),
    operator.methodcaller: getter(operator.methodcaller),
    warnings.warn: warn,
    **COPY_FUNCTIONS,
}


class StdlibFunctionVariable(VariableTracker):
    """A standard library callable whose meaning is modelled (see :data:`STDLIB`)."""

    def __init__(self, value: Any, source: Source | None = None) -> None:
        super().__init__(source)
        self.value = value

    def describe(self) -> str:
        return f"`{getattr(self.value, '__module__', '')}.{getattr(self.value, '__qualname__', self.value)}`"

    def as_python_constant(self) -> Any:
        return self.value

    def call_function(self, tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
        if isinstance(self.value, functools._lru_cache_wrapper):
            return lru_cache_call(tx, self.value, args, kwargs)
        return STDLIB[self.value](tx, args, kwargs)

    def reconstruct(self, cg: PyCodegen) -> None:
        cg.load_const(self.value)


def is_stdlib(value: Any) -> bool:
    try:
        return value in STDLIB or isinstance(value, functools._lru_cache_wrapper)
    except TypeError:
        return False


# -- objects ------------------------------------------------------------------------

LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "critical", "exception", "log",
     "warning_once", "info_once", "warning_advice"}
)


class LoggerVariable(VariableTracker):
    """A ``logging.Logger``: a logging call is replayed after the graph (so it
    is printed, once per call, as in eager); ``isEnabledFor`` is read now."""

    def __init__(self, value: logging.Logger, source: Source | None = None) -> None:
        super().__init__(source)
        self.value = value

    def describe(self) -> str:
        return f"logger `{self.value.name}`"

    def python_type(self) -> type:
        return type(self.value)

    def call_method(self, tx: Tx, name: str, args: Args, kwargs: Kwargs) -> VariableTracker:
        if name in LOG_METHODS:
            return deferred_call(tx, getattr(self.value, name), args, kwargs)
        if name in ("isEnabledFor", "getEffectiveLevel") and all(
            a.is_python_constant() for a in args
        ):
            return ConstantVariable(getattr(self.value, name)(*[a.as_python_constant() for a in args]))
        raise Unsupported(f"`{name}` of {self.describe()} cannot be traced")

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        return BoundCallVariable(self, name)

    def reconstruct(self, cg: PyCodegen) -> None:
        if self.source is not None:
            cg.load_source(self.source)
        else:
            cg.load_const(self.value)


class EnvironVariable(VariableTracker):
    """``os.environ``: reads happen now. Environment variables are read once
    per capture, as configuration (like TorchDynamo, they are not guarded:
    a change after the first call is not seen by compiled code)."""

    def __init__(self) -> None:
        super().__init__(None)

    def describe(self) -> str:
        return "os.environ"

    def call_method(self, tx: Tx, name: str, args: Args, kwargs: Kwargs) -> VariableTracker:
        if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
            raise Unsupported(f"os.environ.{name} with non-constant arguments")
        consts = [a.as_python_constant() for a in args]
        if name in ("get", "__getitem__", "__contains__") and not kwargs:
            try:
                return tx.wrap_constant(getattr(os.environ, name)(*consts))
            except KeyError as e:
                raise Unsupported(f"os.environ[{consts[0]!r}] is not set (KeyError)") from e
        raise Unsupported(f"os.environ.{name} cannot be traced")

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        return BoundCallVariable(self, name)

    def reconstruct(self, cg: PyCodegen) -> None:
        cg.load_const(os.environ)


def wrap_stdlib(value: Any, source: Source | None) -> VariableTracker | None:
    """The tracker for a standard library value with a model here, or None."""
    if is_stdlib(value):
        return StdlibFunctionVariable(value, source)
    if isinstance(value, logging.Logger):
        return LoggerVariable(value, source)
    if value is os.environ:
        return EnvironVariable()
    return None

