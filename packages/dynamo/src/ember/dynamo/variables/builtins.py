"""Python builtins and the ``operator`` module.

On constants they fold; on tensors the operators become graph nodes; on
lists/tuples/dicts they work on the trackers. Anything else is a named
``Unsupported`` (``print``, ``open``, ``id``, ...).
"""

from __future__ import annotations

import builtins
import collections.abc
import functools
import inspect
import operator
import types
from typing import TYPE_CHECKING, Any

import torch

from ember.ir import Attr

from ..errors import MissingKey, Unsupported, UserRaised
from .base import VariableTracker
from .classes import BUILTIN_CONSTRUCTORS, construct_builtin_type, make_super
from .constant import ConstantVariable
from .dicts import DictVariable, dict_key
from .iterators import EndlessIteratorVariable
from .lists import BaseListVariable, ListIteratorVariable, ListVariable, TupleVariable
from .objects import MISSING, NewObjectVariable, ObjectVariable
from .operators import (
    ARITH,
    Args,
    Kwargs,
    all_const,
    apply_operator,
    fold,
    has_sym,
    has_tensor,
    iterate,
    less_than,
    same_value,
)
from .sets import SetVariable
from .sym import SymNodeVariable
from .tensor import TensorVariable, size_item

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx



def contains(tx: Tx, container: VariableTracker, item: VariableTracker) -> VariableTracker:
    if isinstance(container, DictVariable):
        return ConstantVariable(dict_key(item) in container.items)
    if isinstance(container, BaseListVariable):
        for v in container.items:
            same = same_value(v, item)
            if same is None:
                raise Unsupported(f"`in` test comparing {item.describe()} with {v.describe()}")
            if same:
                return ConstantVariable(True)
        return ConstantVariable(False)
    if isinstance(container, SetVariable):
        return ConstantVariable(container.contains(item))
    if container.is_python_constant() and item.is_python_constant():
        return fold(tx, operator.contains, [container, item])
    if isinstance(container, TensorVariable):
        return tx.output.create_op("call_method", "__contains__", [container, item], {})
    if isinstance(container, ObjectVariable):
        return user_contains(tx, container, item)
    raise Unsupported(f"`in` test on {container.describe()}")


def user_contains(tx: Tx, container: Any, item: VariableTracker) -> VariableTracker:
    """``item in obj`` for a Python class: its own ``__contains__`` inlined,
    or ``Mapping.__contains__`` (``obj[item]`` without ``KeyError``) modelled
    over an inlined Python ``__getitem__``."""
    cls = container.python_type()
    has = inspect.getattr_static(cls, "__contains__", None)
    get = inspect.getattr_static(cls, "__getitem__", None)
    if has is not collections.abc.Mapping.__contains__:
        result = container.call_dunder(tx, "__contains__", [item])
        if result is not MISSING:
            return ConstantVariable(result.truth(tx))
    if has is collections.abc.Mapping.__contains__ and isinstance(get, types.FunctionType):
        writes, grad = tx.output.trail.writes, torch.is_grad_enabled()
        try:
            container.call_method(tx, "__getitem__", [item], {})
        except MissingKey as e:
            if tx.output.trail.writes != writes or torch.is_grad_enabled() != grad:
                raise Unsupported(
                    f"`in` test on {container.describe()}: its __getitem__ changed state "
                    "before raising KeyError"
                ) from e
            return ConstantVariable(False)
        return ConstantVariable(True)
    raise Unsupported(f"`in` test on {container.describe()}")


def isinstance_check(tx: Tx, obj: VariableTracker, cls: VariableTracker) -> VariableTracker:
    if not cls.is_python_constant():
        raise Unsupported("isinstance() with a non-constant class")
    want = cls.as_python_constant()
    t = obj.python_type()
    if isinstance(obj, TensorVariable) and want is torch.nn.Parameter:
        return ConstantVariable(obj.cls is torch.nn.Parameter)
    try:
        return ConstantVariable(issubclass(t, want))
    except TypeError as e:
        raise Unsupported(f"isinstance() raised TypeError: {e}") from e


