"""Op targets as stable qualified strings, resolved through an allow-list.

=================================  =========================================
``aten::add.Tensor``               an ATen / prims ``OpOverload``
``aten::add``                      an ``OpOverloadPacket`` (no overload chosen)
``torch.cos``                      a function in ``torch``
``torch.nn.functional.relu``       a function in ``torch.nn.functional``
``torch.linalg.norm`` (fft, special)
``torch.Tensor.add``               a Tensor method used as a function
``operator.add``                   ``operator.*`` (``_operator.*`` is read too)
``math.sqrt``                      ``math.*``
``getattr``, ``len``, ...          a few builtins
``Tensor.sum``                     a ``call_method`` target
``torch.nn.Linear``                a ``call_module`` class (defined in torch.nn.modules)
=================================  =========================================

Reading a name never imports a module or evaluates text: every name is looked
up in tables built from modules torch has already imported. Anything else is
a :class:`FormatError` (reading) or :class:`UnsupportedGraphError` (writing).
"""

from __future__ import annotations

import builtins
import math
import operator
import sys
import types
from collections.abc import Callable
from functools import cache

import torch
import torch.nn.functional
from torch import nn

from ember.ir.errors import FormatError, UnsupportedGraphError

OP_NAMESPACES = ("aten", "prims")
"""``torch.ops`` namespaces whose overloads may appear as targets."""

_BUILTINS = ("getattr", "len", "abs", "min", "max", "round", "int", "float", "bool", "pow", "divmod", "sum", "all", "any")

# Functions that touch files, the process or global configuration never appear in a graph we load.
_DENY = frozenset(
    {
        "save", "load", "from_file", "compile", "export", "set_default_dtype", "set_default_device",
        "set_default_tensor_type", "set_printoptions", "set_num_threads", "set_num_interop_threads",
        "manual_seed", "seed", "set_rng_state", "use_deterministic_algorithms", "set_warn_always",
        "set_float32_matmul_precision", "set_flush_denormal", "set_deterministic_debug_mode",
        "initial_seed", "get_rng_state", "load_library", "set_anomaly_enabled", "autograd",
    }
)  # fmt: skip

_EXTRA_TORCH: dict[str, Callable[[], object]] = {
    "torch._assert": lambda: torch._assert,
    "torch._C._set_grad_enabled": lambda: torch._C._set_grad_enabled,
    "torch.fx._symbolic_trace._assert_is_none": lambda: torch.fx._symbolic_trace._assert_is_none,
    "torch.amp.autocast_mode._enter_autocast": lambda: torch.amp.autocast_mode._enter_autocast,
    "torch.amp.autocast_mode._exit_autocast": lambda: torch.amp.autocast_mode._exit_autocast,
    "torch.Size": lambda: torch.Size,
    # nn.MultiheadAttention / TransformerEncoderLayer call these on their masks
    "torch.nn.functional._none_or_dtype": lambda: torch.nn.functional._none_or_dtype,
    "torch.nn.functional._canonical_mask": lambda: torch.nn.functional._canonical_mask,
    # TransformerEncoderLayer's inference fast path (one native op for the whole layer)
    "torch._transformer_encoder_layer_fwd": lambda: torch._transformer_encoder_layer_fwd,
}

_ARITH_DUNDERS = frozenset(
    ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor", "lshift", "rshift", "neg", "pos", "abs", "invert", "eq", "ne", "lt", "le", "gt", "ge", "getitem", "setitem", "len", "contains", "bool", "float", "int", "index"]
)


def _is_function(obj: object) -> bool:
    return callable(obj) and not isinstance(obj, (type, types.ModuleType))


@cache
def _function_table() -> tuple[dict[str, object], dict[int, str]]:
    """name -> object and id(object) -> first (preferred) name, built once."""
    by_name: dict[str, object] = {}
    by_id: dict[int, str] = {}

    def add(name: str, obj: object) -> None:
        by_name[name] = obj
        by_id.setdefault(id(obj), name)

    namespaces: list[tuple[str, object]] = [
        ("torch", torch),
        ("torch.nn.functional", torch.nn.functional),
        ("torch.linalg", torch.linalg),
        ("torch.fft", torch.fft),
        ("torch.special", torch.special),
    ]
    for prefix, module in namespaces:
        for name in sorted(dir(module)):
            if name.startswith("_") or name in _DENY:
                continue
            obj = getattr(module, name, None)
            if _is_function(obj):
                add(f"{prefix}.{name}", obj)
    for name in sorted(dir(operator)):
        obj = getattr(operator, name)
        if not name.startswith("_") and _is_function(obj):
            add(f"operator.{name}", obj)
    for name in sorted(dir(math)):
        obj = getattr(math, name)
        if not name.startswith("_") and _is_function(obj):
            add(f"math.{name}", obj)
    for name in _BUILTINS:
        add(name, getattr(builtins, name))
    for name, get in _EXTRA_TORCH.items():
        try:
            add(name, get())
        except AttributeError:  # not in this torch version
            continue
    return by_name, by_id


def tensor_method_allowed(name: str) -> bool:
    """True for Tensor methods that may be a ``call_method`` target."""
    if not isinstance(name, str) or not hasattr(torch.Tensor, name):
        return False
    if name.startswith("__") and name.endswith("__"):
        core = name[2:-2]
        return core in _ARITH_DUNDERS or (core[:1] in ("r", "i") and core[1:] in _ARITH_DUNDERS)
    return not name.startswith("_")


def _op_name(op: torch._ops.OpOverload | torch._ops.OpOverloadPacket) -> str:
    if isinstance(op, torch._ops.OpOverload):
        return f"{op.namespace}::{op._schema.name.split('::', 1)[-1]}.{op._overloadname}"
    return op._qualified_op_name


