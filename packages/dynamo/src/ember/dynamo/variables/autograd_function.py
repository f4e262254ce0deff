"""``MyFunction.apply(...)`` of a ``torch.autograd.Function`` subclass, captured.

The user's ``forward`` is traced into a graph of its own (as a ``torch.cond``
branch is: ``variables.cond``), on a ``ctx`` tracker that records
``save_for_backward`` and attribute writes. The captured graph holds one node
calling a ``TracedFunction``: an ``autograd.Function`` whose forward runs that
graph and whose backward calls the user's own ``backward`` with a context
holding what the forward saved. So every backend runs the forward as traced,
and aotgrad, tracing the joint graph, records the ATen ops of the user's
backward (it differentiates through it, never through the forward).

Covered: the classic form (``forward(ctx, *args)``, ``backward(ctx, *grads)``)
and the ``setup_context`` form (``forward(*args)``, then
``setup_context(ctx, inputs, output)``, both traced into the one graph),
``ctx.save_for_backward``, ``ctx.saved_tensors``, ``ctx.needs_input_grad``,
``ctx.mark_non_differentiable`` (of outputs), ``ctx.mark_dirty`` (of inputs the
forward changes in place and returns), ``ctx.set_materialize_grads`` and
attributes (tensors are saved; other values must be constants). A forward that
changes Python state or a tensor it does not mark dirty, or outputs other than
tensors are graph breaks that say so.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.fx

from ember.ir import Attr

from ..errors import Unsupported
from ..trace_rules import GraphCallable
from .base import VariableTracker
from .classes import ClassVariable
from .cond import erase_moved, extract_subgraph, tensors_of, trace_subgraph
from .constant import ConstantVariable
from .functions import UserFunctionVariable
from .lists import TupleVariable
from .tensor import TensorVariable

if TYPE_CHECKING:
    from ..translator_core import TranslatorCore as Tx

_UNSUPPORTED_CTX = ("mark_dirty", "mark_non_differentiable", "set_materialize_grads", "saved_variables")


class _SavedCtx:
    """The ``ctx`` the user's backward gets."""

    def __init__(self, saved: tuple[torch.Tensor, ...], attrs: dict[str, Any], needs: tuple[bool, ...]) -> None:
        self.__dict__.update(attrs)
        self.saved_tensors = saved
        self.needs_input_grad = needs


@dataclass(frozen=True)
class TracedFunction:
    """One captured ``apply``: the traced forward and how its outputs map back."""

    cls: Any  # the user's autograd.Function subclass
    graph: torch.fx.GraphModule
    n_out: int
    single: bool
    n_saved: int
    tensor_attrs: tuple[str, ...]
    const_attrs: tuple[tuple[str, Any], ...]
    #: for each argument of the user's forward: its index among the node's inputs, or None
    arg_inputs: tuple[int | None, ...]
    n_inputs: int
    #: outputs the forward marked non-differentiable (``ctx.mark_non_differentiable``)
    non_differentiable: tuple[int, ...] = ()
    #: ``ctx.set_materialize_grads(...)`` (True: torch's default)
    materialize_grads: bool = True
    #: inputs (indices among the node's inputs) the forward changed in place (``ctx.mark_dirty``)
    dirty: tuple[int, ...] = ()

    def __call__(self, *inputs: torch.Tensor) -> Any:
        outs = _Apply.apply(self, *inputs)  # type: ignore[no-untyped-call]
        return outs[0] if self.single else tuple(outs)


class _Apply(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, spec: TracedFunction, *inputs: torch.Tensor) -> Any:
        outs = list(spec.graph(*inputs))
        ctx.spec = spec
        ctx.save_for_backward(*outs[spec.n_out:])
        if spec.dirty:
            ctx.mark_dirty(*[inputs[i] for i in spec.dirty])
        if spec.non_differentiable:
            ctx.mark_non_differentiable(*[outs[i] for i in spec.non_differentiable])
        if not spec.materialize_grads:
            ctx.set_materialize_grads(False)
        return tuple(outs[: spec.n_out])

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        spec: TracedFunction = ctx.spec
        stored = ctx.saved_tensors
        attrs = dict(spec.const_attrs)
        attrs.update(zip(spec.tensor_attrs, stored[spec.n_saved:], strict=True))
        needs = tuple(
            False if i is None else bool(ctx.needs_input_grad[1 + i]) for i in spec.arg_inputs
        )
        got = spec.cls.backward(_SavedCtx(tuple(stored[: spec.n_saved]), attrs, needs), *grads)
        if not isinstance(got, tuple):
            got = (got,)
        result: list[torch.Tensor | None] = [None] * spec.n_inputs
        for i, g in zip(spec.arg_inputs, got, strict=False):
            if i is None or g is None:
                continue
            result[i] = g if result[i] is None else result[i] + g
        return (None, *result)


