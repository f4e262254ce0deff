"""Classes and modules used as values, ``super()``, and creating instances.

Calling a class (:func:`construct`) makes the value a Python call would:
builtin types fold or build container trackers, ``functools.partial`` a
:class:`PartialVariable`, a named tuple a tuple tracker, a stateless
``torch.nn`` module a real (guard-free) module, and any other Python class
a :class:`NewObjectVariable` whose ``__init__`` is inlined (dataclasses'
generated ``__init__`` and ``__post_init__`` included).
"""

from __future__ import annotations

import collections
import functools
import inspect
import types
from typing import TYPE_CHECKING, Any

import torch

from ember.ir import Attr, Source

from ..errors import Unsupported
from ..tensor_subclass import is_placement
from .base import VariableTracker
from .constant import ConstantVariable, OpaqueConstantVariable
from .dicts import DictVariable
from .functions import PartialVariable, UserFunctionVariable, UserMethodVariable
from .iterators import ITERTOOLS_TYPES, construct_itertools, take_parallel
from .known_scalars import known_value
from .lists import ListIteratorVariable, ListVariable, NamedTupleVariable, TupleVariable
from .nn_module import NewModuleVariable, TorchInitVariable, construct_module, is_torch_nn_class
from .objects import (
    DICT_BASES,
    MISSING,
    MODELLED_BASES,
    BaseMethodVariable,
    ExceptionVariable,
    NewObjectVariable,
    ObjectVariable,
    base_method_owner,
    is_torch_internal_method,
)
from .operators import Args, Kwargs, all_const, fold, iterate
from .sets import SetVariable
from .tensor import TensorVariable
from .tensor import item as tensor_item

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx


