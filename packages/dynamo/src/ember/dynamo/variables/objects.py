"""User-defined objects, classes and Python modules (``math``, ``torch.nn``).

Attribute reads look at the real object (statically, without running
``__getattr__``/descriptors we do not understand) and wrap what they find
with a source, so the builder guards exactly what was read. Attribute writes
are recorded as side effects and replayed after the graph runs. Calling a
class constructs a builtin type (``list(...)``, ``zip(...)``...): the
constructors are here, beside :class:`ClassVariable`.
"""

from __future__ import annotations

import inspect
import types
from typing import TYPE_CHECKING, Any

import torch

from ember.ir import Attr, Item, Source

from ..errors import Unsupported
from .base import VariableTracker
from .constant import ConstantVariable
from .dicts import DictVariable
from .functions import UserFunctionVariable, UserMethodVariable
from .lazy import LazyVariable
from .lists import ListIteratorVariable, ListVariable, TupleVariable
from .operators import Args, Kwargs, all_const, fold, iterate
from .tensor import TensorVariable

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx


#: ``object.__class__`` (a class overriding it, e.g. a mock, is not read this way)
OBJECT_CLASS_SLOT = object.__dict__["__class__"]


def class_attribute(tx: Tx, obj: VariableTracker, value: Any, name: str) -> VariableTracker | None:
    """Look ``name`` up on ``type(value)`` (methods, properties, class constants)."""
    cls = type(value)
    cls_src = Attr(obj.source, "__class__") if obj.source is not None else None
    if name == "__class__" and inspect.getattr_static(cls, "__class__") is OBJECT_CLASS_SLOT:
        # the real object's class; with a source it gets its own ID guard
        return tx.wrap(cls, cls_src)
    try:
        static = inspect.getattr_static(cls, name)
    except AttributeError:
        return None
    if isinstance(static, staticmethod):
        return tx.wrap(static.__func__, Attr(cls_src, name) if cls_src else None)
    if isinstance(static, classmethod):
        fn = static.__func__
        if isinstance(fn, types.FunctionType):
            return UserMethodVariable(UserFunctionVariable(fn), ClassVariable(cls, cls_src))
        return None
    if isinstance(static, property):
        if isinstance(static.fget, types.FunctionType):
            return UserFunctionVariable(static.fget).call_function(tx, [obj], {})
        return None
    if isinstance(static, types.FunctionType):
        if is_torch_internal_method(static):
            return None
        return UserMethodVariable(
            UserFunctionVariable(static, Attr(cls_src, name) if cls_src else None), obj
        )
    if hasattr(static, "__get__") and not isinstance(static, (int, float, str, bool, type(None))):
        return None
    return tx.wrap(getattr(value, name), Attr(obj.source, name) if obj.source else None)


def is_torch_internal_method(fn: types.FunctionType) -> bool:
    """torch's own machinery (``nn.Module`` plumbing), as opposed to the
    methods of torch.nn layers (``_sa_block``), which are traced like user code."""
    mod = fn.__module__ or ""
    if not mod.startswith("torch."):
        return False
    return not (mod.startswith("torch.nn.modules.") and mod != "torch.nn.modules.module")


