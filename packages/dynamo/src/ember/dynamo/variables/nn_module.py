"""``torch.nn.Module`` instances.

User modules are inlined (their ``forward`` is traced like any method);
torch.nn's own leaf modules (Linear, Conv2d, ReLU, ...) become one
``call_module`` node each. Parameters and buffers reached through a module
become ``get_attr`` nodes; the module's identity is guarded.

Calling a module runs its forward pre-hooks and forward hooks as
``Module.__call__`` does, traced like any function; its hook dicts are
guarded (empty ones by length), so a hook registered after capture
recompiles instead of being skipped. Backward hooks, global hooks and hooks
taking keyword arguments are refused (the module runs eagerly).
"""

from __future__ import annotations

import inspect
import keyword
import types
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ember.ir import Attr, Item, Source

from ..errors import Unsupported
from ..function_entry import CompiledFunction
from ..rebuild import rebuild_module
from .base import VariableTracker
from .constant import ConstantVariable
from .functions import UserFunctionVariable, UserMethodVariable
from .lists import ListIteratorVariable, TupleVariable
from .objects import class_attribute, is_data_descriptor

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx

MISSING: Any = object()

CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict, nn.ParameterList, nn.ParameterDict)


#: the methods listing a module tree's parameters or buffers (``tensor_listing``)
TENSOR_LISTINGS = frozenset({"parameters", "named_parameters", "buffers", "named_buffers"})

#: the hook dicts ``Module.__call__`` reads
HOOK_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")


def unsupported_hooks(module: nn.Module) -> str:
    """What about ``module``'s hooks capture cannot follow ("" if nothing)."""
    mod = nn.modules.module
    if module._backward_hooks or getattr(module, "_backward_pre_hooks", None):
        return "backward hooks"
    if mod._global_forward_hooks or mod._global_forward_pre_hooks or mod._global_backward_hooks:
        return "global module hooks"
    if getattr(mod, "_global_backward_pre_hooks", None):
        return "global module hooks"
    if module._forward_pre_hooks_with_kwargs or module._forward_hooks_with_kwargs:
        return "forward hooks taking keyword arguments"
    return ""


def is_none(v: VariableTracker) -> bool:
    return v.is_python_constant() and v.as_python_constant() is None


def is_leaf_module(module: nn.Module, inline_inbuilt: bool) -> bool:
    if isinstance(module, CONTAINERS) or inline_inbuilt:
        return False
    return type(module).__module__.startswith("torch.nn.")


def overridden(tx: Tx, module: nn.Module) -> bool:
    """Whether a leaf module must be inlined: ``torch.func.functional_call`` replaced
    one of its tensors (one ``call_module`` node would read its own), or a
    ``torch.cond`` branch is being traced (``OutputGraph.inline_leaves``)."""
    if tx.output.inline_leaves:
        return True
    overrides = tx.output.tensor_overrides
    return bool(overrides) and any(
        id(t) in overrides for t in [*module.parameters(), *module.buffers()]
    )