class ClassVariable(VariableTracker):
    """A Python class used as a value (``isinstance`` targets, ``torch.Tensor``)."""

    def __init__(self, value: type, source: Source | None = None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def describe(self) -> str:
        return f"class `{self.value.__name__}`"

    def as_python_constant(self) -> Any:
        return self.value

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        try:
            static = inspect.getattr_static(self.value, name)
        except AttributeError as e:
            raise Unsupported(f"class `{self.value.__name__}` has no attribute `{name}`") from e
        if isinstance(static, classmethod) and isinstance(static.__func__, types.FunctionType):
            return UserMethodVariable(UserFunctionVariable(static.__func__), self)
        owner = base_method_owner(static)
        if owner is not None:
            return BaseMethodVariable(owner, name, None)
        if isinstance(static, (staticmethod, classmethod)):
            return tx.wrap(getattr(self.value, name), None)
        return tx.wrap(getattr(self.value, name), Attr(self.source, name) if self.source else None)

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        return construct(tx, self.value, args, kwargs, self.source)

    def reconstruct(self, cg: PyCodegen) -> None:
        cg.load_const(self.value)


class PythonModuleVariable(VariableTracker):
    """A Python module object (``math``, ``operator``, a user helper module)."""

    def __init__(self, value: types.ModuleType, source: Source | None = None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return types.ModuleType

    def describe(self) -> str:
        return f"module `{self.value.__name__}`"

    def as_python_constant(self) -> Any:
        return self.value

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        try:
            attr = getattr(self.value, name)
        except AttributeError as e:
            raise Unsupported(f"module `{self.value.__name__}` has no attribute `{name}`") from e
        src = Attr(self.source, name) if self.source is not None else None
        if self.value.__name__.split(".")[0] == "torch" and not isinstance(attr, torch.Tensor):
            # torch's own namespaces are trusted not to be monkey-patched
            # between calls: no guard per function read (as TorchDynamo).
            src = None
        return tx.wrap(attr, src)

    def reconstruct(self, cg: PyCodegen) -> None:
        cg.load_const(self.value)


class SuperVariable(VariableTracker):
    """``super()`` / ``super(Cls, obj)``: attribute lookups start after ``cls``
    in the MRO of ``obj``'s class (or of ``obj`` itself inside a classmethod);
    methods found bind ``obj``."""

    def __init__(self, cls: type, obj: VariableTracker) -> None:
        super().__init__(None)
        self.cls = cls
        self.obj = obj

    def describe(self) -> str:
        return f"super({self.cls.__name__})"

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        obj = self.obj
        of_class = isinstance(obj, ClassVariable)
        mro = obj.value.__mro__ if of_class else obj.python_type().__mro__  # type: ignore[attr-defined]
        try:
            start = mro.index(self.cls) + 1
        except ValueError as e:
            raise Unsupported(f"super(): {self.cls.__name__} is not in the MRO") from e
        for klass in mro[start:]:
            if name not in klass.__dict__:
                continue
            found = klass.__dict__[name]
            if (name == "__init__" and isinstance(obj, NewModuleVariable) and obj.constructing
                    and is_torch_nn_class(klass)):
                return TorchInitVariable(found, obj)
            if isinstance(found, types.FunctionType) and not is_torch_internal_method(found):
                if of_class:
                    return UserFunctionVariable(found)
                return UserMethodVariable(UserFunctionVariable(found), obj)
            if isinstance(found, staticmethod):
                return tx.wrap(found.__func__, None)
            if isinstance(found, classmethod) and isinstance(found.__func__, types.FunctionType):
                bound = obj if of_class else tx.wrap(obj.python_type(), None)
                return UserMethodVariable(UserFunctionVariable(found.__func__), bound)
            if isinstance(found, property) and isinstance(found.fget, types.FunctionType) and not of_class:
                return UserFunctionVariable(found.fget).call_function(tx, [obj], {})
            owner = base_method_owner(found)
            if owner is not None and not of_class:
                return BaseMethodVariable(owner, name, obj)
            if isinstance(found, (int, float, str, bool, type(None))):
                return tx.wrap(found, None)
            break
        raise Unsupported(f"attribute `{name}` of {self.describe()} cannot be traced")


def make_super(tx: Tx, args: list[VariableTracker]) -> VariableTracker:
    if len(args) == 2:
        cls = args[0].as_python_constant()
        return SuperVariable(cls, args[1])
    if args:
        raise Unsupported("super() with one argument")
    cell = tx.cells.get("__class__")
    code = tx.code
    if cell is None or code.co_argcount == 0:
        raise Unsupported("zero-argument super() outside a method")
    cls_var = cell.get(tx)
    first = code.co_varnames[0]
    obj = tx.symbolic_locals.get(first)
    if obj is None and first in tx.cells:
        obj = tx.cells[first].get(tx)
    if obj is None:
        raise Unsupported("super(): the method's first argument is not available")
    realize = getattr(obj, "realize", None)
    if realize is not None:
        obj = realize(tx)
        tx.symbolic_locals[first] = obj
    return SuperVariable(cls_var.as_python_constant(), obj)


def class_text(tx: Tx, var: Any, fn: Any) -> VariableTracker:
    """``str(cls)`` of a plain class: ``<class 'mod.Qual'>``.

    A class reached through a source is pinned by its ID guard, but
    ``__module__`` and ``__qualname__`` are writable, so they are guarded by
    value too. A class reached without one (``type(x)`` of a traced value)
    is known exactly by its tracker, so its text is folded. A metaclass with
    its own ``__repr__``/``__str__`` is a graph break."""
    cls = var.value
    meta: Any = type(cls)
    plain: Any = (type.__repr__, object.__str__)
    if meta.__repr__ is not plain[0] or meta.__str__ is not plain[1]:
        raise Unsupported(f"`{fn.__name__}()` of {var.describe()} cannot be traced")
    if var.source is not None:
        g = tx.output.guards
        for attr in ("__module__", "__qualname__"):
            value = getattr(cls, attr, None)
            if not isinstance(value, str):
                raise Unsupported(f"`{fn.__name__}()` of {var.describe()} cannot be traced")
            g.add_constant(Attr(var.source, attr), value)
    return ConstantVariable(fn(cls))


# -- making instances ---------------------------------------------------------------

BUILTIN_CONSTRUCTORS = frozenset(
    {list, tuple, dict, int, float, bool, str, complex, range, slice, enumerate, zip, reversed,
     type, frozenset, set, object, map, filter}
)


def construct(
    tx: Tx, cls: Any, args: Args, kwargs: Kwargs, cls_source: Source | None = None
) -> VariableTracker:
    """``cls(*args, **kwargs)`` while tracing (``cls_source``: where the class was read)."""
    if cls in BUILTIN_CONSTRUCTORS or cls in (torch.Size, torch.device, torch.finfo, torch.iinfo):
        return construct_builtin_type(tx, cls, args, kwargs)
    if cls in ITERTOOLS_TYPES:
        return construct_itertools(tx, cls, args, kwargs)
    if cls is functools.partial:
        if not args:
            raise Unsupported("functools.partial() without a function (TypeError)")
        return PartialVariable(args[0], list(args[1:]), kwargs)
    if cls is collections.OrderedDict:
        d = DictVariable({}, dict_type=collections.OrderedDict)
        if args or kwargs:
            d.call_method(tx, "update", list(args), kwargs)
        return d
    if isinstance(cls, type) and issubclass(cls, torch.nn.Module):
        return construct_module(tx, cls, args, kwargs, cls_source)
    if isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return construct_namedtuple(tx, cls, args, kwargs)
    if isinstance(cls, type):
        return construct_object(tx, cls, args, kwargs)
    raise Unsupported(f"calling `{getattr(cls, '__name__', cls)}` cannot be traced")


def construct_namedtuple(tx: Tx, cls: type, args: Args, kwargs: Kwargs) -> VariableTracker:
    fields: tuple[str, ...] = cls._fields  # type: ignore[attr-defined]
    defaults: dict[str, Any] = getattr(cls, "_field_defaults", {})
    values: dict[str, VariableTracker] = dict(zip(fields, args, strict=False))
    if len(args) > len(fields):
        raise Unsupported(f"{cls.__name__}() takes {len(fields)} arguments (TypeError)")
    for k, v in kwargs.items():
        if k not in fields or k in values:
            raise Unsupported(f"{cls.__name__}() got an unexpected or repeated argument `{k}`")
        values[k] = v
    for f in fields:
        if f not in values:
            if f not in defaults:
                raise Unsupported(f"{cls.__name__}() missing argument `{f}` (TypeError)")
            values[f] = tx.wrap_constant(defaults[f])
    return NamedTupleVariable([values[f] for f in fields], cls)


def storage_base(cls: type) -> type | None:
    """The modelled builtin base of ``cls`` whose storage instances carry
    (``dict``/``OrderedDict``), None for plain objects; ``Unsupported`` for a
    class deriving from another C type (list, Exception, a C extension type)."""
    found: type | None = None
    for klass in cls.__mro__:
        if klass in DICT_BASES:
            found = found or klass
        elif klass not in MODELLED_BASES and not klass.__flags__ & (1 << 9):  # Py_TPFLAGS_HEAPTYPE
            raise Unsupported(
                f"creating a `{cls.__name__}` object (a subclass of the C type "
                f"`{klass.__name__}`) cannot be traced"
            )
    return found


def construct_object(tx: Tx, cls: type, args: Args, kwargs: Kwargs) -> VariableTracker:
    """An instance of a Python class: ``__new__`` modelled, ``__init__`` inlined."""
    if is_placement(cls) and all_const([*args, *kwargs.values()]):
        # ``Shard(0)``, ``Replicate()``: an immutable value, made now (ADR 0069)
        return OpaqueConstantVariable(cls(*[a.as_python_constant() for a in args],
                                          **{k: v.as_python_constant() for k, v in kwargs.items()}))
    meta: Any = type(cls)
    if meta.__call__ is not type.__call__:
        raise Unsupported(f"creating a `{cls.__name__}`: its metaclass defines __call__")
    if getattr(cls, "__abstractmethods__", None):
        raise Unsupported(f"`{cls.__name__}` is abstract (TypeError)")
    if issubclass(cls, BaseException):
        if kwargs or not cls.__module__ == "builtins":
            raise Unsupported(f"creating the exception `{cls.__name__}` inside a compiled region")
        return ExceptionVariable(cls, list(args))
    dict_base = storage_base(cls)
    new = inspect.getattr_static(cls, "__new__")
    if isinstance(new, staticmethod):
        raise Unsupported(f"creating a `{cls.__name__}`: its __new__ is Python code")
    obj = NewObjectVariable(cls, dict_base)
    init_object(tx, obj, args, kwargs)
    return obj


def init_object(tx: Tx, obj: ObjectVariable, args: Args, kwargs: Kwargs) -> None:
    """Run ``type(obj).__init__`` on a new object."""
    init = inspect.getattr_static(obj.cls, "__init__", MISSING)
    if isinstance(init, types.FunctionType):
        result = UserFunctionVariable(init).call_function(tx, [obj, *args], kwargs)
        if not (result.is_python_constant() and result.as_python_constant() is None):
            raise Unsupported("__init__() should return None (TypeError)")
        return
    owner = base_method_owner(init)
    if owner is None:
        raise Unsupported(f"creating a `{obj.cls.__name__}`: its __init__ is not Python code")
    if owner is object and (args or kwargs):
        raise Unsupported(f"{obj.cls.__name__}() takes no arguments (TypeError)")
    obj.base_method(tx, owner, "__init__", list(args), kwargs)


def construct_builtin_type(tx: Tx, cls: Any, args: Args, kwargs: Kwargs) -> VariableTracker:
    if cls in (list, tuple):
        items = iterate(tx, args[0]) if args else []
        return ListVariable(items) if cls is list else TupleVariable(items)
    if cls is dict:
        d = DictVariable({})
        if args:
            d.call_method(tx, "update", [args[0]], {})
        if kwargs:
            d.write(tx, {**d.items, **kwargs})
        return d
    if cls in (set, frozenset) and not kwargs and not (cls is frozenset and all_const(list(args))):
        return SetVariable.of(tx, iterate(tx, args[0]) if args else [], frozen=cls is frozenset)
    if cls is int and len(args) == 1 and not kwargs and isinstance(args[0], TensorVariable):
        known = known_value(args[0])  # ``int(torch.tensor(n))``: n, known while tracing
        if known is not None:
            return known.materialize(tx.output)
    if cls in (int, float) and len(args) == 1 and not kwargs and isinstance(args[0], TensorVariable):
        return tensor_item(tx, args[0], "__int__" if cls is int else "__float__")  # ADR 0060
    if cls in (int, float, bool, str, complex) and args and isinstance(args[0], TensorVariable):
        raise Unsupported(
            f"`{cls.__name__}(tensor)` needs the tensor's data, which is only known at run time"
        )
    if cls is bool and len(args) == 1 and not kwargs:
        return ConstantVariable(args[0].truth(tx))
    if cls is str and len(args) == 1 and not kwargs and isinstance(args[0], ClassVariable):
        return class_text(tx, args[0], cls)
    if cls is str and len(args) == 1 and not kwargs and isinstance(args[0], ObjectVariable):
        return str_of_object(tx, args[0])
    if cls in (int, float, bool, str, complex, range, slice, frozenset, torch.Size, torch.device,
               torch.finfo, torch.iinfo) and all_const([*args, *kwargs.values()]):
        return fold(tx, cls, args, kwargs)
    if cls is enumerate:
        start = args[1].as_python_constant() if len(args) > 1 else 0
        start = kwargs["start"].as_python_constant() if "start" in kwargs else start
        items = iterate(tx, args[0])
        return ListIteratorVariable(
            [TupleVariable([ConstantVariable(i + start), v]) for i, v in enumerate(items)]
        )
    if cls is zip:
        strict = bool(kwargs["strict"].as_python_constant()) if "strict" in kwargs else False
        if not args:
            return ListIteratorVariable([])
        if strict:
            lists = [iterate(tx, a) for a in args]
            if len({len(x) for x in lists}) > 1:
                raise Unsupported("zip(strict=True) over iterables of different lengths")
        else:
            lists = take_parallel(tx, list(args))
        return ListIteratorVariable([TupleVariable(list(t)) for t in zip(*lists, strict=False)])
    if cls is map and len(args) >= 2 and not kwargs:
        fn, lists = args[0], take_parallel(tx, list(args[1:]))
        return ListIteratorVariable(
            [fn.call_function(tx, list(t), {}) for t in zip(*lists, strict=False)]
        )
    if cls is filter and len(args) == 2 and not kwargs:
        fn, items = args[0], iterate(tx, args[1])
        if fn.is_python_constant() and fn.as_python_constant() is None:
            return ListIteratorVariable([v for v in items if v.truth(tx)])
        return ListIteratorVariable([v for v in items if fn.call_function(tx, [v], {}).truth(tx)])
    if cls is reversed:
        return ListIteratorVariable(list(reversed(iterate(tx, args[0]))))
    if cls is type and len(args) == 1:
        return tx.wrap(args[0].python_type(), None)
    if cls is object and not args and not kwargs:
        return NewObjectVariable(object, None)
    name = getattr(cls, "__name__", str(cls))
    raise Unsupported(f"creating a `{name}` object cannot be traced")


def str_of_object(tx: Tx, obj: ObjectVariable) -> VariableTracker:
    """``str(obj)``: the class's Python ``__str__`` (or ``__repr__``) inlined."""
    for name in ("__str__", "__repr__"):
        result = obj.call_dunder(tx, name, [])
        if result is not MISSING:
            return result  # type: ignore[no-any-return]
    raise Unsupported(f"`str()` of {obj.describe()} uses object's default repr (an address)")


class ObjectNewVariable(VariableTracker):
    """``object.__new__`` (or ``dict.__new__``): an instance with nothing set, no ``__init__`` run."""

    def __init__(self, value: Any) -> None:
        super().__init__(None)
        self.value = value

    def describe(self) -> str:
        return "`object.__new__`"

    def as_python_constant(self) -> Any:
        return self.value

    def call_function(self, tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
        if not args or not isinstance(args[0], ClassVariable):
            raise Unsupported("object.__new__ without a class")
        cls = args[0].value
        if issubclass(cls, BaseException) or issubclass(cls, torch.nn.Module):
            raise Unsupported(f"`object.__new__({cls.__name__})` inside a compiled region")
        return NewObjectVariable(cls, storage_base(cls))
