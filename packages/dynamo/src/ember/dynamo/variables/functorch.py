"""torch.func transforms (``vmap``, ``grad``, ...) and other opaque callables as one graph node.

``torch.vmap(f)(x)`` is captured as a call of the transformed function, built
while tracing: ``vmap(f)`` is a ``GraphCallable`` node target, run on fake
tensors for its result and by the backend like any op (aotgrad's ATen tracer
sees the operations functorch decomposes it into). That is sound only for an
``f`` whose behaviour the guards pin, so ``f`` must be a torch function or a
Python function without closure cells, defaults or nested functions whose
globals are modules, torch functions or builtins (each guarded by identity).
Anything else is a graph break that says why.

``associative_scan(combine_fn, xs, dim)`` (``torch._higher_order_ops``; transformers'
Mamba takes it when compiling) is captured the same way: one node calling the scan
with ``combine_fn`` bound, a pure function as above, where TorchDynamo makes a
higher-order op with a traced subgraph. The backend traces through it (in the
``"generic"`` mode, ``vmap`` over slices) like any op.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ..errors import Unsupported
from ..trace_rules import GraphCallable
from .base import VariableTracker
from .builtins import BuiltinVariable
from .classes import PythonModuleVariable
from .functions import NestedFunctionVariable, UserFunctionVariable
from .torch import TorchFunctionVariable

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx


def _transforms() -> dict[Any, str]:
    found: dict[Any, str] = {torch.vmap: "vmap"}
    for name in ("vmap", "grad", "grad_and_value", "jacrev", "jacfwd", "hessian"):
        fn = getattr(torch.func, name, None)
        if fn is not None:
            found[fn] = name
    return found


#: torch.func transforms captured as one node: the function -> its name
TRANSFORMS: dict[Any, str] = _transforms()
TRANSFORM_FUNCTIONS: frozenset[Any] = frozenset(TRANSFORMS)


#: the module defining ``associative_scan``; looked up when met, never imported by ember
SCAN_MODULE = "torch._higher_order_ops.associative_scan"


def is_associative_scan(value: Any) -> bool:
    """Whether ``value`` is torch's ``associative_scan`` (its module already imported)."""
    module = sys.modules.get(SCAN_MODULE)
    return module is not None and value is getattr(module, "associative_scan", None)


class GraphCallableVariable(VariableTracker):
    """A ``GraphCallable`` (a transformed function): calling it is one graph node."""

    def __init__(self, value: GraphCallable) -> None:
        super().__init__(None)
        self.value = value

    def describe(self) -> str:
        return f"`{self.value.label}`"

    def as_python_constant(self) -> Any:
        return self.value

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        return tx.output.create_op("call_function", self.value, args, kwargs)

    def reconstruct(self, cg: PyCodegen) -> None:
        cg.load_const(self.value)


class TransformVariable(TorchFunctionVariable):
    """``torch.vmap``, ``torch.func.grad``, ...: calling one makes the transformed
    function now (``transform_call``)."""

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        return transform_call(tx, self.value, args, kwargs)