def builtin_len(tx: Tx, obj: VariableTracker) -> VariableTracker:
    if isinstance(obj, (BaseListVariable, DictVariable, SetVariable)):
        return ConstantVariable(len(obj.items))
    if isinstance(obj, ObjectVariable):
        result = obj.call_dunder(tx, "__len__", [])
        if result is MISSING:
            raise Unsupported(f"{obj.describe()} has no len() (TypeError)")
        return result  # type: ignore[no-any-return]
    if isinstance(obj, TensorVariable):
        if obj.example.dim() == 0:
            raise Unsupported("len() of a 0-d tensor")
        return size_item(tx, obj, 0)
    if obj.is_python_constant():
        return fold(tx, len, [obj])
    return obj.call_method(tx, "__len__", [], {})


def builtin_sum(tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
    items = iterate(tx, args[0])
    start = args[1] if len(args) > 1 else kwargs.get("start", ConstantVariable(0))
    acc = start
    for it in items:
        acc = apply_operator(tx, operator.add, [acc, it])
    return acc


def builtin_minmax(tx: Tx, fn: Any, args: Args, kwargs: Kwargs) -> VariableTracker:
    items = iterate(tx, args[0]) if len(args) == 1 else list(args)
    if all_const(items) and all_const(list(kwargs.values())):
        return fold(tx, fn, [TupleVariable(items)], kwargs)
    if has_sym(items) and not kwargs:
        # decided now, with a guard on the comparison: the graph keeps the chosen size
        return tx.output.create_op("call_function", fn, items, {})
    if not has_tensor(items) or "key" in kwargs:
        # Python values (or a key function): compare the way min/max do
        if not items:
            if "default" in kwargs:
                return kwargs["default"]
            raise Unsupported(f"`{fn.__name__}()` of an empty sequence (ValueError)")
        keys = [key_of(tx, kwargs.get("key"), v) for v in items]
        best = 0
        for i in range(1, len(items)):
            better = less_than(tx, keys[i], keys[best]) if fn is min else less_than(tx, keys[best], keys[i])
            if better:
                best = i
        return items[best]
    if len(items) == 2 and not kwargs and has_tensor(items):
        torch_fn = torch.maximum if fn is builtins.max else torch.minimum
        a, b = items
        if isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
            return tx.output.create_op("call_function", torch_fn, [a, b], {})
        t, c = (a, b) if isinstance(a, TensorVariable) else (b, a)
        method = "clamp_min" if fn is builtins.max else "clamp_max"
        return tx.output.create_op("call_method", method, [t, c], {})
    raise Unsupported(f"`{fn.__name__}()` over non-constant values")


def key_of(tx: Tx, key: VariableTracker | None, v: VariableTracker) -> VariableTracker:
    if key is None or (key.is_python_constant() and key.as_python_constant() is None):
        return v
    return key.call_function(tx, [v], {})


def builtin_sorted(tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
    """``sorted(items, key=..., reverse=...)`` over trackers: the comparisons
    Python would make, made now (stable, as Python's sort)."""
    if len(args) != 1 or set(kwargs) - {"key", "reverse"}:
        raise Unsupported("sorted() with unexpected arguments")
    items = iterate(tx, args[0])
    keys = [key_of(tx, kwargs.get("key"), v) for v in items]
    reverse = bool(kwargs["reverse"].as_python_constant()) if "reverse" in kwargs else False

    def compare(i: int, j: int) -> int:
        if less_than(tx, keys[i], keys[j]):
            return -1
        if less_than(tx, keys[j], keys[i]):
            return 1
        return 0

    order = sorted(range(len(items)), key=functools.cmp_to_key(compare), reverse=reverse)
    return ListVariable([items[i] for i in order])


def builtin_any_all(tx: Tx, fn: Any, arg: VariableTracker) -> VariableTracker:
    """``any``/``all``, stopping at the first item that decides, as Python does."""
    decisive = fn is any
    for item in iterate(tx, arg):
        if item.truth(tx) == decisive:
            return ConstantVariable(decisive)
    return ConstantVariable(not decisive)


def builtin_getattr(tx: Tx, args: Args) -> VariableTracker:
    obj, name = args[0], args[1].as_python_constant()
    if len(args) == 3:
        if has_attr(tx, obj, name):
            return obj.var_getattr(tx, name)
        return args[2]
    return obj.var_getattr(tx, name)


def has_attr(tx: Tx, obj: VariableTracker, name: str) -> bool:
    if isinstance(obj, TensorVariable):
        return hasattr(obj.example, name)
    if obj.is_python_constant():
        return hasattr(obj.as_python_constant(), name)
    if isinstance(obj, NewObjectVariable):
        known = obj.has_attr(tx, name)
        if known is None:  # its class's __getattribute__/__getattr__ decide: traced
            return _getattr_succeeds(tx, obj, name)
        return known
    if isinstance(obj, (BaseListVariable, DictVariable, SetVariable)):
        return hasattr(obj.python_type(), name)
    real = getattr(obj, "value", None)
    if real is not None and obj.source is not None:
        pending = tx.output.side_effects.pending_attr(obj, name)
        if pending is not None:
            return True
        guard_hasattr(tx, obj.source, real)
        return hasattr(real, name)
    raise Unsupported(f"hasattr() on {obj.describe()}")


def _getattr_succeeds(tx: Tx, obj: VariableTracker, name: str) -> bool:
    """``hasattr`` as Python computes it: ``getattr`` traced, an ``AttributeError``
    that changed nothing on the way is False."""
    writes = tx.output.trail.writes
    try:
        obj.var_getattr(tx, name)
    except UserRaised as e:
        if issubclass(e.exc_type, AttributeError) and tx.output.trail.writes == writes:
            return False
        raise
    return True


def guard_hasattr(tx: Tx, source: Any, real: Any) -> None:
    """``hasattr(obj, name)`` depends on the class and on which names the
    instance holds: guard the type and the keys of the instance dicts."""
    g = tx.output.guards
    g.add_type(source, real)
    inst = getattr(real, "__dict__", None)
    if isinstance(inst, dict) and all(isinstance(k, str) for k in inst):
        g.add_dict_keys(Attr(source, "__dict__"), inst)
    if isinstance(real, torch.nn.Module):
        for sub in ("_parameters", "_buffers", "_modules"):
            g.add_dict_keys(Attr(source, sub), getattr(real, sub))


def builtin_on_sizes(tx: Tx, fn: Any, args: Args, kwargs: Kwargs) -> VariableTracker:
    """A builtin applied to symbolic sizes: ``int(n)`` keeps them symbolic; anything else
    (``range(n)``, ``math.sqrt(n)``, ``str(n)``) needs plain values, so the sizes are
    specialized to their current values (guarded)."""
    if fn is int and len(args) == 1 and not kwargs and args[0].python_type() is int:
        return args[0]
    spec = [a.specialized() if isinstance(a, SymNodeVariable) else a for a in args]
    kw = {k: v.specialized() if isinstance(v, SymNodeVariable) else v for k, v in kwargs.items()}
    if fn in BUILTIN_CONSTRUCTORS:
        return construct_builtin_type(tx, fn, spec, kw)
    return fold(tx, fn, spec, kw)


class BuiltinVariable(VariableTracker):
    def __init__(self, value: Any) -> None:
        super().__init__(None)
        self.value = value

    def describe(self) -> str:
        return f"builtin `{getattr(self.value, '__name__', self.value)}`"

    def python_type(self) -> type:
        return type(self.value)

    def as_python_constant(self) -> Any:
        return self.value

    def reconstruct(self, cg: PyCodegen) -> None:
        cg.load_const(self.value)

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        attr = getattr(self.value, name)
        if _builtin_classmethod(attr):
            # ``dict.fromkeys``, ``int.from_bytes``: a new bound method on every read, not an
            # object to wrap or guard (the type it is read from is); the call builds the
            # value (transformers' cache layers: ``dict.fromkeys(range(n))``)
            return BuiltinVariable(attr)
        return tx.wrap(attr, None)

    def call_function(self, tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
        fn = self.value
        if fn in ARITH and not kwargs:
            return apply_operator(tx, fn, args)
        if _builtin_classmethod(fn):
            if fn.__self__ is dict and fn.__name__ == "fromkeys" and 1 <= len(args) <= 2 and not kwargs:
                value = args[1] if len(args) == 2 else ConstantVariable(None)
                d = DictVariable({})
                d.write(tx, {dict_key(k): value for k in iterate(tx, args[0])})
                return d
            if fn.__self__ in _IMMUTABLE_TYPES and all_const([*args, *kwargs.values()]):
                return fold(tx, fn, args, kwargs)  # ``int.from_bytes(b"..", "big")``
        if fn is operator.getitem and len(args) == 2:
            return tx.getitem(args[0], args[1])
        if fn is operator.contains and len(args) == 2:
            return contains(tx, args[0], args[1])
        if fn in (operator.is_, operator.is_not) and len(args) == 2:
            return tx.is_op(args[0], args[1], fn is operator.is_not)
        if fn is len and len(args) == 1:
            return builtin_len(tx, args[0])
        if fn is isinstance and len(args) == 2:
            return isinstance_check(tx, args[0], args[1])
        if fn is issubclass and all_const(args):
            return fold(tx, fn, args)
        if fn is getattr and 2 <= len(args) <= 3:
            return builtin_getattr(tx, args)
        if fn is hasattr and len(args) == 2:
            return ConstantVariable(has_attr(tx, args[0], args[1].as_python_constant()))
        if fn is setattr and len(args) == 3:
            tx.store_attr(args[0], args[1].as_python_constant(), args[2])
            return ConstantVariable(None)
        if fn is delattr and len(args) == 2:
            if not isinstance(args[0], NewObjectVariable):
                raise Unsupported(f"`delattr` of an attribute of {args[0].describe()}")
            args[0].del_attr(tx, args[1].as_python_constant())
            return ConstantVariable(None)
        if fn is sum:
            return builtin_sum(tx, args, kwargs)
        if fn in (min, max):
            return builtin_minmax(tx, fn, args, kwargs)
        if fn is abs and len(args) == 1:
            return apply_operator(tx, operator.abs, args)
        if fn is iter and len(args) == 1:
            return tx.get_iter(args[0])
        if fn is next and 1 <= len(args) <= 2:
            it = args[0]
            if isinstance(it, EndlessIteratorVariable):
                return it.next_item(tx)
            if isinstance(it, ListIteratorVariable):
                item = it.next_item(tx)
                if item is None:
                    if len(args) == 2:
                        return args[1]
                    raise Unsupported("next() on an exhausted iterator (StopIteration)")
                return item
        if fn in (any, all) and len(args) == 1:
            return builtin_any_all(tx, fn, args[0])
        if fn is callable and len(args) == 1:
            v = args[0]
            if v.is_python_constant():
                return fold(tx, callable, args)
            if isinstance(v, ObjectVariable):
                return ConstantVariable(any("__call__" in k.__dict__ for k in v.python_type().__mro__))
            return ConstantVariable(
                not isinstance(v, (TensorVariable, BaseListVariable, DictVariable, SetVariable))
            )
        if fn is sorted and all_const([*args, *kwargs.values()]):
            return fold(tx, sorted, args, kwargs)
        if fn is sorted:
            return builtin_sorted(tx, args, kwargs)
        if fn is vars and len(args) == 1:
            return args[0].var_getattr(tx, "__dict__")
        if fn in (round, divmod, pow, chr, ord, hash, repr, format, bin, hex, oct) and all_const(
            [*args, *kwargs.values()]
        ):
            return fold(tx, fn, args, kwargs)
        if getattr(fn, "__module__", None) == "math" and all_const(args):
            return fold(tx, fn, args, kwargs)
        if has_sym([*args, *kwargs.values()]):
            return builtin_on_sizes(tx, fn, args, kwargs)
        if fn in BUILTIN_CONSTRUCTORS:
            return construct_builtin_type(tx, fn, args, kwargs)
        if fn is super:
            return make_super(tx, args)
        if fn is print:
            raise Unsupported("builtin `print` cannot be traced")
        name = getattr(fn, "__name__", str(fn))
        raise Unsupported(f"builtin `{name}` cannot be traced")


#: builtin types whose classmethods give immutable values (folded on constant arguments)
_IMMUTABLE_TYPES = (int, float, complex, str, bytes)


def _builtin_classmethod(fn: Any) -> bool:
    """Whether ``fn`` is a C classmethod of a builtin type read from it (``dict.fromkeys``,
    ``int.from_bytes``; bound anew on every attribute read)."""
    owner = getattr(fn, "__self__", None)
    return isinstance(fn, types.BuiltinMethodType) and isinstance(owner, type) and owner in (
        dict, *_IMMUTABLE_TYPES)