class CtxVariable(VariableTracker):
    """The ``ctx`` of a forward being traced. It is made by this capture and never
    leaves it, so what the forward records is kept in plain fields."""

    fresh = True

    def __init__(self, needs: tuple[bool, ...]) -> None:
        super().__init__(None)
        self.needs = needs
        self.saved: list[TensorVariable] | None = None
        self.attrs: dict[str, VariableTracker] = {}
        self.non_differentiable: list[TensorVariable] = []
        self.dirty: list[TensorVariable] = []
        self.materialize_grads = True

    def describe(self) -> str:
        return "the `ctx` of an autograd.Function forward"

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        if name in self.attrs:
            return self.attrs[name]
        if name == "needs_input_grad":
            return ConstantVariable(self.needs)
        if name == "save_for_backward":
            return _SaveForBackward(self)
        if name == "saved_tensors" and self.saved is not None:
            return TupleVariable(list(self.saved))
        if name in ("mark_non_differentiable", "set_materialize_grads", "mark_dirty"):
            return _CtxRecorder(self, name)
        raise Unsupported(f"`ctx.{name}` in an autograd.Function forward")

    def store_attr(self, tx: Tx, name: str, value: VariableTracker) -> None:
        if name in _UNSUPPORTED_CTX or name in ("needs_input_grad", "saved_tensors"):
            raise Unsupported(f"writing `ctx.{name}` in an autograd.Function forward")
        if not isinstance(value, TensorVariable) and not value.is_python_constant():
            raise Unsupported(f"`ctx.{name} = ` {value.describe()} in an autograd.Function forward")
        self.attrs[name] = value


class _SaveForBackward(VariableTracker):
    def __init__(self, ctx: CtxVariable) -> None:
        super().__init__(None)
        self.ctx = ctx

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        if kwargs or not all(isinstance(a, TensorVariable) for a in args):
            raise Unsupported("ctx.save_for_backward of values other than tensors")
        self.ctx.saved = [a for a in args if isinstance(a, TensorVariable)]
        return ConstantVariable(None)


class _CtxRecorder(VariableTracker):
    """``ctx.mark_non_differentiable`` / ``ctx.set_materialize_grads``: recorded, and
    replayed on the real ``ctx`` when the captured forward runs."""

    def __init__(self, ctx: CtxVariable, name: str) -> None:
        super().__init__(None)
        self.ctx = ctx
        self.name = name

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        if kwargs:
            raise Unsupported(f"`ctx.{self.name}` with keyword arguments")
        if self.name == "set_materialize_grads":
            if len(args) != 1 or not args[0].is_python_constant():
                raise Unsupported("`ctx.set_materialize_grads` of a value not known while tracing")
            self.ctx.materialize_grads = bool(args[0].as_python_constant())
        else:
            if not all(isinstance(a, TensorVariable) for a in args):
                raise Unsupported(f"`ctx.{self.name}` of values other than tensors")
            marked = self.ctx.dirty if self.name == "mark_dirty" else self.ctx.non_differentiable
            marked.extend(a for a in args if isinstance(a, TensorVariable))
        return ConstantVariable(None)


class _ForwardThenSetup(VariableTracker):
    """The ``setup_context`` form traced as one call: ``output = forward(*args)``, then
    ``setup_context(ctx, args, output)``; its result is ``output``."""

    def __init__(self, forward: VariableTracker, setup: VariableTracker, ctx: CtxVariable) -> None:
        super().__init__(None)
        self.forward = forward
        self.setup = setup
        self.ctx = ctx

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        output = self.forward.call_function(tx, list(args), {})
        self.setup.call_function(tx, [self.ctx, TupleVariable(list(args)), output], {})
        return output


def _python_staticmethod(cls: type, name: str) -> Any:
    found = inspect.getattr_static(cls, name, None)
    if not isinstance(found, staticmethod) or not inspect.isfunction(found.__func__):
        raise Unsupported(f"autograd.Function `{cls.__name__}` without a Python `{name}` staticmethod")
    return found.__func__