class UserObjectVariable(VariableTracker):
    """An instance of a user class that exists outside the frame."""

    def __init__(self, value: Any, source: Source | None = None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def describe(self) -> str:
        return f"`{type(self.value).__name__}` object"

    def truth(self, tx: Tx) -> bool:
        cls = type(self.value)
        if getattr(cls, "__bool__", None) is None and getattr(cls, "__len__", None) is None:
            return True
        raise Unsupported(f"truth value of {self.describe()} uses a custom __bool__/__len__")

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        pending = tx.output.side_effects.pending_attr(self, name)
        if pending is not None:
            return pending
        inst_dict = getattr(self.value, "__dict__", None)
        if isinstance(inst_dict, dict) and name in inst_dict:
            return tx.wrap(inst_dict[name], Attr(self.source, name) if self.source else None)
        found = class_attribute(tx, self, self.value, name)
        if found is not None:
            return found
        raise Unsupported(f"attribute `{name}` of {self.describe()} cannot be traced")

    def store_attr(self, tx: Tx, name: str, value: VariableTracker) -> None:
        if self.source is None:
            raise Unsupported(f"attribute write on {self.describe()} created while tracing")
        tx.output.side_effects.store_attr(self, name, value)


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
        if isinstance(static, (staticmethod, classmethod)):
            return tx.wrap(getattr(self.value, name), None)
        return tx.wrap(getattr(self.value, name), Attr(self.source, name) if self.source else None)

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        return construct_builtin_type(tx, self.value, args, kwargs)

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
    """``super()`` / ``super(Cls, obj)`` inside a method: attribute lookups
    start after ``cls`` in ``type(obj)``'s MRO; methods found bind ``obj``."""

    def __init__(self, cls: type, obj: VariableTracker) -> None:
        super().__init__(None)
        self.cls = cls
        self.obj = obj

    def describe(self) -> str:
        return f"super({self.cls.__name__})"

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        real = getattr(self.obj, "value", None)
        if real is None:
            raise Unsupported(f"super() over {self.obj.describe()}")
        mro = type(real).__mro__
        try:
            start = mro.index(self.cls) + 1
        except ValueError as e:
            raise Unsupported(f"super(): {self.cls.__name__} is not in the MRO") from e
        for klass in mro[start:]:
            if klass is dict and name in DictBaseMethodVariable.METHODS:
                return DictBaseMethodVariable(self.obj, name)
            if name in klass.__dict__:
                found = klass.__dict__[name]
                if isinstance(found, types.FunctionType) and not is_torch_internal_method(found):
                    return UserMethodVariable(UserFunctionVariable(found), self.obj)
                if isinstance(found, staticmethod):
                    return tx.wrap(found.__func__, None)
                if isinstance(found, (int, float, str, bool, type(None))):
                    return tx.wrap(found, None)
                break
        raise Unsupported(f"attribute `{name}` of {self.describe()} cannot be traced")


class DictBaseMethodVariable(VariableTracker):
    """``super().get(key)`` (and ``__getitem__``, ``__contains__``) on an
    instance of a ``dict`` subclass: ``dict``'s own lookup, read from the real
    object under a guard on its keys. Only for subclasses that keep ``dict``'s
    ``keys`` and ``__getitem__``, which the guards themselves use."""

    METHODS = frozenset({"get", "__getitem__", "__contains__"})

    def __init__(self, obj: VariableTracker, name: str) -> None:
        super().__init__(None)
        self.obj = obj
        self.name = name

    def describe(self) -> str:
        return f"dict.{self.name} of {self.obj.describe()}"

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        real = getattr(self.obj, "value", None)
        src = self.obj.source
        cls = type(real)
        if (
            not isinstance(real, dict)
            or src is None
            or kwargs
            or not 1 <= len(args) <= (2 if self.name == "get" else 1)
            or inspect.getattr_static(cls, "keys") is not dict.keys
            or inspect.getattr_static(cls, "__getitem__") is not dict.__getitem__
            or not all(type(k) in (str, int) for k in real)
        ):
            raise Unsupported(f"calling {self.describe()} cannot be traced")
        key = args[0].as_python_constant()
        if type(key) not in (str, int):
            raise Unsupported(f"calling {self.describe()} with a non-str/int key")
        tx.output.guards.add_dict_keys(src, real)
        present = dict.__contains__(real, key)
        if self.name == "__contains__":
            return ConstantVariable(present)
        if present:
            return tx.wrap(dict.__getitem__(real, key), Item(src, key))
        if self.name == "get":
            return args[1] if len(args) > 1 else ConstantVariable(None)
        raise Unsupported(f"{self.describe()}: key {key!r} is missing (KeyError)")


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
    if isinstance(obj, LazyVariable):
        obj = obj.realize(tx)
        tx.symbolic_locals[first] = obj
    return SuperVariable(cls_var.as_python_constant(), obj)


def class_text(tx: Tx, var: Any, fn: Any) -> VariableTracker:
    """``str(cls)`` of a plain class: ``<class 'mod.Qual'>``.

    The class is pinned by its ID guard, but ``__module__`` and
    ``__qualname__`` are writable, so they are guarded by value too; a
    metaclass with its own ``__repr__``/``__str__``, or a class reached
    without a source, is a graph break."""
    cls = var.value
    meta: Any = type(cls)
    plain: Any = (type.__repr__, object.__str__)
    if var.source is None or meta.__repr__ is not plain[0] or meta.__str__ is not plain[1]:
        raise Unsupported(f"`{fn.__name__}()` of {var.describe()} cannot be traced")
    g = tx.output.guards
    for attr in ("__module__", "__qualname__"):
        value = getattr(cls, attr, None)
        if not isinstance(value, str):
            raise Unsupported(f"`{fn.__name__}()` of {var.describe()} cannot be traced")
        g.add_constant(Attr(var.source, attr), value)
    return ConstantVariable(fn(cls))


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
    if cls in (int, float, bool, str, complex) and args and isinstance(args[0], TensorVariable):
        raise Unsupported(
            f"`{cls.__name__}(tensor)` needs the tensor's data, which is only known at run time"
        )
    if cls is bool and len(args) == 1 and not kwargs:
        return ConstantVariable(args[0].truth(tx))
    if cls is str and len(args) == 1 and not kwargs and isinstance(args[0], ClassVariable):
        return class_text(tx, args[0], cls)
    if cls in (int, float, bool, str, complex, range, slice, frozenset, torch.Size, torch.device,
               torch.finfo, torch.iinfo) and all_const(
        [*args, *kwargs.values()]
    ):
        return fold(tx, cls, args, kwargs)
    if cls is enumerate:
        start = args[1].as_python_constant() if len(args) > 1 else 0
        start = kwargs["start"].as_python_constant() if "start" in kwargs else start
        items = iterate(tx, args[0])
        return ListIteratorVariable(
            [TupleVariable([ConstantVariable(i + start), v]) for i, v in enumerate(items)]
        )
    if cls is zip:
        lists = [iterate(tx, a) for a in args]
        strict = bool(kwargs["strict"].as_python_constant()) if "strict" in kwargs else False
        if strict and len({len(x) for x in lists}) > 1:
            raise Unsupported("zip(strict=True) over iterables of different lengths")
        return ListIteratorVariable([TupleVariable(list(t)) for t in zip(*lists)])
    if cls is reversed:
        return ListIteratorVariable(list(reversed(iterate(tx, args[0]))))
    if cls is type and len(args) == 1:
        return tx.wrap(args[0].python_type(), None)
    if cls is object and not args:
        raise Unsupported("creating `object()` inside a compiled region")
    name = getattr(cls, "__name__", str(cls))
    raise Unsupported(f"creating a `{name}` object cannot be traced")
