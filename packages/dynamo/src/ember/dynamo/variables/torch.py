"""torch functions, ``torch.nn.functional`` and grad-mode context managers.

A torch function called on symbolic values becomes one ``call_function``
node; its result's metadata comes from running it on fake tensors. A torch
function whose result holds no tensor (``torch.is_floating_point(x)``) folds
to a constant, which is safe because the inputs' metadata is guarded.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import torch

from ember.ir import Attr, Source

from ..errors import Unsupported
from ..mutable import Box
from .base import VariableTracker
from .constant import ConstantVariable
from .known_scalars import MAKERS, tensor_of_size
from .lists import BaseListVariable, ListVariable
from .ndarray import NumpyNdarrayVariable, as_tensor
from .sym import SymNodeVariable
from .tensor import TensorVariable

if TYPE_CHECKING:
    from ..codegen import PyCodegen
    from ..translator_core import TranslatorCore as Tx

# Functions that change process state or do I/O: never run while tracing.
NOT_TRACEABLE = frozenset(
    {
        "manual_seed",
        "seed",
        "initial_seed",
        "set_default_dtype",
        "set_default_device",
        "set_printoptions",
        "set_grad_enabled_",
        "save",
        "load",
        "use_deterministic_algorithms",
        "set_num_threads",
        "synchronize",
    }
)
# Functions folded when every argument is a constant.
FOLDABLE = {
    torch.device,
    torch.Size,
    torch.finfo,
    torch.iinfo,
    torch.is_grad_enabled,
    torch.get_default_dtype,
    torch.is_autocast_enabled,
    torch.promote_types,
    torch.result_type,
    torch.can_cast,
}


def _annotate(args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    if len(args) != 2 or kwargs:
        raise Unsupported("torch.jit.annotate takes (type, value)")
    return args[1]


#: torch functions that are Python bookkeeping, not tensor ops: what a call means.
PYTHON_LEVEL: dict[Any, Any] = {
    torch.jit.annotate: _annotate,
    torch.jit.is_scripting: lambda args, kwargs: ConstantVariable(False),  # type: ignore[attr-defined]
    torch.jit.is_tracing: lambda args, kwargs: ConstantVariable(False),  # type: ignore[attr-defined]
    torch._C._get_tracing_state: lambda args, kwargs: ConstantVariable(None),
}


def _telemetry(args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """``torch._C._log_api_usage_once(name)`` (torchvision calls it in every op): logged once
    per process while tracing, as the first eager call would; nothing in the graph."""
    if len(args) == 1 and not kwargs and args[0].is_python_constant():
        torch._C._log_api_usage_once(str(args[0].as_python_constant()))
    return ConstantVariable(None)


PYTHON_LEVEL[torch._C._log_api_usage_once] = _telemetry

#: dropouts that return their input itself when ``p == 0`` or not training (eager's
#: ``_dropout_impl``; ``nn.Dropout`` in eval mode): ``F.dropout`` and ``torch.dropout``
DROPOUTS = frozenset({torch.nn.functional.dropout, torch.dropout})


def dropout_identity(
    args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker | None:
    """The input variable itself where a dropout is known not to drop (constant ``p == 0``
    or ``training`` False), as eager returns it; else None (the op goes in the graph).
    Traced with symbolic sizes the op would go through torch's Python decomposition,
    which returns ``input.clone()``: a copy where eager returns the input (fuzz seed 240)."""
    named = dict(zip(("input", "p", "training"), args))
    named.update({("training" if k == "train" else k): v for k, v in kwargs.items()})
    x, p, training = named.get("input"), named.get("p"), named.get("training")
    if not isinstance(x, TensorVariable):  # (``inplace`` returns the input all the same)
        return None
    p_value = p.as_python_constant() if p is not None and p.is_python_constant() else (
        0.5 if p is None else None)
    train_value = training.as_python_constant() if training is not None and (
        training.is_python_constant()) else (True if training is None else None)
    if p_value is None or train_value is None:
        return None
    if not isinstance(p_value, (int, float)) or not 0.0 <= p_value <= 1.0:
        return None  # eager raises for p outside [0, 1]: the op in the graph does too
    return x if (p_value == 0 or not train_value) else None


#: ``torch._check*``: the argument index of the condition (the rest are messages, error
#: types or callables making the message, which only matter when the check fails)
CHECKS: dict[Any, int] = {
    fn: index
    for name, index in (
        ("_check", 0), ("_check_index", 0), ("_check_value", 0), ("_check_type", 0),
        ("_check_not_implemented", 0), ("_check_with", 1),
    )
    if (fn := getattr(torch, name, None)) is not None
}  # fmt: skip


def assert_call(
    tx: Tx, fn: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker | None:
    """``torch._assert(cond, msg)`` and ``torch._check*(cond, ...)``.

    A condition known while tracing (a constant, or a size relation decided, and guarded,
    on the sizes the graph is specialized to) vanishes when it holds. A tensor condition of
    ``torch._assert`` becomes ``torch._assert_async(cond, msg)`` in the graph: checked when
    the graph runs, as torch.compile does. A condition known to fail, or one that cannot be
    decided here, is a graph break, so the check runs eagerly and raises its own error.
    Returns None for a ``torch._check`` whose condition is symbolic and undecided (an
    unbacked size relation): it is traced as before, as a call in the graph."""
    is_assert = fn is torch._assert
    index = 0 if is_assert else CHECKS[fn]
    names = ("condition", "message") if is_assert else ("cond", "message")
    if len(args) > index:
        cond = args[index]
    elif names[0] in kwargs:
        cond = kwargs[names[0]]
    else:
        raise Unsupported(f"`torch.{fn.__name__}` called without a condition")
    if cond.is_python_constant():
        holds = bool(cond.as_python_constant())
    elif isinstance(cond, SymNodeVariable):
        try:
            holds = cond.truth(tx)
        except Exception:
            node = cond.example.node
            values = getattr(getattr(node, "env", None), "unbacked_values", {})
            if not is_assert and isinstance(cond.example, torch.SymBool) and any(
                    s in values for s in getattr(node.expr, "free_symbols", ())):
                # a bound on an ``.item()`` value (``torch._check(k >= 0)``): its range from
                # here on, and checked when the graph runs (ADR 0060); any other condition
                # breaks the graph, as before
                tx.output.create_op("call_function", torch.ops.aten._assert_scalar.default,
                                    [cond, ConstantVariable(f"torch.{fn.__name__} failed")], {})
                return ConstantVariable(None)
            return None  # decided at run time (unbacked): the call stays in the graph
    elif is_assert and isinstance(cond, TensorVariable):
        msg = args[1] if len(args) > 1 else kwargs.get("message")
        text = msg.as_python_constant() if msg is not None and msg.is_python_constant() else None
        if not isinstance(text, str):
            raise Unsupported("`torch._assert` on a tensor with a message that is not a constant string")
        tx.output.create_op("call_function", torch._assert_async, [cond, ConstantVariable(text)], {})
        return ConstantVariable(None)
    else:
        raise Unsupported(f"`torch.{fn.__name__}` of {cond.describe()} cannot be decided while tracing")
    if not holds:
        raise Unsupported(f"`torch.{fn.__name__}` fails while tracing: it runs eagerly to raise")
    return ConstantVariable(None)


def fn_name(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or fn)


class TorchFunctionVariable(VariableTracker):
    def __init__(self, value: Any, source: Source | None = None) -> None:
        super().__init__(source)
        self.value = value

    def describe(self) -> str:
        mod = getattr(self.value, "__module__", None) or "torch"
        return f"`{mod}.{fn_name(self.value)}`"

    def as_python_constant(self) -> Any:
        return self.value

    def python_type(self) -> type:
        return type(self.value)

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        fn = self.value
        if any(isinstance(a, NumpyNdarrayVariable) for a in [*args, *kwargs.values()]):
            return _call_on_arrays(tx, fn, args, kwargs)
        if getattr(fn, "__name__", "") in NOT_TRACEABLE:
            raise Unsupported(f"{self.describe()} changes global state and cannot be traced")
        if fn is getattr(torch, "_check_is_size", None) and len(args) == 1 and not kwargs:
            fn, args = torch._check, [tx.binary(operator.ge, args[0], ConstantVariable(0))]
        if fn is torch._assert or fn in CHECKS:
            checked = assert_call(tx, fn, args, kwargs)
            if checked is not None:
                return checked
        if fn in DROPOUTS:
            same = dropout_identity(args, kwargs)
            if same is not None:
                return same
        python_level = PYTHON_LEVEL.get(fn)
        if python_level is not None:
            return python_level(args, kwargs)  # type: ignore[no-any-return]
        if fn in (torch.no_grad, torch.enable_grad, torch.set_grad_enabled, torch.inference_mode):
            return grad_mode_ctx(tx, fn, args, kwargs)
        if any(fn is a for a in AUTOCAST_CLASSES):
            return autocast_ctx(fn, args, kwargs)
        if is_foreach_map(fn):
            return foreach_map_unrolled(tx, args, kwargs)
        if fn in FOLDABLE or fn is torch.Tensor:
            consts = [*args, *kwargs.values()]
            if all(a.is_python_constant() for a in consts):
                try:
                    value = fn(
                        *[a.as_python_constant() for a in args],
                        **{k: v.as_python_constant() for k, v in kwargs.items()},
                    )
                except Exception as e:
                    raise Unsupported(f"{self.describe()} raised {type(e).__name__}: {e}") from e
                if fn in (torch.is_grad_enabled, torch.get_default_dtype, torch.is_autocast_enabled):
                    tx.output.guard_global_state()
                return tx.wrap_constant(value)
        if fn in MAKERS:
            made = tensor_of_size(tx, args, kwargs)
            if made is not None:
                return made
        if (getattr(fn, "__module__", None) or "").startswith("torch.distributed."):
            # meshes, placements, modules among the arguments are bound into the node
            return tx.output.create_bound_op(fn, args, kwargs)
        return tx.output.create_op("call_function", fn, args, kwargs)

    def reconstruct(self, cg: PyCodegen) -> None:
        cg.load_const(self.value)


def is_foreach_map(fn: Any) -> bool:
    """``torch._higher_order_ops.foreach_map.foreach_map`` (found by name: never imported)."""
    return getattr(fn, "__name__", None) == "foreach_map" and str(
        getattr(fn, "__module__", "")
    ).startswith("torch._higher_order_ops")


def foreach_map_unrolled(
    tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker:
    """``foreach_map(op, *operands, **kwargs)``: ``op`` traced once per element of the list
    operands (other operands are passed to every call), giving a list of results.

    The graph holds the element-wise ops side by side; the backend fuses them
    horizontally as it would any independent pointwise ops.
    """
    if not args:
        raise Unsupported("foreach_map called without a function")
    op, operands = args[0], args[1:]
    lists = [isinstance(a, BaseListVariable) for a in operands]
    lengths = {len(a.unpack(tx)) for a, is_list in zip(operands, lists) if is_list}
    if len(lengths) != 1:
        raise Unsupported(
            "foreach_map needs list operands of one length, got "
            + (f"lengths {sorted(lengths)}" if lengths else "no list operand")
        )
    results = []
    for i in range(lengths.pop()):
        call_args = [a.unpack(tx)[i] if is_list else a for a, is_list in zip(operands, lists)]
        results.append(op.call_function(tx, call_args, dict(kwargs)))
    return ListVariable(results)


# torch.amp's (untyped) enter/exit functions, as graph targets and to run
ENTER_AUTOCAST: Any = torch.amp.autocast_mode._enter_autocast
EXIT_AUTOCAST: Any = torch.amp.autocast_mode._exit_autocast

AUTOCAST_CLASSES: tuple[Any, ...] = tuple(
    c
    for c in (
        getattr(torch, "autocast", None),
        getattr(getattr(torch, "amp", None), "autocast", None),
    )
    if c is not None
)


def autocast_ctx(fn: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> VariableTracker:
    """``torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)``."""
    if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
        raise Unsupported("torch.autocast with non-constant arguments")
    names = ["device_type", "dtype", "enabled", "cache_enabled"]
    values: dict[str, Any] = {"dtype": None, "enabled": True, "cache_enabled": None}
    values.update({names[i]: a.as_python_constant() for i, a in enumerate(args)})
    values.update({k: v.as_python_constant() for k, v in kwargs.items()})
    unknown = set(values) - set(names)
    if unknown or "device_type" not in values:
        raise Unsupported(f"torch.autocast arguments {sorted(unknown) or 'without device_type'}")
    device = values["device_type"]
    dtype = values["dtype"] or torch.get_autocast_dtype(device)
    return AutocastVariable((device, dtype, bool(values["enabled"]), values["cache_enabled"]))


class AutocastVariable(VariableTracker):
    """``torch.autocast(...)`` as a ``with`` context: the graph gets
    ``torch.amp._enter_autocast``/``_exit_autocast`` nodes, and the fake
    tensors tracing the ops inside run under the same autocast state."""

    def __init__(self, params: tuple[Any, ...]) -> None:
        super().__init__(None)
        self.params = params
        #: (enter node, real autocast mode) of each entry not exited yet
        self.entered: Box[tuple[tuple[Any, Any], ...]] = Box(())

    def describe(self) -> str:
        return f"torch.autocast{self.params}"

    def enter(self, tx: Tx) -> VariableTracker:
        node = tx.output.graph.call_function(ENTER_AUTOCAST, self.params)
        mode = ENTER_AUTOCAST(*self.params)
        tx.output.trail.set(self.entered, (*self.entered.value, (node, mode)))
        tx.output.cleanups.append(lambda: mode.__exit__(None, None, None))
        return ConstantVariable(None)

    def exit(self, tx: Tx) -> VariableTracker:
        *rest, (node, mode) = self.entered.value
        tx.output.trail.set(self.entered, tuple(rest))
        tx.output.graph.call_function(EXIT_AUTOCAST, (node,))
        EXIT_AUTOCAST(mode)
        tx.output.cleanups.pop()
        return ConstantVariable(None)

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        if name in ("__enter__", "__exit__"):
            return ContextMethodVariable(self, name)
        return super().var_getattr(tx, name)


def grad_mode_ctx(
    tx: Tx, fn: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker:
    consts = [a.as_python_constant() for a in args]
    ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
    if fn is torch.no_grad:
        target = False
    elif fn is torch.enable_grad:
        target = True
    elif fn is torch.inference_mode:
        # Inside a graph, inference mode is grad mode off: the ops and values are the
        # same, but tensors made in the block are not inference tensors (as torch.compile's
        # graphs, which trace the block with grad off too).
        mode = consts[0] if consts else ckw.get("mode", True)
        return GradModeVariable(False if mode else None)
    else:
        target = bool(consts[0] if consts else ckw["mode"])
        # set_grad_enabled(...) takes effect when called, not only in `with`.
        var = GradModeVariable(target, entered_on_call=True)
        var.enter(tx)
        return var
    return GradModeVariable(target)


#: context objects whose ``with`` (and use as a decorator) is traced
GRAD_MODE_OBJECTS: tuple[type, ...] = (
    torch.no_grad, torch.enable_grad, torch.set_grad_enabled, torch.inference_mode,
)


class GradModeVariable(VariableTracker):
    """``torch.no_grad()`` / ``enable_grad()`` / ``set_grad_enabled(b)``.

    Entering records a ``torch._C._set_grad_enabled`` node in the graph (so
    the compiled graph runs its ops in the right mode) and flips the mode
    for the fake tensors that trace the ops inside.
    """

    def __init__(
        self,
        target: bool | None,
        source: Source | None = None,
        *,
        priors: tuple[bool, ...] = (),
        entered_on_call: bool = False,
    ) -> None:
        super().__init__(source)
        self.target = target
        #: the grad mode before each entry not exited yet, innermost last
        self.priors: Box[tuple[bool, ...]] = Box(priors)
        #: ``set_grad_enabled(b)`` took effect when called: its ``__enter__`` does nothing
        self.entered_on_call: Box[bool] = Box(entered_on_call)

    @property
    def prior(self) -> tuple[bool, ...]:
        return self.priors.value

    def describe(self) -> str:
        return f"grad mode context ({self.target})"

    def enter(self, tx: Tx) -> VariableTracker:
        tx.output.trail.set(self.priors, (*self.priors.value, torch.is_grad_enabled()))
        if self.target is not None:
            tx.output.set_grad_enabled(self.target)
        return ConstantVariable(None)

    def exit(self, tx: Tx) -> VariableTracker:
        *rest, prior = self.priors.value
        tx.output.trail.set(self.priors, tuple(rest))
        if self.target is not None:
            tx.output.set_grad_enabled(prior)
        return ConstantVariable(None)

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        if name in ("__enter__", "__exit__"):
            return ContextMethodVariable(self, name)
        if name == "clone" and self.target is not None:
            # `torch.no_grad()` used as a decorator makes a fresh context per call
            return TorchFunctionVariable(torch.enable_grad if self.target else torch.no_grad)
        return super().var_getattr(tx, name)


class GradModeExit:
    """The ``__exit__`` of a grad-mode ``with`` block that was split by a
    graph break: the resume function keeps it on its stack, and the block's
    normal or exceptional exit calls it to restore the grad mode from before
    the block."""

    __slots__ = ("prior",)

    def __init__(self, prior: bool | None) -> None:
        self.prior = prior

    def __call__(self, *exc_info: object) -> bool:
        if self.prior is not None:
            torch._C._set_grad_enabled(self.prior)
        return False

    def __repr__(self) -> str:
        return f"GradModeExit(prior={self.prior})"


class ContextMethodVariable(VariableTracker):
    def __init__(self, ctx: GradModeVariable | AutocastVariable, name: str) -> None:
        super().__init__(None)
        self.ctx = ctx
        self.name = name

    def describe(self) -> str:
        return f"`{self.name}` of {self.ctx.describe()}"

    def reconstruct(self, cg: PyCodegen) -> None:
        if not isinstance(self.ctx, GradModeVariable) or self.name != "__exit__" or not self.ctx.prior:
            super().reconstruct(cg)
            return
        prior = self.ctx.prior[-1] if self.ctx.target is not None else None
        cg.load_const(GradModeExit(prior))

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        if isinstance(self.ctx, AutocastVariable):
            return self.ctx.enter(tx) if self.name == "__enter__" else self.ctx.exit(tx)
        ctx = self.ctx
        if self.name == "__enter__":
            if ctx.entered_on_call.value:
                tx.output.trail.set(ctx.entered_on_call, False)
                return ConstantVariable(None)
            return ctx.enter(tx)
        return ctx.exit(tx)


def wrap_grad_mode_exit(tx: Tx, value: GradModeExit, source: Source) -> VariableTracker:
    """A ``GradModeExit`` on a resume function's stack: the exit of a block
    entered before the split (guarded on the mode it restores)."""
    tx.output.guards.add_type(source, value)
    tx.output.guards.add_constant(Attr(source, "prior"), value.prior)
    ctx = GradModeVariable(
        None if value.prior is None else not value.prior,
        priors=() if value.prior is None else (value.prior,),
    )
    return ContextMethodVariable(ctx, "__exit__")


#: torch functions that take a NumPy array (``torch.from_numpy`` and kin)
ARRAY_TAKERS = (torch.from_numpy, torch.as_tensor, torch.asarray, torch.tensor)


def _call_on_arrays(
    tx: Tx, fn: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker:
    """``torch.from_numpy(a)``: the array's graph tensor, as a tensor (no copy; a hint
    to the compiler, as TorchDynamo has it). ``torch.tensor(a)`` copies."""
    if not any(fn is f for f in ARRAY_TAKERS) or not args or not isinstance(args[0], NumpyNdarrayVariable):
        name = getattr(fn, "__name__", str(fn))
        raise Unsupported(f"`torch.{name}` given a NumPy array (only torch.from_numpy, "
                          "as_tensor, asarray and tensor take one)")
    if len(args) != 1:
        raise Unsupported(f"`torch.{fn.__name__}` of a NumPy array with extra positional arguments")
    tensor: VariableTracker = as_tensor(args[0])
    if fn is torch.from_numpy:
        if kwargs:
            raise Unsupported("`torch.from_numpy` takes no keyword arguments")
        return tensor
    if kwargs:
        tensor = tx.output.create_op("call_method", "to", [tensor], kwargs)
    if fn is torch.tensor:
        tensor = tx.output.create_op("call_method", "clone", [tensor], {})
    return tensor
