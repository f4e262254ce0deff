"""Python builtins and the ``operator`` module.

On constants they fold; on tensors the operators become graph nodes; on
lists/tuples/dicts they work on the trackers. Anything else is a named
``Unsupported`` (``print``, ``open``, ``id``, ...).
"""

from __future__ import annotations

import builtins
import functools
import operator
from typing import TYPE_CHECKING, Any

import torch

from ..errors import Unsupported
from .base import VariableTracker
from .constant import ConstantVariable
from .dicts import DictVariable, dict_key
from .lists import BaseListVariable, ListIteratorVariable, ListVariable, TupleVariable
from .tensor import TensorVariable

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx

Args = list[VariableTracker]
Kwargs = dict[str, VariableTracker]


def has_tensor(vs: list[VariableTracker]) -> bool:
    for v in vs:
        if isinstance(v, TensorVariable):
            return True
        if isinstance(v, BaseListVariable) and has_tensor(v.items):
            return True
    return False


def all_const(vs: list[VariableTracker]) -> bool:
    return all(v.is_python_constant() for v in vs)


def fold(fn: Any, args: Args, kwargs: Kwargs | None = None) -> VariableTracker:
    from ..builder import wrap_constant_result

    try:
        value = fn(
            *[a.as_python_constant() for a in args],
            **{k: v.as_python_constant() for k, v in (kwargs or {}).items()},
        )
    except Exception as e:
        name = getattr(fn, "__name__", str(fn))
        raise Unsupported(f"`{name}` on constants raised {type(e).__name__}: {e}") from e
    return wrap_constant_result(value)


ARITH = {
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
    operator.mod, operator.pow, operator.matmul, operator.and_, operator.or_,
    operator.xor, operator.lshift, operator.rshift, operator.iadd, operator.isub,
    operator.imul, operator.itruediv, operator.ifloordiv, operator.imod, operator.ipow,
    operator.imatmul, operator.iand, operator.ior, operator.ixor, operator.ilshift,
    operator.irshift, operator.neg, operator.pos, operator.invert, operator.abs,
    operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne,
    operator.not_, operator.truth,
}
INPLACE_TO_OUT = {
    operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
    operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv,
    operator.imod: operator.mod, operator.ipow: operator.pow, operator.imatmul: operator.matmul,
    operator.iand: operator.and_, operator.ior: operator.or_, operator.ixor: operator.xor,
    operator.ilshift: operator.lshift, operator.irshift: operator.rshift,
}


def apply_operator(tx: Tx, fn: Any, args: Args) -> VariableTracker:
    """``a + b``, ``a < b``, ``-a``... for any trackers."""
    if has_tensor(args):
        if fn in (operator.not_, operator.truth):
            raise Unsupported(
                "data-dependent control flow: the truth value of a tensor is only known at run time"
            )
        return tx.output.create_op("call_function", fn, args, {})
    if all_const(args):
        return fold(fn, args)
    if fn in INPLACE_TO_OUT and isinstance(args[0], ListVariable) and fn is operator.iadd:
        args[0].call_method(tx, "extend", [args[1]], {})
        return args[0]
    base = INPLACE_TO_OUT.get(fn, fn)
    if len(args) == 2:
        a, b = args
        if (
            base is operator.add
            and isinstance(a, BaseListVariable)
            and isinstance(b, BaseListVariable)
            and a.kind is b.kind
        ):
            return a.new([*a.items, *b.items])
        if base is operator.mul and isinstance(a, BaseListVariable) and b.is_python_constant():
            return a.new(a.items * b.as_python_constant())
        if base in (operator.eq, operator.ne):
            same = same_value(a, b)
            if same is not None:
                return ConstantVariable(same if base is operator.eq else not same)
    if fn is operator.not_ and len(args) == 1:
        return ConstantVariable(not args[0].truth(tx))
    if fn is operator.truth and len(args) == 1:
        return ConstantVariable(args[0].truth(tx))
    names = ", ".join(a.describe() for a in args)
    raise Unsupported(f"operator `{getattr(fn, '__name__', fn)}` on {names}")


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
    if container.is_python_constant() and item.is_python_constant():
        return fold(operator.contains, [container, item])
    if isinstance(container, TensorVariable):
        return tx.output.create_op("call_method", "__contains__", [container, item], {})
    from .objects import UserObjectVariable

    if isinstance(container, UserObjectVariable):
        return user_contains(tx, container, item)
    raise Unsupported(f"`in` test on {container.describe()}")