def _is_classic(cls: type) -> bool:
    base = torch.autograd.function._SingleLevelFunction
    setup = inspect.getattr_static(cls, "setup_context", None)
    return setup is inspect.getattr_static(base, "setup_context")


class AutogradApplyVariable(VariableTracker):
    """``cls.apply`` of an ``autograd.Function`` subclass."""

    def __init__(self, cls: type, cls_var: VariableTracker) -> None:
        super().__init__(None)
        self.cls = cls
        self.cls_var = cls_var

    def describe(self) -> str:
        return f"`{self.cls.__name__}.apply`"

    def call_function(
        self, tx: Tx, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        cls = self.cls
        what = f"autograd.Function forward `{cls.__name__}.forward`"
        if kwargs:
            raise Unsupported(f"{self.describe()} with keyword arguments")
        classic = _is_classic(cls)
        forward = _python_staticmethod(cls, "forward")
        setup = None if classic else _python_staticmethod(cls, "setup_context")
        for a in args:
            if not isinstance(a, TensorVariable) and not a.is_python_constant():
                raise Unsupported(f"{self.describe()} of {a.describe()} (tensors and constants only)")
        tensor_args = [a for a in args if isinstance(a, TensorVariable)]
        needs = tuple(isinstance(a, TensorVariable) and a.example.requires_grad for a in args)
        ctx = CtxVariable(needs)
        fn = self._method(tx, "forward", forward)
        def dirty() -> list[torch.fx.Node]:
            return [v.node for v in ctx.dirty]

        if setup is None:
            added, result = trace_subgraph(tx, fn, [ctx, *args], what, dirty)
        else:
            both = _ForwardThenSetup(fn, self._method(tx, "setup_context", setup), ctx)
            added, result = trace_subgraph(tx, both, list(args), what, dirty)
        outs, single = tensors_of(result, what)
        out_index = {o.node: i for i, o in enumerate(outs)}
        if any(v.node not in out_index for v in ctx.non_differentiable):
            raise Unsupported("`ctx.mark_non_differentiable` of a tensor that is not an output")
        non_differentiable = tuple(sorted({out_index[v.node] for v in ctx.non_differentiable}))
        arg_nodes = {a.node for a in tensor_args}
        for v in ctx.dirty:
            if v.node not in arg_nodes or v.node not in out_index:
                raise Unsupported("`ctx.mark_dirty` of a tensor that is not an input the forward returns")
        saved = list(ctx.saved or [])
        tensor_attrs = [(k, v) for k, v in ctx.attrs.items() if isinstance(v, TensorVariable)]
        const_attrs = tuple((k, v.as_python_constant()) for k, v in ctx.attrs.items() if not isinstance(v, TensorVariable))
        everything = [*outs, *saved, *(v for _, v in tensor_attrs)]
        gm, inputs, _ = extract_subgraph(added, everything, tensor_args, what)
        erase_moved(tx, added)
        index = {n: i for i, n in enumerate(inputs)}
        spec = TracedFunction(
            cls, gm, len(outs), single, len(saved), tuple(k for k, _ in tensor_attrs), const_attrs,
            tuple(index[a.node] if isinstance(a, TensorVariable) else None for a in args), len(inputs),
            non_differentiable, ctx.materialize_grads, tuple(sorted({index[v.node] for v in ctx.dirty})),
        )
        target = GraphCallable(spec, f"{cls.__name__}_apply")
        with tx.output.fake_mode:
            example = target(*[n.meta["example_value"] for n in inputs])
        node = tx.output.graph.call_function(target, tuple(inputs))
        return tx.output.wrap_result(node, example, [])

    def _method(self, tx: Tx, name: str, fn: Any) -> VariableTracker:
        src = Attr(self.cls_var.source, name) if self.cls_var.source is not None else None
        return tx.wrap(fn, src) if src is not None else UserFunctionVariable(fn)


def is_autograd_function(cls: Any) -> bool:
    return (
        isinstance(cls, type)
        and issubclass(cls, torch.autograd.Function)
        and cls is not torch.autograd.Function
    )


class AutogradFunctionClassVariable(ClassVariable):
    """A ``torch.autograd.Function`` subclass: its ``apply`` is captured (module doc)."""

    def var_getattr(self, tx: Tx, name: str) -> VariableTracker:
        if name == "apply":
            return AutogradApplyVariable(self.value, self)
        return super().var_getattr(tx, name)
