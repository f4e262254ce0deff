"""Instances of Python classes: objects that exist outside the frame
(:class:`UserObjectVariable`) and objects created while tracing
(:class:`NewObjectVariable`: a ``ModelOutput``, a ``DynamicCache``, a
dataclass, any instance whose class Python code defines).

Both follow Python's own protocol (:class:`ObjectVariable`): attribute reads
look at data descriptors of the class, then the instance, then the class,
then ``__getattr__``; a Python ``__getattribute__``/``__setattr__``/dunder
method (``__getitem__``, ``__add__``, ``__iter__``, ``__call__``...) is
inlined like any method; the methods of the builtin bases ember models
(``object``, ``dict``, ``OrderedDict``) are :class:`BaseMethodVariable`\\ s.
An existing object's attribute writes are side effects replayed after the
graph; a new object's attributes and dict items are boxes written through
the trail, and the object is rebuilt (``rebuild.rebuild_object``) where it
leaves the frame.
"""

from __future__ import annotations

import collections
import inspect
import types
from typing import TYPE_CHECKING, Any

from ember.ir import Attr, DictItem, Item, Source

from ..errors import Unsupported, UserRaised
from ..mutable import Box
from ..rebuild import rebuild_object
from .base import VariableTracker
from .constant import ConstantVariable
from .dicts import DictVariable
from .functions import UserFunctionVariable, UserMethodVariable
from .lists import TupleVariable

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx

MISSING: Any = object()

#: the builtin bases whose storage is modelled: a user class may derive from
#: ``object`` and at most one of these
DICT_BASES: tuple[type, ...] = (dict, collections.OrderedDict)
MODELLED_BASES: tuple[type, ...] = (object, *DICT_BASES)

#: ``object.__class__`` (a class overriding it, e.g. a mock, is not read this way)
OBJECT_CLASS_SLOT = object.__dict__["__class__"]
OBJECT_SETATTR = object.__dict__["__setattr__"]

#: dict methods that only read, usable on an existing dict subclass instance
DICT_READS = frozenset(
    {"keys", "values", "items", "get", "__getitem__", "__contains__", "__len__", "__iter__"}
)


def static_lookup(cls: type, name: str) -> Any:
    """``name`` as the class's MRO holds it, descriptors not invoked (or ``MISSING``)."""
    try:
        return inspect.getattr_static(cls, name)
    except AttributeError:
        return MISSING


def is_data_descriptor(attr: Any) -> bool:
    """A class attribute that takes precedence over the instance dict (a property, a slot)."""
    kind = type(attr)
    return hasattr(kind, "__set__") or hasattr(kind, "__delete__")


def base_method_owner(attr: Any) -> type | None:
    """The builtin base (``object``, ``dict``, ``OrderedDict``) a C-level method belongs to."""
    if isinstance(attr, (types.WrapperDescriptorType, types.MethodDescriptorType)):
        owner = attr.__objclass__
        if owner in MODELLED_BASES:
            return owner
    return None


def is_torch_internal_method(fn: types.FunctionType) -> bool:
    """torch's own machinery (``nn.Module`` plumbing), as opposed to the
    methods of torch.nn layers (``_sa_block``), which are traced like user code."""
    mod = fn.__module__ or ""
    if not mod.startswith("torch."):
        return False
    return not (mod.startswith("torch.nn.modules.") and mod != "torch.nn.modules.module")


def class_attribute(tx: Tx, obj: VariableTracker, cls: type, name: str) -> VariableTracker | None:
    """``name`` looked up on ``cls`` for the instance ``obj`` (methods bound to
    it, properties run, classmethods bound to the class, class constants)."""
    # an object made in the frame has no source, but its class may (a new module's)
    cls_src = Attr(obj.source, "__class__") if obj.source is not None else getattr(obj, "class_source", None)
    if name == "__class__" and static_lookup(cls, "__class__") is OBJECT_CLASS_SLOT:
        # the real object's class; with a source it gets its own ID guard
        return tx.wrap(cls, cls_src)
    static = static_lookup(cls, name)
    if static is MISSING:
        return None
    if isinstance(static, staticmethod):
        return tx.wrap(static.__func__, Attr(cls_src, name) if cls_src else None)
    if isinstance(static, classmethod):
        fn = static.__func__
        if isinstance(fn, types.FunctionType):
            return UserMethodVariable(UserFunctionVariable(fn), tx.wrap(cls, cls_src))
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
    owner = base_method_owner(static)
    if owner is not None:
        return BaseMethodVariable(owner, name, obj)
    if hasattr(static, "__get__") and not isinstance(static, (int, float, str, bool, type(None))):
        return None
    if obj.source is not None:
        return tx.wrap(getattr(cls, name), Attr(obj.source, name))
    return tx.wrap(getattr(cls, name), Attr(cls_src, name) if cls_src else None)