class NNModuleVariable(VariableTracker):
    def __init__(self, value: nn.Module, source: Source | None = None) -> None:
        super().__init__(source)
        self.value = value
        #: where the class of a module made in the frame was read (``NewModuleVariable``)
        self.class_source: Source | None = None

    def python_type(self) -> type:
        return type(self.value)

    def describe(self) -> str:
        return f"module `{type(self.value).__name__}`"

    def truth(self, tx: Tx) -> bool:
        if isinstance(self.value, CONTAINERS):
            return len(self.value) > 0
        return True

    def child_source(self, name: str | int, table: str = "_modules") -> Source | None:
        """The source of ``name`` (an attribute, or an item of a container or of
        the module's ``table``: ``_modules["0"]`` where ``name`` is no identifier)."""
        if self.source is None:
            return None
        if isinstance(name, int) and isinstance(self.value, (nn.Sequential, nn.ModuleList)):
            # read from ``_modules`` (a dict lookup a native guard does in C), not through
            # the container's Python ``__getitem__``: a ModuleList's item ``i`` is
            # ``_modules[str(i)]``; a Sequential's is its ``i``-th value, the key of which the
            # caller pins with ``guard_children``
            keys = list(self.value._modules)
            key = keys[name] if isinstance(self.value, nn.Sequential) else str(name)
            return Item(Attr(self.source, "_modules"), key)
        if isinstance(name, int) or (
            isinstance(self.value, (nn.ModuleDict, nn.ParameterDict))
            and name in (self.value._parameters if isinstance(self.value, nn.ParameterDict)
                         or table == "_parameters" else self.value._modules)
        ):
            # a dict container's entry is its item; a plain attribute of a ModuleDict
            # subclass (timm's FeatureDictNet.return_layers) is an attribute like any other
            return Item(self.source, name)
        if name.isidentifier() and not keyword.iskeyword(name):
            return Attr(self.source, name)
        return Item(Attr(self.source, table), name)

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        pending = tx.output.side_effects.pending_attr(self, name)
        if pending is not None:
            return pending
        m = self.value
        d = m.__dict__
        # Python's order: a data descriptor of the class (a property), the
        # instance dict, other class attributes (methods, constants), and only
        # then nn.Module.__getattr__'s parameters, buffers and submodules
        # (so a method named like a submodule wins, as in eager).
        static = inspect.getattr_static(type(m), name, MISSING)
        if static is not MISSING and is_data_descriptor(static):
            return self.class_attr(tx, name)
        if name in d:
            return tx.wrap(d[name], self.child_source(name))
        if static is not MISSING:
            return self.class_attr(tx, name)
        if name in d.get("_parameters", {}):
            p = d["_parameters"][name]
            if p is None:
                return ConstantVariable(None)
            if id(p) in tx.output.tensor_overrides:  # inside torch.func.functional_call
                return tx.output.tensor_overrides[id(p)]
            return tx.output.register_attr_tensor(p, self.child_source(name, "_parameters"))
        if name in d.get("_buffers", {}):
            b = d["_buffers"][name]
            if b is None:
                return ConstantVariable(None)
            if id(b) in tx.output.tensor_overrides:
                return tx.output.tensor_overrides[id(b)]
            return tx.output.register_attr_tensor(b, self.child_source(name, "_buffers"))
        if name in d.get("_modules", {}):
            sub = d["_modules"][name]
            if sub is None:
                return ConstantVariable(None)
            return tx.wrap(sub, self.child_source(name))
        raise Unsupported(f"attribute `{name}` of {self.describe()} cannot be traced")

    def class_attr(self, tx: Tx, name: str) -> VariableTracker:
        found = class_attribute(tx, self, type(self.value), name)
        if found is None:
            raise Unsupported(f"attribute `{name}` of {self.describe()} cannot be traced")
        return found

    def store_attr(self, tx: Tx, name: str, value: VariableTracker) -> None:
        if self.source is None:
            raise Unsupported(f"attribute write on {self.describe()} without a source")
        d = self.value.__dict__
        if name in d.get("_parameters", {}) or name in d.get("_modules", {}) or name in d.get(
            "_buffers", {}
        ):
            raise Unsupported(f"assigning parameter/buffer/submodule `{name}` inside forward")
        tx.output.side_effects.store_attr(self, name, value)

    def guard_children(self, tx: Tx, module: nn.Module | None = None,
                       source: Source | None = None) -> None:
        """Pin which submodules ``module`` (default: this one) has, by name: capture read
        its children as a list (iterating a ``Sequential``, ``len`` of a ``ModuleList``,
        ``children()``), and the module's identity alone does not pin them
        (``layers.append(block)`` after compiling keeps the object), nor does its class for
        a stored frame bound to another instance (a 3-layer ``Sequential``'s frame ran a
        24-layer one)."""
        module = self.value if module is None else module
        source = self.source if source is None else source
        if source is not None:
            tx.output.guards.add_dict_keys(Attr(source, "_modules"), module._modules)

    def items(self, tx: Tx) -> list[tuple[Any, VariableTracker]]:
        m = self.value
        self.guard_children(tx)
        if isinstance(m, (nn.ModuleList, nn.Sequential, nn.ParameterList)):
            return [(i, tx.wrap(m[i], self.child_source(i))) for i in range(len(m))]
        if isinstance(m, (nn.ModuleDict, nn.ParameterDict)):
            return [(k, tx.wrap(m[k], self.child_source(k))) for k in m]
        return [(k, tx.wrap(sub, self.child_source(k))) for k, sub in m.named_children()]

    def unpack(self, tx: Tx) -> list[VariableTracker]:
        if isinstance(self.value, (nn.ModuleDict, nn.ParameterDict)):
            return [ConstantVariable(k) for k, _ in self.items(tx)]
        return [v for _, v in self.items(tx)]

    def call_method(
        self,
        tx: Tx,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        m = self.value
        if name == "__len__" and isinstance(m, CONTAINERS):
            if isinstance(m, (nn.ParameterList, nn.ParameterDict)):
                if self.source is not None:
                    tx.output.guards.add_dict_keys(Attr(self.source, "_parameters"), m._parameters)
            else:
                self.guard_children(tx)
            return ConstantVariable(len(m))
        if name == "__getitem__" and len(args) == 1 and isinstance(m, CONTAINERS):
            key = args[0].as_python_constant()
            if isinstance(key, slice):
                if not isinstance(m, (nn.ModuleList, nn.Sequential)):
                    raise Unsupported(f"slicing {self.describe()}")
                self.guard_children(tx)
                idx = range(len(m))[key]
                items = [tx.wrap(m[i], self.child_source(i)) for i in idx]
                return TupleVariable(items)
            if isinstance(key, int) and (key < 0 or isinstance(m, nn.Sequential)):
                self.guard_children(tx)  # which child is last; which key is a Sequential's i-th
                key += len(m) if key < 0 else 0
            return tx.wrap(m[key], self.child_source(key))
        # generators in eager (`next(m.parameters())`); a container's views are tuples
        iterator = ListIteratorVariable if name.startswith(("named_", "children", "modules", "parameters", "buffers")) else TupleVariable
        if name in ("children", "values") and not args:
            return iterator([v for _, v in self.items(tx)])
        if name in ("named_children", "items") and not args:
            return iterator(
                [TupleVariable([ConstantVariable(k), v]) for k, v in self.items(tx)]
            )
        if name == "keys" and not args:
            return TupleVariable([ConstantVariable(k) for k, _ in self.items(tx)])
        if name in ("modules", "named_modules") and not args and not kwargs:
            pairs = []
            for dotted, sub in m.named_modules():
                self.guard_children(tx, sub, self.dotted_source(dotted))
                var = tx.wrap(sub, self.dotted_source(dotted))
                pairs.append((dotted, var))
            if name == "modules":
                return iterator([v for _, v in pairs])
            return iterator([TupleVariable([ConstantVariable(k), v]) for k, v in pairs])
        if name in TENSOR_LISTINGS:
            return self.tensor_listing(tx, name, args, kwargs)
        if name == "forward":
            return self.inline_forward(tx, args, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def tensor_listing(
        self, tx: Tx, name: str, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        """``parameters()``, ``named_parameters()``, ``buffers()``, ``named_buffers()``
        (``recurse`` as a constant): the module tree and each module's table are guarded
        (which modules hold which tensors), each tensor is read as ``getattr`` reads it."""
        bound = inspect.signature(getattr(nn.Module, name)).bind(None, *args, **kwargs)
        options = {k: v for k, v in bound.arguments.items() if k != "self"}
        if not all(v.is_python_constant() for v in options.values()):
            raise Unsupported(f"`{name}` of {self.describe()} with non-constant arguments")
        consts = {k: v.as_python_constant() for k, v in options.items()}
        table = "_parameters" if name.endswith("parameters") else "_buffers"
        recurse = consts.get("recurse", True)
        m = self.value
        for dotted, sub in m.named_modules() if recurse else [("", m)]:
            src = self.dotted_source(dotted)
            self.guard_children(tx, sub, src)
            if src is not None:
                tx.output.guards.add_dict_keys(Attr(src, table), getattr(sub, table))
        prefix = consts.pop("prefix", "")
        names = [n for n, _ in getattr(m, "named_" + name.removeprefix("named_"))(**consts)]
        values = [self._param(tx, n) for n in names]
        if not name.startswith("named_"):
            return ListIteratorVariable(values)
        dotted = [prefix + ("." if prefix else "") + n for n in names]  # as torch names them
        return ListIteratorVariable(
            [TupleVariable([ConstantVariable(n), v]) for n, v in zip(dotted, values, strict=True)]
        )

    def dotted_source(self, dotted: str) -> Source | None:
        """The source of a submodule named ``a.b.0`` relative to this one."""
        src = self.source
        if src is None or not dotted:
            return src
        for part in dotted.split("."):
            # ``named_modules`` names a container's children by their ``_modules`` key
            src = Item(Attr(src, "_modules"), part) if part.isdigit() else Attr(src, part)
        return src

    def _param(self, tx: Tx, dotted: str) -> VariableTracker:
        var: VariableTracker = self
        for part in dotted.split("."):
            var = var.var_getattr(tx, part)
        return var

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        m = self.value
        refused = unsupported_hooks(m)
        if refused:
            raise Unsupported(f"{self.describe()} has {refused}")
        self.guard_hooks(tx)
        pre_hooks = self.hooks(tx, "_forward_pre_hooks")
        hooks = self.hooks(tx, "_forward_hooks")
        for hook in pre_hooks:
            got = hook.call_function(tx, [self, TupleVariable(list(args))], {})
            if not is_none(got):
                args = list(got.items) if isinstance(got, TupleVariable) else [got]
        if pre_hooks or hooks:
            # never a call_module node: the graph would call the module, hooks and all
            result = self.inline_forward(tx, args, kwargs)
        else:
            result = self.call_forward(tx, args, kwargs)
        for hook in hooks:
            got = hook.call_function(tx, [self, TupleVariable(list(args)), result], {})
            if not is_none(got):
                result = got
        return result

    def call_forward(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        m = self.value
        if is_leaf_module(m, tx.options.inline_inbuilt_nn_modules) and not overridden(tx, m):
            tx.guard_module_training(self)
            if self.source is not None:
                # a backend lowers the leaf by its class (an inductor graph holds addmm, not
                # the module): a class assigned later (``m.__class__ = Sub``) must recompile
                tx.output.guards.add_type(self.source, m)
            return tx.output.call_module(self, args, kwargs)
        return self.inline_forward(tx, args, kwargs)

    def guard_hooks(self, tx: Tx) -> None:
        """Pin the module's hook dicts: empty ones by length (one cheap part each),
        the others by their keys (each hook is then guarded where it is read)."""
        if self.source is None:
            return
        for name in HOOK_DICTS:
            hooks = getattr(self.value, name, None)
            if hooks is None:
                continue
            if hooks:
                tx.output.guards.add_dict_keys(Attr(self.source, name), hooks)
            else:
                tx.output.guards.add_empty(Attr(self.source, name))

    def hooks(self, tx: Tx, name: str) -> list[VariableTracker]:
        hooks = getattr(self.value, name)
        if hooks and self.source is None:
            raise Unsupported(f"{self.describe()} has {name.strip('_').replace('_', ' ')} but no source")
        src = Attr(self.source, name) if self.source is not None else None
        return [tx.wrap(hook, Item(src, key) if src is not None else None) for key, hook in hooks.items()]

    def inline_forward(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        fwd = type(self.value).forward
        fwd = getattr(fwd, "__wrapped__", fwd) if isinstance(fwd, CompiledFunction) else fwd
        if not isinstance(fwd, types.FunctionType):
            raise Unsupported(f"forward of {self.describe()} is not a Python function")
        if fwd is nn.Module.forward:
            raise Unsupported(f"{self.describe()} has no forward")
        if self.source is None and self.class_source is not None:
            # a module made in the frame: nothing pins its class's forward but a guard
            # (a module from the frame is pinned by identity, ADR 0027)
            fwd_src = Attr(self.class_source, "forward")
            tx.output.guards.add_function(fwd_src, fwd)
            src: Source | None = fwd_src
        else:
            src = Attr(Attr(self.source, "__class__"), "forward") if self.source else None
        return UserFunctionVariable(fwd, src).call_function(tx, [self, *args], kwargs)



class NewModuleVariable(NNModuleVariable):
    """A stateless module made inside the frame (``nn.Softmax(dim=-1)(x)``,
    ``loss_fct = CrossEntropyLoss()``, transformers' ``ACT2FN["silu"]``, which makes
    a ``SiLUActivation``: a class adding only ``forward``, which is inlined like any
    user module's). It is made for real once, at trace
    time, from constant arguments, which are guarded where they came from; it
    is not guarded itself (each call of the compiled code makes an equal
    one), and is made again, the same way, if it leaves the frame."""

    fresh = True

    def __init__(
        self,
        value: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        class_source: Source | None = None,
    ) -> None:
        super().__init__(value, None)
        self.args = args
        self.kwargs = kwargs
        #: its class's Python ``__init__`` is being traced: attribute writes and torch.nn's
        #: ``__init__`` run for real on the new module (``construct_with_traced_init``)
        self.constructing = False
        #: where its class was read: its ``forward`` and class attributes are guarded
        #: through it (``objects.class_attribute``), as a module from the frame's are
        #: through ``L['m'].__class__``
        self.class_source = class_source

    def describe(self) -> str:
        return f"module `{type(self.value).__name__}` (made in the compiled region)"

    def store_attr(self, tx: Tx, name: str, value: VariableTracker) -> None:
        if not self.constructing:
            super().store_attr(tx, name, value)
            return
        real = self.real_value(value)
        with torch.random.fork_rng(devices=[]):
            setattr(self.value, name, real)  # nn.Module.__setattr__, on a module nobody else holds

    def real_value(self, v: VariableTracker) -> Any:
        """The Python value a tracker stands for, where ``__init__`` may store it on the
        new module: a constant, a function, a method of the module, a module made here."""
        if isinstance(v, UserMethodVariable) and v.obj is self:
            return types.MethodType(v.fn.as_python_constant(), self.value)
        if isinstance(v, NewModuleVariable) and not v.constructing:
            return v.value
        if v.is_python_constant():
            return v.as_python_constant()
        raise Unsupported(
            f"`{type(self.value).__name__}.__init__` stores {v.describe()} on the new module "
            "(only constants, functions and modules made from constants are kept)"
        )

    def reconstruct(self, cg: PyCodegen) -> None:
        def build() -> None:
            cg.load_callable_const(rebuild_module)
            cg.load_const(type(self.value))
            cg.load_const(self.args)
            cg.load_const(self.kwargs)
            cg.load_const(self.value.training)
            cg.call(4)

        cg.reconstruct_once(self, build)


def is_torch_nn_class(klass: type) -> bool:
    return klass is nn.Module or klass.__module__.startswith("torch.nn.")


def user_construction_code(cls: type) -> str:
    """What Python code of the user's making ``cls()`` would run ("" if none).

    A module class defined outside ``torch.nn`` (transformers' ``SiLUActivation``)
    whose classes define no ``__init__`` or ``__new__`` of their own is made by
    torch.nn's constructors alone, which touch nothing but the new module: making it
    at trace time is what every call of the compiled code would have done. A user
    ``__init__`` could touch anything (a counter, a registry, the RNG), so its class
    is not made this way."""
    if type(cls).__call__ is not type.__call__:
        return "its metaclass defines __call__"
    for klass in cls.__mro__:
        if klass is object or is_torch_nn_class(klass):
            continue
        for name in ("__init__", "__new__"):
            if name in klass.__dict__:
                return f"`{klass.__name__}.{name}` is Python code that would run in each call"
    return ""


def python_init(cls: type) -> types.FunctionType | None:
    """The ``__init__`` a user class of ``cls``'s MRO defines, where that is its only
    construction code of its own (no ``__new__``, no metaclass ``__call__``)."""
    if type(cls).__call__ is not type.__call__:
        return None
    for klass in cls.__mro__:
        if klass is object or is_torch_nn_class(klass):
            return None
        if "__new__" in klass.__dict__:
            return None
        init = klass.__dict__.get("__init__")
        if init is not None:
            return init if isinstance(init, types.FunctionType) else None
    return None


class TorchInitVariable(VariableTracker):
    """``super().__init__(...)`` reaching a torch.nn class from a module whose Python
    ``__init__`` is being traced: torch's constructor touches only the new module,
    so it runs for real on it (with constant arguments)."""

    def __init__(self, fn: Any, module: NewModuleVariable) -> None:
        super().__init__(None)
        self.fn = fn
        self.module = module

    def describe(self) -> str:
        return f"`{self.fn.__qualname__}` of a module made in the compiled region"

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        real = self.module.real_value
        cargs = [real(a) for a in args]
        ckwargs = {k: real(v) for k, v in kwargs.items()}
        with torch.random.fork_rng(devices=[]):  # parameter init must not move the user's RNG
            try:
                self.fn(self.module.value, *cargs, **ckwargs)
            except Exception as e:
                raise Unsupported(f"{self.describe()} raised {type(e).__name__}: {e}") from e
        return ConstantVariable(None)


def construct_with_traced_init(
    tx: Tx,
    cls: type,
    init: types.FunctionType,
    args: list[VariableTracker],
    kwargs: dict[str, VariableTracker],
    cls_source: Source,
) -> NewModuleVariable:
    """``cls(*args)`` for a module class with a Python ``__init__`` (transformers'
    ``GELUActivation``, which ``ACT2FN["gelu"]`` makes in ``forward``): the ``__init__``
    is traced over a new real module, writing its attributes and running torch.nn's
    constructors for real. Allowed only where that changes nothing outside the new
    module (no side effect recorded while tracing it), so making the module once now
    is what every call would have done."""
    module: nn.Module = object.__new__(cls)  # (python_init: no class of cls defines __new__)
    var = NewModuleVariable(module, tuple(a.as_python_constant() for a in args),
                            {k: v.as_python_constant() for k, v in kwargs.items()}, cls_source)
    before = tx.output.side_effects.snapshot()
    var.constructing = True
    try:
        result = UserFunctionVariable(init).call_function(tx, [var, *args], kwargs)
    finally:
        var.constructing = False
    if not (result.is_python_constant() and result.as_python_constant() is None):
        raise Unsupported(f"`{init.__qualname__}` returned a value (TypeError)")
    if tx.output.side_effects.changed_since(before):
        raise Unsupported(f"`{init.__qualname__}` changes state outside the module it makes")
    if "_parameters" not in module.__dict__:
        raise Unsupported(f"`{init.__qualname__}` did not call nn.Module.__init__")
    return var


def construct_module(
    tx: Tx,
    cls: type,
    args: list[VariableTracker],
    kwargs: dict[str, VariableTracker],
    cls_source: Source | None = None,
) -> VariableTracker:
    """``cls(*args, **kwargs)`` for an ``nn.Module`` class, inside the frame: a
    ``torch.nn`` class, or a subclass that adds no construction code of its own
    (``user_construction_code``); either must end up with no parameters or buffers."""
    refused = "" if is_torch_nn_class(cls) else user_construction_code(cls)
    init = python_init(cls) if refused else None
    if not is_torch_nn_class(cls) and cls_source is None:
        refused = "its class has no source to guard its forward by"
        init = None
    if refused and init is None:
        raise Unsupported(f"creating a `{cls.__name__}` module inside a compiled region: {refused}")
    if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
        raise Unsupported(f"creating a `{cls.__name__}` module from non-constant arguments")
    if init is not None:
        assert cls_source is not None
        made = construct_with_traced_init(tx, cls, init, args, kwargs, cls_source)
        module = made.value
    else:
        cargs = tuple(a.as_python_constant() for a in args)
        ckwargs = {k: v.as_python_constant() for k, v in kwargs.items()}
        with torch.random.fork_rng(devices=[]):  # parameter init must not move the user's RNG
            try:
                module = cls(*cargs, **ckwargs)
            except Exception as e:
                raise Unsupported(f"{cls.__name__}(...) raised {type(e).__name__}: {e}") from e
        made = NewModuleVariable(module, cargs, ckwargs, cls_source)
    if next(module.parameters(), None) is not None or next(module.buffers(), None) is not None:
        raise Unsupported(
            f"creating a `{cls.__name__}` module with parameters or buffers inside a compiled region"
        )
    return made