def user_contains(tx: Tx, container: Any, item: VariableTracker) -> VariableTracker:
    """``item in obj`` for a Python class: its own ``__contains__`` inlined,
    or ``Mapping.__contains__`` (``obj[item]`` without ``KeyError``) modelled
    over an inlined Python ``__getitem__``."""
    import collections.abc
    import inspect
    import types

    from ..errors import MissingKey

    cls = type(container.value)
    has = inspect.getattr_static(cls, "__contains__", None)
    get = inspect.getattr_static(cls, "__getitem__", None)
    if isinstance(has, types.FunctionType) and has is not collections.abc.Mapping.__contains__:
        result = container.call_method(tx, "__contains__", [item], {})
        return ConstantVariable(result.truth(tx))
    if has is collections.abc.Mapping.__contains__ and isinstance(get, types.FunctionType):
        fx = tx.output.side_effects

        def state() -> tuple[Any, ...]:
            return (
                tx.output.mutations,
                dict(fx.attrs),
                dict(fx.globals),
                dict(fx.cells),
                torch.is_grad_enabled(),
            )

        before = state()
        try:
            container.call_method(tx, "__getitem__", [item], {})
        except MissingKey as e:
            after = state()
            if after[0] != before[0] or after[4] != before[4] or any(
                a.keys() != b.keys() or any(a[k] is not b[k] for k in a)
                for a, b in zip(after[1:4], before[1:4], strict=True)
            ):
                raise Unsupported(
                    f"`in` test on {container.describe()}: its __getitem__ changed state "
                    "before raising KeyError"
                ) from e
            return ConstantVariable(False)
        return ConstantVariable(True)
    raise Unsupported(f"`in` test on {container.describe()}")


def same_value(a: VariableTracker, b: VariableTracker) -> bool | None:
    """``a == b`` as ``in`` computes it (identity first), or None if unknown."""
    if a is b:
        return True
    if a.is_python_constant() and b.is_python_constant():
        return bool(a.as_python_constant() == b.as_python_constant())
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        return None
    ra, rb = getattr(a, "value", None), getattr(b, "value", None)
    default_eq: Any = object.__eq__
    if ra is not None and rb is not None and type(ra).__eq__ is default_eq:
        return ra is rb
    return None


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
    if isinstance(obj, (BaseListVariable, DictVariable)):
        return ConstantVariable(len(obj.items))
    if isinstance(obj, TensorVariable):
        if obj.example.dim() == 0:
            raise Unsupported("len() of a 0-d tensor")
        return ConstantVariable(int(obj.example.shape[0]))
    if obj.is_python_constant():
        return fold(len, [obj])
    return obj.call_method(tx, "__len__", [], {})


def iterate(tx: Tx, obj: VariableTracker) -> list[VariableTracker]:
    items = obj.unpack(tx)
    return items


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
        return fold(fn, [TupleVariable(items)], kwargs)
    if len(items) == 2 and not kwargs and has_tensor(items):
        torch_fn = torch.maximum if fn is builtins.max else torch.minimum
        a, b = items
        if isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
            return tx.output.create_op("call_function", torch_fn, [a, b], {})
        t, c = (a, b) if isinstance(a, TensorVariable) else (b, a)
        method = "clamp_min" if fn is builtins.max else "clamp_max"
        return tx.output.create_op("call_method", method, [t, c], {})
    raise Unsupported(f"`{fn.__name__}()` over non-constant values")


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
    real = getattr(obj, "value", None)
    if real is not None and obj.source is not None:
        pending = tx.output.side_effects.pending_attr(obj, name)
        if pending is not None:
            return True
        guard_hasattr(tx, obj.source, real)
        return hasattr(real, name)
    raise Unsupported(f"hasattr() on {obj.describe()}")


def guard_hasattr(tx: Tx, source: Any, real: Any) -> None:
    """``hasattr(obj, name)`` depends on the class and on which names the
    instance holds: guard the type and the keys of the instance dicts."""
    from ..source_tracking import AttrSource

    g = tx.output.guards
    g.add_type(source, real)
    inst = getattr(real, "__dict__", None)
    if isinstance(inst, dict) and all(isinstance(k, str) for k in inst):
        g.add_dict_keys(AttrSource(source, "__dict__"), inst)
    if isinstance(real, torch.nn.Module):
        for sub in ("_parameters", "_buffers", "_modules"):
            g.add_dict_keys(AttrSource(source, sub), getattr(real, sub))