class BaseMethodVariable(VariableTracker):
    """A method of a builtin base (``object.__setattr__``, ``dict.keys``,
    ``OrderedDict.__setitem__``) bound to an object tracker, or read from the
    class (``obj`` None: the first argument is the instance)."""

    def __init__(self, owner: type, name: str, obj: VariableTracker | None) -> None:
        super().__init__(None)
        self.owner = owner
        self.name = name
        self.obj = obj

    def describe(self) -> str:
        return f"`{self.owner.__name__}.{self.name}`"

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        obj = self.obj
        if obj is None:
            if not args:
                raise Unsupported(f"{self.describe()} called without an instance")
            obj, *args = args
        if isinstance(obj, ObjectVariable):
            return obj.base_method(tx, self.owner, self.name, args, kwargs)
        if self.name == "__getattribute__" and len(args) == 1:
            return obj.var_getattr(tx, args[0].as_python_constant())
        if self.name == "__setattr__" and len(args) == 2:
            tx.store_attr(obj, args[0].as_python_constant(), args[1])
            return ConstantVariable(None)
        if self.owner is dict or self.owner is collections.OrderedDict:
            return obj.call_method(tx, self.name, args, kwargs)
        raise Unsupported(f"{self.describe()} on {obj.describe()} cannot be traced")

    def reconstruct(self, cg: PyCodegen) -> None:
        method = getattr(self.owner, self.name)
        if self.obj is None:
            cg.load_const(method)
            return
        try:
            plain = static_lookup(self.obj.python_type(), self.name) is method
        except Unsupported:
            plain = False
        if plain:
            self.obj.reconstruct(cg)
            cg.load_attr(self.name)
            return
        # Found past an override (``super().__setitem__`` in a class that defines its
        # own): ``obj.name`` would be that override, so bind the base's method itself.
        cg.load_callable_const(types.MethodType)
        cg.load_const(method)
        self.obj.reconstruct(cg)
        cg.call(2)