def transform_call(
    tx: Tx, transform: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker:
    """``transform(f, *consts, **consts)`` (``torch.vmap(f, in_dims=1)``) made now."""
    name = TRANSFORMS[transform]
    if not args:
        raise Unsupported(f"torch.func.{name} without a function to transform")
    fn, label = pure_function(tx, args[0], f"torch.func.{name}")
    rest = [*args[1:], *kwargs.values()]
    if not all(a.is_python_constant() for a in rest):
        raise Unsupported(f"torch.func.{name} with arguments other than constants")
    made = transform(
        fn,
        *[a.as_python_constant() for a in args[1:]],
        **{k: v.as_python_constant() for k, v in kwargs.items()},
    )
    return GraphCallableVariable(GraphCallable(made, f"{name}({label})"))


class AssociativeScanVariable(TorchFunctionVariable):
    """``associative_scan``: calling it is one node (``scan_call``)."""

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        return scan_call(tx, self.value, args, kwargs)


def scan_call(
    tx: Tx, scan: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker:
    """``associative_scan(combine_fn, xs, dim, reverse=False, combine_mode=...)`` as one
    node: ``combine_fn`` a pure function, every argument but ``xs`` a constant."""
    names = ("combine_fn", "xs", "dim", "reverse", "combine_mode")
    if len(args) > len(names):
        raise Unsupported("associative_scan() takes at most 5 arguments (TypeError)")
    bound: dict[str, VariableTracker] = dict(zip(names, args, strict=False))
    for k, v in kwargs.items():
        if k not in names or k in bound:
            raise Unsupported(f"associative_scan() got an unexpected or repeated argument `{k}` (TypeError)")
        bound[k] = v
    if "combine_fn" not in bound or "xs" not in bound or "dim" not in bound:
        raise Unsupported("associative_scan() without combine_fn, xs and dim (TypeError)")
    fn, label = pure_function(tx, bound["combine_fn"], "associative_scan")
    options = {k: v for k, v in bound.items() if k not in ("combine_fn", "xs")}
    if not all(v.is_python_constant() for v in options.values()):
        raise Unsupported("associative_scan with a non-constant dim, reverse or combine_mode")
    made = functools.partial(scan, fn, **{k: v.as_python_constant() for k, v in options.items()})
    target = GraphCallable(made, f"associative_scan({label})")
    return tx.output.create_op("call_function", target, [bound["xs"]], {})


def pure_function(tx: Tx, var: VariableTracker, why: str) -> tuple[Callable[..., Any], str]:
    """The function ``var`` stands for, if a graph may call it as is (module doc)."""
    if isinstance(var, GraphCallableVariable):
        return var.value, var.value.label
    if isinstance(var, TorchFunctionVariable):
        return var.value, str(getattr(var.value, "__name__", var.value))
    if isinstance(var, UserFunctionVariable):
        fn = var.fn
        if fn.__closure__ or fn.__defaults__ or fn.__kwdefaults__:
            raise Unsupported(
                f"{why} of `{fn.__name__}`, which has closure cells or defaults "
                "(only functions of their arguments are captured)"
            )
        code, f_globals = fn.__code__, fn.__globals__
    elif isinstance(var, NestedFunctionVariable):
        defaults, kwdefaults = var.defaults(tx)
        if var.closure or defaults or kwdefaults or var.attrs.value:
            raise Unsupported(
                f"{why} of `{var.fn_name()}`, which has closure cells or defaults "
                "(only functions of their arguments are captured)"
            )
        code, f_globals = var.code, var.f_globals
        fn = types.FunctionType(code, f_globals, code.co_name)
    else:
        raise Unsupported(f"{why} of {var.describe()}")
    if any(isinstance(c, types.CodeType) for c in code.co_consts):
        raise Unsupported(f"{why} of `{code.co_name}`, which defines functions inside")
    _guard_globals(tx, code, f_globals, why)
    return fn, code.co_name


def _guard_globals(tx: Tx, code: types.CodeType, f_globals: dict[str, Any], why: str) -> None:
    """Pin the globals ``code`` may read: each must be a module, a torch function or a
    builtin, read (and so guarded) through the frame's own globals."""
    for name in code.co_names:
        if name not in f_globals:
            continue  # an attribute name, or a builtin
        if f_globals is not tx.f_globals:
            raise Unsupported(
                f"{why} of `{code.co_name}`, a function of another module that "
                f"reads its global `{name}`"
            )
        value = tx.load_global(name)
        if not isinstance(value, (PythonModuleVariable, TorchFunctionVariable, BuiltinVariable)):
            raise Unsupported(
                f"{why} of `{code.co_name}`, which reads the global `{name}` "
                f"({value.describe()}); only modules, torch functions and builtins are captured"
            )