def class_text(tx: Tx, var: Any, fn: Any) -> VariableTracker:
    """``str(cls)`` of a plain class: ``<class 'mod.Qual'>``.

    The class is pinned by its ID guard, but ``__module__`` and
    ``__qualname__`` are writable, so they are guarded by value too; a
    metaclass with its own ``__repr__``/``__str__``, or a class reached
    without a source, is a graph break."""
    from ..source_tracking import AttrSource

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
        g.add_constant(AttrSource(var.source, attr), value)
    return ConstantVariable(fn(cls))


def construct_builtin_type(tx: Tx, cls: Any, args: Args, kwargs: Kwargs) -> VariableTracker:
    if cls in (list, tuple):
        items = iterate(tx, args[0]) if args else []
        return ListVariable(items) if cls is list else TupleVariable(items)
    if cls is dict:
        d = DictVariable({})
        if args:
            d.call_method(tx, "update", [args[0]], {})
        d.items.update(kwargs)
        return d
    if cls in (int, float, bool, str, complex) and args and isinstance(args[0], TensorVariable):
        raise Unsupported(
            f"`{cls.__name__}(tensor)` needs the tensor's data, which is only known at run time"
        )
    if cls is bool and len(args) == 1 and not kwargs:
        return ConstantVariable(args[0].truth(tx))
    if cls is str and len(args) == 1 and not kwargs:
        from .objects import ClassVariable

        if isinstance(args[0], ClassVariable):
            return class_text(tx, args[0], cls)
    if cls in (int, float, bool, str, complex, range, slice, frozenset, torch.Size, torch.device,
               torch.finfo, torch.iinfo) and all_const(
        [*args, *kwargs.values()]
    ):
        return fold(cls, args, kwargs)
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
        from ..builder import wrap

        return wrap(tx, args[0].python_type(), None)
    if cls is object and not args:
        raise Unsupported("creating `object()` inside a compiled region")
    name = getattr(cls, "__name__", str(cls))
    raise Unsupported(f"creating a `{name}` object cannot be traced")


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
        from ..builder import wrap

        return wrap(tx, getattr(self.value, name), None)

    def call_function(self, tx: Tx, args: Args, kwargs: Kwargs) -> VariableTracker:
        fn = self.value
        if fn in ARITH and not kwargs:
            return apply_operator(tx, fn, args)
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
            return fold(fn, args)
        if fn is getattr and 2 <= len(args) <= 3:
            return builtin_getattr(tx, args)
        if fn is hasattr and len(args) == 2:
            return ConstantVariable(has_attr(tx, args[0], args[1].as_python_constant()))
        if fn is setattr and len(args) == 3:
            tx.store_attr(args[0], args[1].as_python_constant(), args[2])
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
            if isinstance(it, ListIteratorVariable):
                item = it.next_item()
                if item is None:
                    if len(args) == 2:
                        return args[1]
                    raise Unsupported("next() on an exhausted iterator (StopIteration)")
                return item
        if fn in (any, all) and len(args) == 1:
            items = iterate(tx, args[0])
            truths = [v.truth(tx) for v in items]
            return ConstantVariable(fn(truths))
        if fn is callable and len(args) == 1:
            v = args[0]
            if v.is_python_constant():
                return fold(callable, args)
            return ConstantVariable(not isinstance(v, (TensorVariable, BaseListVariable, DictVariable)))
        if fn is sorted and all_const([*args, *kwargs.values()]):
            return fold(sorted, args, kwargs)
        if fn in (round, divmod, pow, chr, ord, hash, repr, format, bin, hex, oct) and all_const(
            [*args, *kwargs.values()]
        ):
            return fold(fn, args, kwargs)
        if getattr(fn, "__module__", None) == "math" and all_const(args):
            return fold(fn, args, kwargs)
        if fn in (list, tuple, dict, int, float, bool, str, complex, range, slice, enumerate, zip,
                  reversed, type, frozenset, object):
            return construct_builtin_type(tx, fn, args, kwargs)
        if fn is super:
            from .objects import make_super

            return make_super(tx, args)
        if fn is print:
            raise Unsupported("builtin `print` cannot be traced")
        name = getattr(fn, "__name__", str(fn))
        raise Unsupported(f"builtin `{name}` cannot be traced")


def operator_fn(name: str) -> Any:
    return functools.reduce(getattr, name.split("."), operator)
