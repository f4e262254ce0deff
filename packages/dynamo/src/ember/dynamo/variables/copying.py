"""``copy.copy`` and ``copy.deepcopy`` with their meaning modelled.

Inlined, ``copy.deepcopy`` keys its memo by ``id()`` and rebuilds an object
through ``__reduce_ex__(4)``: C code the tracer cannot follow. Modelled here
instead, for the values whose copy Python makes the plain way:

* immutable constants, classes and functions are their own copy;
* a tuple, list or dict (``dict``/``OrderedDict``) gives a new one of the same
  type whose items are (deep) copies;
* an instance of a user class that copies the default way -- no
  ``__deepcopy__``/``__copy__``/``__setstate__``, ``object``'s
  ``__reduce_ex__``/``__reduce__``/``__getstate__`` and ``__new__``, no slots,
  no copyreg entry, not a dict/list subclass -- gives a new object of that class
  (made in the compiled region) whose attributes are (deep) copies of the
  original's ``__dict__`` items. An object from outside the frame is read
  through its ``__dict__``, so its attributes are guarded as any read of them is.

A value shared twice inside the copied structure is copied once (the memo), as
Python does. Anything else (tensors, modules, classes with their own copy
protocol, a user-provided memo) is a graph break naming the value. Transformers'
``PreTrainedConfig.get_text_config`` deep-copies a legacy encoder-decoder config
on every ``DynamicCache(config=...)``: this is what lets that trace.
"""

from __future__ import annotations

import collections
import copy
import copyreg
import inspect
from typing import TYPE_CHECKING, Any

from ..errors import Unsupported
from .base import VariableTracker
from .classes import ClassVariable, storage_base
from .constant import is_constant_value
from .dicts import DictVariable
from .functions import UserFunctionVariable
from .lists import ListVariable, NamedTupleVariable, TupleVariable
from .objects import NewObjectVariable, ObjectVariable, UserObjectVariable
from .operators import Args, Kwargs

if TYPE_CHECKING:
    from ..translator_core import TranslatorCore as Tx

#: the copy protocol hooks a class must not define for its copy to be its ``__dict__``'s
_OWN_HOOKS = ("__deepcopy__", "__copy__", "__setstate__", "__getnewargs__", "__getnewargs_ex__")
#: ``object``'s methods the copy goes through, which the class must not override
_OBJECT_HOOKS = ("__reduce_ex__", "__reduce__", "__getstate__", "__new__")
#: dict types whose copy is a dict of the same type with copied values
_DICT_TYPES = (dict, collections.OrderedDict)


def _why_not_plain(cls: type) -> str | None:
    """Why instances of ``cls`` are not copied as their ``__dict__``; None if they are."""
    if cls in copyreg.dispatch_table:
        return "has a copyreg reducer"
    for name in _OWN_HOOKS:
        if hasattr(cls, name):
            return f"defines `{name}`"
    for name in _OBJECT_HOOKS:
        if inspect.getattr_static(cls, name, None) is not inspect.getattr_static(object, name):
            return f"overrides `{name}`"
    if not cls.__dictoffset__ or copyreg._slotnames(cls):  # type: ignore[attr-defined]
        return "keeps attributes in slots"
    try:
        if storage_base(cls) is not None:
            return "is a dict subclass"
    except Unsupported:
        return "derives from a C type"
    return None


class _Copier:
    """One ``copy.copy``/``copy.deepcopy`` call: ``deep`` copies items too."""

    def __init__(self, tx: Tx, deep: bool) -> None:
        self.tx = tx
        self.deep = deep
        #: what each value already copied became (keyed by the real object where
        #: the tracker has one, so two trackers of one object give one copy)
        self.memo: dict[int, VariableTracker] = {}

    def item(self, v: VariableTracker) -> VariableTracker:
        return self.copy(v) if self.deep else v

    def copy(self, v: VariableTracker) -> VariableTracker:
        if v.is_python_constant() and is_constant_value(v.as_python_constant()):
            return v
        if isinstance(v, (ClassVariable, UserFunctionVariable)):
            return v
        key = id(getattr(v, "value", v))
        done = self.memo.get(key)
        if done is not None:
            return done
        made = self.make(v)
        self.memo[key] = made
        return made

    def make(self, v: VariableTracker) -> VariableTracker:
        tx = self.tx
        if isinstance(v, NamedTupleVariable):
            return NamedTupleVariable([self.item(i) for i in v.items], v.tuple_type)
        if type(v) is TupleVariable:
            return TupleVariable([self.item(i) for i in v.items])
        if type(v) is ListVariable:
            return ListVariable([self.item(i) for i in v.items])
        if type(v) is DictVariable and v.dict_type in _DICT_TYPES:
            return DictVariable(
                {k: self.item(v.realize(tx, k)) for k in list(v.items)}, dict_type=v.dict_type
            )
        if isinstance(v, ObjectVariable):
            return self.make_object(v)
        what = "copy.deepcopy" if self.deep else "copy.copy"
        raise Unsupported(f"`{what}` of {v.describe()} cannot be traced")

    def make_object(self, v: ObjectVariable) -> VariableTracker:
        tx = self.tx
        cls = v.python_type()
        why = _why_not_plain(cls)
        if why is not None:
            what = "copy.deepcopy" if self.deep else "copy.copy"
            raise Unsupported(f"`{what}` of {v.describe()}: its class {why}")
        if isinstance(v, NewObjectVariable):
            state: dict[str, VariableTracker] = dict(v.attrs.value)
        elif isinstance(v, UserObjectVariable) and v.source is not None:
            if tx.output.side_effects.has_pending_attrs(v):
                raise Unsupported(f"copy of {v.describe()} after the compiled region wrote its attributes")
            found = v.instance_attr(tx, "__dict__")
            if not isinstance(found, DictVariable):
                raise Unsupported(f"the `__dict__` of {v.describe()} cannot be read")
            state = {k: found.realize(tx, k) for k in list(found.items)}
            if not all(isinstance(k, str) for k in state):
                raise Unsupported(f"the `__dict__` of {v.describe()} has keys that are not strings")
        else:
            raise Unsupported(f"copy of {v.describe()} cannot be traced")
        new = NewObjectVariable(cls, None)
        # Registered before the attributes are copied: an attribute that refers back
        # to the object gets the copy, as Python's memo gives it.
        self.memo[id(getattr(v, "value", v))] = new
        tx.output.trail.set(new.attrs, {k: self.item(a) for k, a in state.items()})
        return new


def _copy_call(deep: bool) -> Any:
    def handler(tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
        name = "copy.deepcopy" if deep else "copy.copy"
        if len(args) != 1 or kwargs:
            memo = [*args[1:], *kwargs.values()]
            if not deep or len(memo) != 1 or not (
                memo[0].is_python_constant() and memo[0].as_python_constant() is None
            ):
                raise Unsupported(f"`{name}` with a memo dict cannot be traced")
        return _Copier(tx, deep).copy(args[0])

    return handler


#: the handlers :mod:`.stdlib` registers
COPY_FUNCTIONS: dict[Any, Any] = {copy.copy: _copy_call(False), copy.deepcopy: _copy_call(True)}