class ObjectVariable(VariableTracker):
    """An instance of a user class; subclasses say where its state lives."""

    cls: type

    def python_type(self) -> type:
        return self.cls

    def describe(self) -> str:
        return f"`{self.cls.__name__}` object"

    # --- where the state lives (subclasses) ------------------------------------
    def instance_attr(self, tx: Tx, name: str) -> VariableTracker | None:
        raise NotImplementedError

    def set_instance_attr(self, tx: Tx, name: str, value: VariableTracker) -> None:
        raise NotImplementedError

    def base_method(
        self, tx: Tx, owner: type, name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        if name == "__getattribute__" and len(args) == 1 and not kwargs:
            return self.generic_getattr(tx, args[0].as_python_constant())
        if name == "__setattr__" and len(args) == 2 and not kwargs:
            self.generic_setattr(tx, args[0].as_python_constant(), args[1])
            return ConstantVariable(None)
        if name == "__init__" and owner is object:
            return ConstantVariable(None)
        if name in ("__eq__", "__ne__") and owner is object and len(args) == 1:
            same = args[0] is self
            return ConstantVariable(same if name == "__eq__" else not same)
        raise Unsupported(f"`{owner.__name__}.{name}` on {self.describe()} cannot be traced")

    # --- Python's protocol ----------------------------------------------------------
    def call_dunder(
        self, tx: Tx, name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker] | None = None
    ) -> Any:
        """``type(self).<name>(self, *args)``: a Python method inlined, a base
        method modelled; ``MISSING`` when the class has neither."""
        attr = static_lookup(self.cls, name)
        if isinstance(attr, types.FunctionType):
            return UserFunctionVariable(attr).call_function(tx, [self, *args], kwargs or {})
        if attr is MISSING:
            return MISSING
        owner = base_method_owner(attr)
        if owner is object:
            return MISSING  # object's default behaviour
        if owner is not None:
            return self.base_method(tx, owner, name, args, kwargs or {})
        raise Unsupported(f"`{name}` of {self.describe()} is not Python code ember can trace")

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        hook = static_lookup(self.cls, "__getattribute__")
        if base_method_owner(hook) is not None:  # object's (dict's is the same)
            return self.generic_getattr(tx, name)
        if isinstance(hook, types.FunctionType):
            return UserFunctionVariable(hook).call_function(tx, [self, ConstantVariable(name)], {})
        raise Unsupported(f"attribute `{name}` of {self.describe()}: a C-level __getattribute__")

    def generic_getattr(self, tx: Tx, name: str) -> VariableTracker:
        """``object.__getattribute__``, then the class's ``__getattr__``."""
        static = static_lookup(self.cls, name)
        if name == "__dict__":
            found = self.instance_attr(tx, name)
            if found is None:
                raise Unsupported(f"{self.describe()} has no `__dict__` (AttributeError)")
            return found
        if static is not MISSING and is_data_descriptor(static) and not isinstance(
            static, types.MemberDescriptorType
        ):
            found = class_attribute(tx, self, self.cls, name)
            if found is None:
                raise Unsupported(f"attribute `{name}` of {self.describe()} cannot be traced")
            return found
        found = self.instance_attr(tx, name)
        if found is not None:
            return found
        if static is not MISSING and not isinstance(static, types.MemberDescriptorType):
            found = class_attribute(tx, self, self.cls, name)
            if found is None:
                raise Unsupported(f"attribute `{name}` of {self.describe()} cannot be traced")
            return found
        fallback = static_lookup(self.cls, "__getattr__")
        if isinstance(fallback, types.FunctionType):
            return UserFunctionVariable(fallback).call_function(tx, [self, ConstantVariable(name)], {})
        missing = f"{self.describe()} has no attribute `{name}` (AttributeError)"
        if self.fresh:  # made in the frame: every attribute it has is known
            raise UserRaised(AttributeError, missing)
        raise Unsupported(missing)

    def has_attr(self, tx: Tx, name: str) -> bool | None:
        """``hasattr(self, name)`` where it is known without running code, else None."""
        if base_method_owner(static_lookup(self.cls, "__getattribute__")) is None:
            return None
        if static_lookup(self.cls, name) is not MISSING:
            return True
        if self.instance_attr(tx, name) is not None:
            return True
        if static_lookup(self.cls, "__getattr__") is not MISSING:
            return None
        return False

    def store_attr(self, tx: Tx, name: str, value: VariableTracker) -> None:
        hook = static_lookup(self.cls, "__setattr__")
        if base_method_owner(hook) is not None:  # object's (dict's is the same)
            self.generic_setattr(tx, name, value)
            return
        if isinstance(hook, types.FunctionType):
            UserFunctionVariable(hook).call_function(tx, [self, ConstantVariable(name), value], {})
            return
        raise Unsupported(f"attribute write `{name}` on {self.describe()}: a C-level __setattr__")

    def generic_setattr(self, tx: Tx, name: str, value: VariableTracker) -> None:
        static = static_lookup(self.cls, name)
        if isinstance(static, property):
            if not isinstance(static.fset, types.FunctionType):
                raise Unsupported(f"property `{name}` of {self.describe()} has no setter (AttributeError)")
            UserFunctionVariable(static.fset).call_function(tx, [self, value], {})
            return
        if static is not MISSING and is_data_descriptor(static) and not isinstance(
            static, types.MemberDescriptorType
        ):
            raise Unsupported(f"attribute write `{name}` through a descriptor of {self.describe()}")
        self.set_instance_attr(tx, name, value)

    def truth(self, tx: Tx) -> bool:
        result = self.call_dunder(tx, "__bool__", [])
        if result is MISSING:
            result = self.call_dunder(tx, "__len__", [])
        if result is MISSING:
            return True
        return bool(result.truth(tx))

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        result = self.call_dunder(tx, "__call__", args, kwargs)
        if result is MISSING:
            raise Unsupported(f"{self.describe()} is not callable (TypeError)")
        return result  # type: ignore[no-any-return]

    def unpack(self, tx: Tx) -> list[VariableTracker]:
        it = self.call_dunder(tx, "__iter__", [])
        if it is not MISSING:
            return it.unpack(tx)  # type: ignore[no-any-return]
        if static_lookup(self.cls, "__getitem__") is not MISSING:
            return self.sequence_items(tx)
        raise Unsupported(f"{self.describe()} is not iterable (TypeError)")

    def sequence_items(self, tx: Tx) -> list[VariableTracker]:
        """Python's old iteration protocol: ``self[0]``, ``self[1]``, ... until
        ``__getitem__`` raises ``IndexError`` (having changed nothing)."""
        items: list[VariableTracker] = []
        while len(items) <= tx.options.max_loop_unroll:
            writes = tx.output.trail.writes
            try:
                items.append(self.getitem(tx, ConstantVariable(len(items))))
            except UserRaised as e:
                if issubclass(e.exc_type, (IndexError, StopIteration)) and tx.output.trail.writes == writes:
                    return items
                raise
        raise Unsupported(f"iterating over {self.describe()}: more than max_loop_unroll items")

    def getitem(self, tx: Tx, key: VariableTracker) -> VariableTracker:
        result = self.call_dunder(tx, "__getitem__", [key])
        if result is MISSING:
            raise Unsupported(f"{self.describe()} is not subscriptable (TypeError)")
        return result  # type: ignore[no-any-return]