def target_name(target: object, *, node: str | None = None) -> str:
    """The stable string for a ``call_function`` target (writing side)."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        name = _op_name(target)
        if name.split("::", 1)[0] not in OP_NAMESPACES:
            raise UnsupportedGraphError(
                f"op {name} is outside the allowed namespaces {OP_NAMESPACES}", node=node, field="target"
            )
        return name
    _, by_id = _function_table()
    found = by_id.get(id(target))
    if found is not None:
        return found
    qual = getattr(target, "__qualname__", "")
    owner = qual.split(".", 1)[0] if isinstance(qual, str) else ""
    meth = getattr(target, "__name__", "")
    is_method = owner in ("Tensor", "TensorBase") and isinstance(meth, str) and tensor_method_allowed(meth)
    if is_method and getattr(torch.Tensor, meth, None) is target:
        return f"torch.Tensor.{meth}"
    where = f"{getattr(target, '__module__', '?')}.{qual or type(target).__name__}"
    raise UnsupportedGraphError(
        f"call_function target {where} is not in the ember.ir allow-list "
        "(torch.*, torch.nn.functional.*, torch.Tensor methods, operator.*, math.*, "
        f"a few builtins, torch.ops.{{{', '.join(OP_NAMESPACES)}}})",
        node=node,
        field="target",
    )


def resolve_target(name: str, *, node: str | None = None) -> object:
    """The object for a ``call_function`` target string (reading side)."""
    if not isinstance(name, str):
        raise FormatError(f"target must be a string, got {name!r}", node=node, field="target")
    if "::" in name:
        return _resolve_op(name, node)
    if name.startswith("_operator."):
        name = "operator." + name.removeprefix("_operator.")
    by_name, _ = _function_table()
    if name in by_name:
        return by_name[name]
    if name.startswith("torch.Tensor."):
        meth = name.removeprefix("torch.Tensor.")
        if tensor_method_allowed(meth):
            return getattr(torch.Tensor, meth)
    raise FormatError(f"unknown op target {name!r} (not in the ember.ir allow-list)", node=node, field="target")


def _resolve_op(name: str, node: str | None) -> object:
    namespace, _, rest = name.partition("::")
    if namespace not in OP_NAMESPACES:
        raise FormatError(f"unknown op target {name!r}: namespace {namespace!r} is not one of {OP_NAMESPACES}", node=node, field="target")
    op_name, dot, overload = rest.partition(".")
    if not op_name.isidentifier() or (dot and not overload.isidentifier()):
        raise FormatError(f"malformed op target {name!r} (expected like 'aten::add.Tensor')", node=node, field="target")
    try:
        packet = getattr(getattr(torch.ops, namespace), op_name)
        op = getattr(packet, overload) if dot else packet
    except (AttributeError, RuntimeError):
        raise FormatError(f"unknown op target {name!r}: no such operator in torch.ops.{namespace}", node=node, field="target") from None
    if not isinstance(op, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        raise FormatError(f"op target {name!r} is not an operator", node=node, field="target")
    return op


def method_name(target: str, *, node: str | None = None) -> str:
    """``"sum"`` -> ``"Tensor.sum"`` for a call_method target (writing side)."""
    if not tensor_method_allowed(target):
        raise UnsupportedGraphError(f"call_method target {target!r} is not a Tensor method ember.ir allows", node=node, field="target")
    return f"Tensor.{target}"


def resolve_method(name: str, *, node: str | None = None) -> str:
    """``"Tensor.sum"`` -> ``"sum"`` (reading side)."""
    if not isinstance(name, str) or not name.startswith("Tensor.") or not tensor_method_allowed(name[7:]):
        raise FormatError(f"unknown method target {name!r} (expected 'Tensor.<method>')", node=node, field="target")
    return name[7:]


def is_aten_level(name: str) -> bool:
    """True for targets allowed in the ``aten`` dialect: ops, operator.*, math.*, builtins, torch.sym_*."""
    return (
        "::" in name
        or name.startswith(("operator.", "_operator.", "math.", "torch.sym_", "torch._assert"))
        or name in _BUILTINS
    )


_MODULE_PREFIX = "torch.nn.modules."


def module_class_name(cls: type, *, node: str | None = None) -> str:
    """``torch.nn.Linear`` for classes exported by ``torch.nn``, else the defining module path."""
    module = getattr(cls, "__module__", "")
    if not (isinstance(cls, type) and issubclass(cls, nn.Module) and module.startswith(_MODULE_PREFIX)):
        raise UnsupportedGraphError(
            f"call_module on {getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls)}: only torch.nn "
            "leaf module classes can be stored in the graph IR (trace through user modules instead)",
            node=node,
            field="target",
        )
    if getattr(nn, cls.__name__, None) is cls:
        return f"torch.nn.{cls.__name__}"
    return f"{module}.{cls.__qualname__}"


def resolve_module_class(name: str, *, node: str | None = None) -> type[nn.Module]:
    """The class for a stored module class name; only torch.nn classes, never an import."""
    found: object = None
    if isinstance(name, str) and name.startswith("torch.nn.") and not name.startswith(_MODULE_PREFIX):
        found = getattr(nn, name.removeprefix("torch.nn."), None) if name.count(".") == 2 else None
    elif isinstance(name, str) and name.startswith(_MODULE_PREFIX):
        module_name, _, cls_name = name.rpartition(".")
        found = getattr(sys.modules.get(module_name), cls_name, None)
    if not (isinstance(found, type) and issubclass(found, nn.Module) and found.__module__.startswith(_MODULE_PREFIX)):
        raise FormatError(f"unknown module class {name!r} (only torch.nn module classes are allowed)", node=node, field="class")
    return found