class UserObjectVariable(ObjectVariable):
    """An instance of a user class that exists outside the frame."""

    def __init__(self, value: Any, source: Source | None = None) -> None:
        super().__init__(source)
        self.value = value
        self.cls = type(value)

    def instance_attr(self, tx: Tx, name: str) -> VariableTracker | None:
        pending = tx.output.side_effects.pending_attr(self, name)
        if pending is not None:
            return pending
        try:
            inst_dict = object.__getattribute__(self.value, "__dict__")
        except AttributeError:
            inst_dict = None
        if name == "__dict__" and isinstance(inst_dict, dict):
            return tx.wrap(inst_dict, Attr(self.source, name) if self.source else None)
        if isinstance(inst_dict, dict) and name in inst_dict:
            return tx.wrap(inst_dict[name], Attr(self.source, name) if self.source else None)
        slot = static_lookup(self.cls, name)
        if isinstance(slot, types.MemberDescriptorType):
            try:
                value = slot.__get__(self.value, self.cls)
            except AttributeError:
                return None
            return tx.wrap(value, Attr(self.source, name) if self.source else None)
        return None

    def set_instance_attr(self, tx: Tx, name: str, value: VariableTracker) -> None:
        if self.source is None:
            raise Unsupported(f"attribute write on {self.describe()} reached without a source")
        # A class with its own __setattr__ got here through it (traced) or past it
        # (``super().__setattr__``): the write is object's, and so is its replay.
        raw = static_lookup(self.cls, "__setattr__") is not OBJECT_SETATTR
        tx.output.side_effects.store_attr(self, name, value, raw)

    def base_method(
        self, tx: Tx, owner: type, name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        if owner in DICT_BASES and name in DICT_READS and not kwargs:
            return self.dict_read(tx, name, args)
        return super().base_method(tx, owner, name, args, kwargs)

    def dict_read(self, tx: Tx, name: str, args: list[VariableTracker]) -> VariableTracker:
        """A read of a ``dict`` subclass instance's own items, under a guard on
        its keys. Each value is read from a source that gives the same object:
        the item (when ``__getitem__`` is dict's), the attribute holding it
        (``ModelOutput`` keeps every item as an attribute too), else the item as
        ``dict.__getitem__`` reads it, past the class's own ``__getitem__``
        (transformers' ``ACT2FN`` builds a module from each item it returns)."""
        real, src = self.value, self.source
        if src is None or not all(type(k) in (str, int) for k in real):
            raise Unsupported(f"`dict.{name}` of {self.describe()} cannot be traced")
        tx.output.guards.add_dict_keys(src, dict(real))

        def value_of(key: Any) -> VariableTracker:
            value = dict.__getitem__(real, key)
            if static_lookup(self.cls, "__getitem__") is dict.__getitem__:
                return tx.wrap(value, Item(src, key))
            if isinstance(key, str) and getattr(real, "__dict__", {}).get(key, MISSING) is value:
                return tx.wrap(value, Attr(src, key))
            return tx.wrap(value, DictItem(src, key))

        keys = list(dict.keys(real))
        if name in ("keys", "__iter__"):
            return TupleVariable([ConstantVariable(k) for k in keys])
        if name == "__len__":
            return ConstantVariable(len(keys))
        if name == "values":
            return TupleVariable([value_of(k) for k in keys])
        if name == "items":
            return TupleVariable([TupleVariable([ConstantVariable(k), value_of(k)]) for k in keys])
        key = args[0].as_python_constant() if args else None
        if name == "__contains__":
            return ConstantVariable(key in keys)
        if key in keys:
            return value_of(key)
        if name == "get":
            return args[1] if len(args) > 1 else ConstantVariable(None)
        raise Unsupported(f"{self.describe()}: key {key!r} is missing (KeyError)")


class NewObjectVariable(ObjectVariable):
    """An instance of a user class created while tracing. Its attributes (and,
    for a ``dict`` subclass, its items) are boxes: every alias sees a write,
    and a failed instruction's writes are undone. Nothing outside the frame
    can hold it, so it needs no guard."""

    fresh = True

    def __init__(self, cls: type, dict_base: type | None) -> None:
        super().__init__(None)
        self.cls = cls
        self.attrs: Box[dict[str, VariableTracker]] = Box({})
        self.dict_base = dict_base
        #: the items of a dict subclass instance, as a dict tracker
        self.items: DictVariable | None = (
            DictVariable({}, dict_type=dict_base) if dict_base is not None else None
        )

    def describe(self) -> str:
        return f"`{self.cls.__name__}` object (made in the compiled region)"

    def __repr__(self) -> str:
        return f"<NewObject {self.cls.__name__}>"

    def instance_attr(self, tx: Tx, name: str) -> VariableTracker | None:
        found = self.attrs.value.get(name)
        if found is not None:
            return found
        if name == "__dict__" and self.cls.__dictoffset__:
            return DictVariable({}, box=self.attrs)
        return None

    def set_instance_attr(self, tx: Tx, name: str, value: VariableTracker) -> None:
        if not self.cls.__dictoffset__ and not isinstance(
            static_lookup(self.cls, name), types.MemberDescriptorType
        ):
            raise Unsupported(f"{self.describe()} has no attribute slot `{name}` (AttributeError)")
        tx.output.trail.set(self.attrs, {**self.attrs.value, name: value})

    def delete_attr(self, tx: Tx, name: str) -> None:
        if name not in self.attrs.value:
            raise Unsupported(f"`del` of missing attribute `{name}` of {self.describe()} (AttributeError)")
        attrs = dict(self.attrs.value)
        del attrs[name]
        tx.output.trail.set(self.attrs, attrs)

    def del_attr(self, tx: Tx, name: str) -> None:
        """``del obj.name`` / ``delattr(obj, name)``: the class's ``__delattr__``
        traced where it is Python code, else object's."""
        hook = static_lookup(self.cls, "__delattr__")
        if isinstance(hook, types.FunctionType):
            UserFunctionVariable(hook).call_function(tx, [self, ConstantVariable(name)], {})
        elif base_method_owner(hook) is not None:
            self.delete_attr(tx, name)
        else:
            raise Unsupported(f"`del` of attribute `{name}` of {self.describe()}: a C-level __delattr__")

    def base_method(
        self, tx: Tx, owner: type, name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        if name == "__delattr__" and owner is object and len(args) == 1:
            self.delete_attr(tx, args[0].as_python_constant())
            return ConstantVariable(None)
        if owner in DICT_BASES and self.items is not None:
            if name == "__init__":
                return self.items.call_method(tx, "update", args, kwargs)
            if name == "__iter__" and not args:
                return tx.get_iter(self.items)
            return self.items.call_method(tx, name, args, kwargs)
        return super().base_method(tx, owner, name, args, kwargs)

    def reconstruct(self, cg: PyCodegen) -> None:
        cg.reconstruct_once(self, lambda: self._build(cg))

    def _build(self, cg: PyCodegen) -> None:
        cg.load_callable_const(rebuild_object)
        cg.load_const(self.cls)
        cg.load_const(self.dict_base)
        pairs = self.items.items if self.items is not None else {}
        for key, value in pairs.items():
            cg.load_const(key)
            value.reconstruct(cg)
            cg.build(tuple, 2)
        cg.build(tuple, len(pairs))
        attrs = self.attrs.value
        for name, value in attrs.items():
            cg.load_const(name)
            value.reconstruct(cg)
        cg.build(dict, len(attrs))
        cg.call(4)


class ExceptionVariable(VariableTracker):
    """An exception object made while tracing (``IndexError("...")``): raising
    it is :class:`UserRaised`."""

    fresh = True

    def __init__(self, cls: type[BaseException], args: list[VariableTracker]) -> None:
        super().__init__(None)
        self.cls = cls
        self.args = tuple(args)

    def python_type(self) -> type:
        return self.cls

    def describe(self) -> str:
        return f"`{self.cls.__name__}` exception"

    def message(self) -> str:
        texts = [repr(a.as_python_constant()) if a.is_python_constant() else a.describe() for a in self.args]
        return f"{self.cls.__name__}({', '.join(texts)})"

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        if name == "args":
            return TupleVariable(list(self.args))
        return super().var_getattr(tx, name)

    def reconstruct(self, cg: PyCodegen) -> None:
        def build() -> None:
            cg.load_callable_const(self.cls)
            for a in self.args:
                a.reconstruct(cg)
            cg.call(len(self.args))

        cg.reconstruct_once(self, build)
