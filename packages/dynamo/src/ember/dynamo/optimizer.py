"""Compiled optimizer steps: ``compile(optimizer.step)`` (ADR 0023, ADR 0024).

An optimizer step is a loop over parameter lists whose Python control flow
depends only on hyperparameters and tensor metadata, never on tensor values
(torch.optim takes its value-free paths when ``torch.compiler.is_compiling()``
is true, as it is here). So ember captures it without the bytecode
interpreter: the optimizer's own step runs once on a shadow of the optimizer
whose parameters, gradients and state are fake tensors, under a
``TorchFunctionMode`` that records every torch call into one FX graph
(torch dialect, like the graphs capture makes). The graph's inputs are the
parameters, their gradients, the state tensors and each group's learning rate
as a 0-d float64 tensor; it updates parameters and state in place and returns
the state a first step creates (nothing on later steps). The backend compiles it like any captured graph.

A structural key over the optimizer (parameter identities, which have a
gradient, every tensor's metadata, the state's keys, each group's
hyperparameters other than ``lr``) guards the compiled step: a change
recaptures (up to ``cache_size_limit`` entries, then runs eagerly). ``lr``
is an input, so schedulers change it without recompiling (ADR 0024).

A first step, which creates the optimizer's state, compiles too. Where the
optimizer creates its state in ``_init_group`` (Adam's and AdamW's moments and
step count, as torch.optim does for most optimizers), that runs eagerly first,
as eager's step would run it, and the step compiles with the layout of every
later step: one compile (:func:`init_state`). Where the step's own code creates
state (SGD's momentum buffers are clones of the first gradients), the created
tensors are the graph's outputs, installed in ``optimizer.state`` after it ran,
in eager's order; the next step has another layout and compiles once more. Steps run eagerly (with the reason logged under ``dynamo``) with a
``closure``, with ``differentiable=True``, or when the step cannot be traced.
Optimizer step hooks and the profiler label run as in eager, around the
compiled step.
"""

from __future__ import annotations

import copy
import inspect
import operator
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.fx
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

from .cache import RecompileError, register_cache
from .frame import CompilerFn
from .logs import get_logger
from .optimizer_guards import StepGuards

if TYPE_CHECKING:
    from .function_entry import Runtime

log = get_logger("dynamo")

# Tensor dunders as the ``operator`` functions capture uses (args in operator order).
_BINARY = {
    "__add__": operator.add, "__sub__": operator.sub, "__mul__": operator.mul,
    "__truediv__": operator.truediv, "__pow__": operator.pow,
}  # fmt: skip
_REFLECTED = {
    "__radd__": operator.add, "__rsub__": operator.sub, "__rmul__": operator.mul,
    "__rtruediv__": operator.truediv, "__rpow__": operator.pow,
}  # fmt: skip


# methods whose ``alpha=``/``value=`` scalar may be a traced tensor (see ``_Recorder._scaled``)
_SCALED = ("add", "sub", "addcdiv", "addcmul")


class StepNotTraceable(Exception):
    """The step did something the recorder cannot put in a graph."""


class _Recorder(TorchFunctionMode):
    """Records torch calls on traced (fake) tensors into ``graph``."""

    def __init__(self, graph: torch.fx.Graph) -> None:
        super().__init__()
        self.graph = graph
        #: id(fake tensor) -> (the tensor, kept alive so ids stay unique; its node)
        self.nodes: dict[int, tuple[torch.Tensor, torch.fx.Node]] = {}

    def bind(self, tensor: torch.Tensor, node: torch.fx.Node) -> None:
        self.nodes[id(tensor)] = (tensor, node)

    def node_of(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            found = self.nodes.get(id(value))
            if found is None or found[0] is not value:
                raise StepNotTraceable(f"a tensor the step did not get as an input: {tuple(value.shape)}")
            return found[1]
        return value

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        scale = kwargs.get("alpha", kwargs.get("value"))
        if isinstance(scale, torch.Tensor) and name.rstrip("_") in _SCALED:
            return self._scaled(name, args, scale)
        if name.startswith("_foreach_"):
            return self._per_tensor(name, args, kwargs)
        if name in ("__rpow__", "pow") and not kwargs:
            args = self._double_exponents(name, args)
        return self._call(func, name, args, kwargs)

    def _per_tensor(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``torch._foreach_<op>[_](lists, ...)`` as one ``<op>`` call per tensor.

        On CPU the foreach kernels are loops over these same per-tensor kernels,
        so the values are eager's; the backend sees ordinary elementwise ops to
        fuse. A scalar list (or a 1-D tensor of scalars) gives element ``i``.
        """
        op = name[len("_foreach_") :]
        inplace = op.endswith("_")
        lists = [a for a in args if isinstance(a, list | tuple)]
        if not lists:
            raise StepNotTraceable(f"`{name}` without a tensor list")
        n = len(lists[0])
        results = []
        for i in range(n):
            row: list[Any] = []
            for j, a in enumerate(args):
                if isinstance(a, list | tuple):
                    row.append(a[i])
                elif isinstance(a, torch.Tensor) and a.dim() == 1 and j > 0:
                    row.append(self._call(torch.Tensor.select, "select", (a, 0, i), {}))
                else:
                    row.append(a)
            if inplace and not hasattr(torch.Tensor, op):
                # ``_foreach_maximum_`` (amsgrad): no in-place Tensor method; the
                # out-of-place op, copied into the first tensor
                new = self.__torch_function__(getattr(torch, op[:-1]), (), tuple(row), dict(kwargs))
                self.__torch_function__(torch.Tensor.copy_, (), (row[0], new), {})
                continue
            if inplace or isinstance(row[0], torch.Tensor):
                func = getattr(torch.Tensor, op)
            else:
                func = getattr(torch, op)  # _foreach_pow(scalar, tensors): torch.pow(scalar, t)
            if op.rstrip("_") in ("addcdiv", "addcmul") and len(row) == 4:
                kwargs_i, row = {**kwargs, "value": row[3]}, row[:3]
            else:
                kwargs_i = dict(kwargs)
            results.append(self.__torch_function__(func, (), tuple(row), kwargs_i))
        return None if inplace else results

    def _double_exponents(self, name: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """``beta ** step`` with a float32 0-d ``step``: eager reads the step as a
        Python float and computes bias corrections in double; so does the graph
        (in float32, ``1 - 0.999 ** step`` loses about four digits)."""

        def widen(t: Any) -> Any:
            if isinstance(t, torch.Tensor) and t.dim() == 0 and t.dtype == torch.float32:
                return self._call(torch.Tensor.double, "double", (t,), {})
            return t

        if name == "__rpow__" and isinstance(args[1], int | float):  # (exponent, base)
            return (widen(args[0]), args[1])
        if name == "pow" and isinstance(args[0], int | float):  # torch.pow(base, exponent)
            return (args[0], widen(args[1]))
        return args

    def _call(self, func: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        out = func(*args, **kwargs)
        if name == "__get__":
            return out  # ``.grad`` and other attribute reads: no graph node
        flat_in, _ = tree_flatten((args, kwargs))
        flat_out, _ = tree_flatten(out)
        if not any(isinstance(v, torch.Tensor) for v in flat_out):
            # torch.is_complex(p), p.dim(): Python values from metadata (a value read,
            # ``.item()``, fails on fake tensors before it gets here)
            return out
        node = self._record(func, name, args, kwargs)
        if isinstance(out, torch.Tensor):
            if id(out) not in self.nodes:  # an in-place op returns its input: keep that node
                self.bind(out, node)
        elif isinstance(out, list | tuple):
            for i, value in enumerate(out):
                if isinstance(value, torch.Tensor) and id(value) not in self.nodes:
                    self.bind(value, self.graph.call_function(operator.getitem, (node, i)))
        return out

    def _scaled(self, name: str, args: tuple[Any, ...], scale: torch.Tensor) -> Any:
        """``x.add_(y, alpha=t)``, ``x.addcdiv_(a, b, value=t)``, ``x.addcmul_(a, b, value=t)``
        with a traced 0-d ``t`` (a tensor lr): the scalar argument cannot hold a tensor
        without reading its value, so the product is computed as a tensor first, in
        the order eager's kernels use (``x + t*y``, ``x + t*a/b``, ``x + t*a*b``)."""
        target, operands = args[0], args[1:]
        term = self._call(torch.Tensor.mul, "mul", (operands[0], scale), {})
        if name.startswith("addcdiv"):
            term = self._call(torch.Tensor.div, "div", (term, operands[1]), {})
        elif name.startswith("addcmul"):
            term = self._call(torch.Tensor.mul, "mul", (term, operands[1]), {})
        combine = name.replace("addcdiv", "add").replace("addcmul", "add")
        return self._call(getattr(torch.Tensor, combine), combine, (target, term), {})

    def _record(self, func: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.fx.Node:
        node_args = tree_map(self.node_of, args)
        node_kwargs = tree_map(self.node_of, kwargs)
        is_method = getattr(torch.Tensor, name, None) is func or getattr(func, "__qualname__", "").startswith(
            ("TensorBase.", "Tensor.")
        )
        if is_method and name in _BINARY:
            return self.graph.call_function(_BINARY[name], tuple(node_args))
        if is_method and name in _REFLECTED:
            return self.graph.call_function(_REFLECTED[name], (node_args[1], node_args[0]))
        if is_method and name == "__neg__":
            return self.graph.call_function(operator.neg, tuple(node_args))
        if is_method:
            return self.graph.call_method(name, tuple(node_args), node_kwargs)
        return self.graph.call_function(func, tuple(node_args), node_kwargs)


@contextmanager
def _compiling_flag() -> Iterator[None]:
    """``torch.compiler.is_compiling()`` true inside: torch.optim's traceable paths."""
    previous = torch.compiler._is_compiling_flag
    torch.compiler._is_compiling_flag = True
    try:
        yield
    finally:
        torch.compiler._is_compiling_flag = previous


def core_step(optimizer: torch.optim.Optimizer) -> Callable[..., Any]:
    """The optimizer class's own ``step``, without torch's hook/profiler wrapper."""
    step: Any = type(optimizer).step
    if getattr(step, "hooked", False):
        step = step.__wrapped__
    return step  # type: ignore[no-any-return]


def _tensor_meta(t: torch.Tensor) -> tuple[Any, ...]:
    return (t.shape, t.stride(), t.dtype, t.device, t.requires_grad, type(t))


def _hyper_key(group: dict[str, Any]) -> tuple[Any, ...]:
    items = []
    for key, value in sorted(group.items()):
        if key in ("params", "lr"):
            continue
        items.append((key, _tensor_meta(value) if isinstance(value, torch.Tensor) else repr(value)))
    return tuple(items)


@dataclass(frozen=True)
class _NewState:
    """One state entry a first step creates: parameter ``param`` (in plan order) gets
    ``key`` = the graph's output ``output``, or the constant ``value``."""

    param: int
    key: str
    output: int | None
    value: Any = None


class _Plan:
    """One group layout of the optimizer: which tensors are inputs, in what order."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        #: the state entries the step creates (set by ``trace_step``), in eager's order
        self.created: tuple[_NewState, ...] = ()
        self.params: list[torch.Tensor] = []
        self.state_keys: list[list[str]] = []
        key: list[Any] = []
        for group in optimizer.param_groups:
            rows: list[Any] = []
            for p in group["params"]:
                grad = p.grad
                state = optimizer.state.get(p, {})
                names = sorted(k for k, v in state.items() if isinstance(v, torch.Tensor))
                others = tuple(sorted((k, repr(v)) for k, v in state.items() if k not in names))
                rows.append((
                    id(p), _tensor_meta(p), None if grad is None else _tensor_meta(grad),
                    tuple((k, _tensor_meta(state[k])) for k in names), others,
                ))  # fmt: skip
                if grad is not None:
                    self.params.append(p)
                    self.state_keys.append(names)
            lr = group.get("lr")
            key.append((_hyper_key(group), isinstance(lr, torch.Tensor), tuple(rows)))
        self.key = tuple(key)

    def inputs(self, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
        flat: list[torch.Tensor] = []
        for p, names in zip(self.params, self.state_keys, strict=True):
            state = optimizer.state[p]
            assert p.grad is not None
            flat += [p, p.grad, *(state[k] for k in names)]
        flat += [_lr_tensor(group["lr"]) for group in optimizer.param_groups]
        return flat

    def install(self, optimizer: torch.optim.Optimizer, outputs: Any) -> None:
        """Put the state a first step created (the graph's ``outputs``) in ``optimizer``."""
        for new in self.created:
            state = optimizer.state[self.params[new.param]]
            state[new.key] = copy.deepcopy(new.value) if new.output is None else outputs[new.output]


def _lr_tensor(lr: Any) -> torch.Tensor:
    if isinstance(lr, torch.Tensor):
        return lr
    return torch.tensor(float(lr), dtype=torch.float64)


def _shadow(
    optimizer: torch.optim.Optimizer, plan: _Plan, convert: Callable[[torch.Tensor, str], torch.Tensor]
) -> torch.optim.Optimizer:
    """A shallow copy of ``optimizer`` whose parameters (with their gradients) and
    state tensors are ``convert``ed, in the order of ``plan.inputs`` (lr apart)."""
    shadow = copy.copy(optimizer)
    shadow.state = defaultdict(dict)
    groups = []
    slots = iter(zip(plan.params, plan.state_keys, strict=True))
    for group in optimizer.param_groups:
        params = []
        for p in group["params"]:
            if p.grad is None:
                params.append(p)  # the step skips it; never read as a tensor
                continue
            real_p, names = next(slots)
            assert real_p is p
            i = len(shadow.state)
            sp = convert(p, f"param_{i}")
            sp.grad = convert(p.grad, f"grad_{i}")
            state = optimizer.state[p]
            shadow_state = {k: v for k, v in state.items() if k not in names}
            shadow_state.update((k, convert(state[k], f"state_{i}_{k}")) for k in names)
            shadow.state[sp] = shadow_state
            params.append(sp)
        groups.append(dict(group, params=params))
    shadow.param_groups = groups
    return shadow


def trace_step(optimizer: torch.optim.Optimizer, plan: _Plan) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    """One FX graph of ``optimizer``'s step on fake tensors, and the real inputs it takes."""
    # imported on the first compile, so that ``import ember.dynamo`` stays cheap
    from ember.ir.shapes import EagerLayoutFakeMode

    graph = torch.fx.Graph()
    recorder = _Recorder(graph)
    fake_mode = EagerLayoutFakeMode()

    def fake(t: torch.Tensor, name: str) -> torch.Tensor:
        f = fake_mode.from_tensor(t)
        recorder.bind(f, graph.placeholder(name))
        return f

    shadow = _shadow(optimizer, plan, fake)
    for g, shadow_group in enumerate(shadow.param_groups):
        lr = optimizer.param_groups[g]["lr"]
        shadow_group["lr"] = fake_mode.from_tensor(_lr_tensor(lr))
        recorder.bind(shadow_group["lr"], graph.placeholder(f"lr_{g}"))
        if shadow_group.get("fused"):
            # the fused kernel is one opaque op per group: record the foreach path, which
            # computes the same update from the same state (``step`` a float32 tensor on
            # the parameter's device, as capturable's), elementwise ops a backend fuses;
            # ``check_step`` compares it with the fused kernel before it is used
            shadow_group["fused"], shadow_group["foreach"] = False, True
        if shadow_group.get("foreach") is None:
            shadow_group["foreach"] = _eager_foreach(optimizer.param_groups[g], optimizer)
        if shadow_group["foreach"] and "capturable" in shadow_group:
            # foreach Adam/AdamW take a tensor ``lr`` only on their capturable path (ADR 0024)
            shadow_group["capturable"] = True
    before = {id(sp): dict(state) for sp, state in shadow.state.items()}
    with _compiling_flag(), torch.no_grad(), fake_mode, recorder:
        core_step(optimizer)(shadow)
    created: list[_NewState] = []
    outputs: list[torch.fx.Node] = []
    for i, (sp, state) in enumerate(shadow.state.items()):
        old = before.get(id(sp))
        if old is None:
            raise StepNotTraceable("the step gave state to a parameter without a gradient")
        if not old and state:
            # the first step of this parameter: the state it creates is returned by the
            # graph and installed in the optimizer after the compiled step ran
            for k, v in state.items():
                if not isinstance(v, torch.Tensor):
                    created.append(_NewState(i, k, None, copy.deepcopy(v)))
                    continue
                node = recorder.node_of(v)
                if node.op == "placeholder":
                    raise StepNotTraceable(f"the step made an input its new state {k!r}")
                created.append(_NewState(i, k, len(outputs)))
                outputs.append(node)
            continue
        if any(state.get(k) is not v for k, v in old.items()) or set(state) != set(old):
            raise StepNotTraceable("the step replaced optimizer state objects instead of updating them")
    graph.output(tuple(outputs))
    plan.created = tuple(created)
    return torch.fx.GraphModule(torch.nn.Module(), graph), plan.inputs(optimizer)


def check_step(optimizer: torch.optim.Optimizer, plan: _Plan, compiled: Callable[..., Any]) -> None:
    """Run eager's step and ``compiled`` on copies of the tensors and compare
    (float tolerances), the state a first step creates included: a compiled step
    that fails or computes something else raises here, before it touches the real
    parameters."""
    eager_copies: list[torch.Tensor] = []

    def copy_of(t: torch.Tensor, name: str) -> torch.Tensor:
        eager_copies.append(t.detach().clone())
        return eager_copies[-1]

    shadow = _shadow(optimizer, plan, copy_of)
    inputs = plan.inputs(optimizer)
    lrs = inputs[len(eager_copies):]
    compiled_copies = [t.detach().clone() for t in inputs[: len(eager_copies)]]
    with torch.no_grad():
        core_step(optimizer)(shadow)
        outputs = compiled(*compiled_copies, *lrs)
    for got, want in zip(compiled_copies, eager_copies, strict=True):
        torch.testing.assert_close(got, want, msg=lambda m: f"the compiled step differs from eager: {m}")
    states = list(shadow.state.values())
    for new in plan.created:
        want_state = states[new.param][new.key]
        if new.output is None:
            if new.value != want_state:
                raise AssertionError(f"the compiled step creates state {new.key!r} = {new.value!r}, "
                                     f"eager {want_state!r}")
            continue
        got_state = outputs[new.output]
        if got_state.dtype != want_state.dtype or got_state.shape != want_state.shape:
            raise AssertionError(f"the compiled step creates state {new.key!r} as {got_state.dtype}"
                                 f"{list(got_state.shape)}, eager as {want_state.dtype}{list(want_state.shape)}")
        torch.testing.assert_close(got_state, want_state,
                                   msg=lambda m: f"the compiled step's new state differs from eager: {m}")


def init_state(optimizer: torch.optim.Optimizer) -> bool:
    """Create the state of parameters that have a gradient and no state yet, as eager's
    step does first, by the optimizer's own ``_init_group(group, *lists)`` (torch.optim's
    Adam, AdamW, RMSprop, Adagrad, ...: zeros and a step count). Then a first step has the
    layout of every later one and compiles once. False when nothing was created (no such
    parameter, no ``_init_group`` of that shape, or one that raised: the step then
    records the state creation itself, or runs eagerly and raises as eager does)."""
    init = getattr(optimizer, "_init_group", None)
    if init is None or not any(
        p.grad is not None and not optimizer.state.get(p) for group in optimizer.param_groups for p in group["params"]
    ):
        return False
    try:
        params = list(inspect.signature(init).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not params or any(p.kind not in positional or p.default is not p.empty for p in params):
        return False
    try:
        with torch.no_grad():
            for group in optimizer.param_groups:
                init(group, *([] for _ in params[1:]))
    except Exception as e:
        log.debug("optimizer step of %s: _init_group raised %s: %s", type(optimizer).__name__, type(e).__name__, e)
        return False
    return True


def _eager_foreach(group: dict[str, Any], optimizer: torch.optim.Optimizer) -> bool:
    """What ``foreach=None`` resolves to for this group's real tensors in eager."""
    from torch.optim.optimizer import _default_to_fused_or_foreach

    params = [p for p in group["params"] if p.grad is not None]
    _, foreach = _default_to_fused_or_foreach(params, bool(optimizer.defaults.get("differentiable")), False)
    return bool(foreach)


class CompiledOptimizerStep:
    """What ``compile(optimizer.step)`` returns; call it as the step itself."""

    def __init__(self, optimizer: torch.optim.Optimizer, runtime: Runtime) -> None:
        self.optimizer = optimizer
        #: the runtime's graph compiler: its resolved backend, with the wrappers every
        #: compiled graph gets (``compiled_graph.GraphCompiler``), as for functions and modules
        self._compiler: CompilerFn = runtime.compiler
        self._limit = runtime.options.cache_size_limit
        #: the runtime state whose stance and ``run()`` apply (``RuntimeState``)
        self._state = runtime.state
        #: plan key -> compiled step (``None``: this layout runs eagerly)
        self.entries: dict[Any, Callable[..., Any] | None] = {}
        #: plan key -> the state entries that layout's step creates (a first step's)
        self._created: dict[Any, tuple[_NewState, ...]] = {}
        self.compiles = 0
        #: (ember.guards ``CheckFn``, layout, compiled step or None), tried in order
        self._guarded: list[tuple[StepGuards, _Plan, Callable[..., Any] | None]] = []
        hooked = torch.optim.Optimizer.profile_hook_step(self._core)
        self._step = hooked
        register_cache(self)  # ember.dynamo.reset() forgets its compiled steps too

    def clear(self) -> None:
        """Forget every compiled layout (``ember.dynamo.reset()``)."""
        self.entries.clear()
        self._created.clear()
        self._guarded.clear()

    @property
    def __func__(self) -> Callable[..., Any]:
        """As a bound method's (LR schedulers re-wrap ``optimizer.step`` through it)."""
        compiled = self

        def step(optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
            return compiled(*args, **kwargs)

        return step

    def __call__(self, closure: Callable[[], Any] | None = None) -> Any:
        return self._step(self.optimizer, closure)

    def _eager(self, reason: str, closure: Callable[[], Any] | None) -> Any:
        log.debug("optimizer step of %s runs eagerly: %s", type(self.optimizer).__name__, reason)
        return core_step(self.optimizer)(self.optimizer, closure)

    def _core(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        if closure is not None:
            return self._eager("a closure re-evaluates the model inside the step", closure)
        if optimizer.defaults.get("differentiable"):
            return self._eager("differentiable=True", closure)
        if getattr(optimizer, "grad_scale", None) is not None or getattr(optimizer, "found_inf", None) is not None:
            return self._eager("a GradScaler passes grad_scale/found_inf to the fused kernel", closure)
        stance = getattr(self._state, "stance", "default")
        if stance == "force_eager":
            return self._eager("set_stance('force_eager')", closure)
        found = self._lookup(optimizer)
        if found is None and init_state(optimizer):
            found = self._lookup(optimizer)
        inputs: list[torch.Tensor] | None = None
        if found is not None:
            plan, compiled, inputs = found
        else:
            plan = _Plan(optimizer)
            if not plan.params:
                return self._eager("no parameter has a gradient", closure)
            if plan.key not in self.entries:
                refused = self._refuse_compile(stance)
                if refused is not None:
                    return self._eager(refused, closure)
                self.entries[plan.key] = self._compile(plan)
                self._created[plan.key] = plan.created
            plan.created = self._created[plan.key]
            compiled = self.entries[plan.key]
            self._guard(plan, compiled)
        if compiled is None:
            return self._eager("this layout could not be compiled (logged when it was tried)", closure)
        if inputs is None:
            inputs = plan.inputs(optimizer)
        else:  # the layout check gathered the tensors (ADR 0058)
            inputs += [_lr_tensor(group["lr"]) for group in optimizer.param_groups]
        with torch.no_grad():
            outputs = compiled(*inputs)
        if plan.created:
            plan.install(optimizer, outputs)
        return None

    def _refuse_compile(self, stance: str) -> str | None:
        """Why this new layout must not be compiled now (``run()``, a recompile under
        ``eager_on_recompile``), None to compile it; raises under ``fail_on_recompile``, as
        every other compiled callable does."""
        if getattr(self._state, "run_only", 0):
            return "ember.dynamo.run(): cached steps only"
        if not self.entries:
            return None  # the first compile is not a recompile
        if stance == "eager_on_recompile":
            return "set_stance('eager_on_recompile')"
        if stance == "fail_on_recompile":
            why = next((r for r in self.explain() if r), "its parameters or state changed")
            raise RecompileError(
                f"ember.dynamo: recompile of the optimizer step of {type(self.optimizer).__name__} "
                f"forbidden by set_stance('fail_on_recompile'); the compiled step no longer "
                f"applies because {why}. Call set_stance('default') to allow it.")
        return None

    def _lookup(self, optimizer: torch.optim.Optimizer
                ) -> tuple[_Plan, Callable[..., Any] | None, list[torch.Tensor] | None] | None:
        """The first layout whose guards pass, with the step's tensor inputs where the
        native layout check gathered them (``StepGuards.match``), or None."""
        for check, plan, compiled in self._guarded:
            ok, inputs = check.match(optimizer)
            if ok:
                return plan, compiled, inputs
        return None

    def _guard(self, plan: _Plan, compiled: Callable[..., Any] | None) -> None:
        """Check this layout with ember.guards from the next step on (ADR 0033); a layout
        the guards cannot describe keeps being found by its structural key."""
        try:
            check = StepGuards(self.optimizer, plan.state_keys)
        except Exception as e:
            log.debug("optimizer step of %s: no guards for this layout (%s: %s); its key is "
                      "computed per step", type(self.optimizer).__name__, type(e).__name__, e)
            return
        self._guarded.append((check, plan, compiled))

    def explain(self) -> list[str]:
        """Why each compiled layout does not match the optimizer now (empty strings: it does)."""
        return [check.explain(self.optimizer) or "" for check, _, _ in self._guarded]

    def _compile(self, plan: _Plan) -> Callable[..., Any] | None:
        if len(self.entries) >= self._limit:
            log.warning(
                "optimizer step of %s: cache_size_limit (%d) reached; new layouts run eagerly",
                type(self.optimizer).__name__, self._limit,
            )
            return None
        try:
            gm, inputs = trace_step(self.optimizer, plan)
        except Exception as e:  # ember's limitation, not the user's error: run eagerly
            log.warning(
                "optimizer step of %s is not compiled, it runs eagerly: %s: %s",
                type(self.optimizer).__name__, type(e).__name__, e,
            )
            return None
        self.compiles += 1
        log.info(
            "optimizer step of %s captured: %d ops over %d inputs",
            type(self.optimizer).__name__,
            sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method")), len(inputs),
        )
        try:
            with torch.no_grad():
                compiled: Callable[..., Any] = self._compiler(gm, inputs)
            check_step(self.optimizer, plan, compiled)
        except Exception as e:  # a backend limitation or a wrong result: never reaches the user
            log.warning(
                "optimizer step of %s: the compiled step is not used, it runs eagerly: %s: %s",
                type(self.optimizer).__name__, type(e).__name__, str(e)[:500],
            )
            return None
        return compiled


def is_optimizer_step(target: Any) -> bool:
    """Whether ``target`` is a bound ``step`` of a ``torch.optim.Optimizer``."""
    owner = getattr(target, "__self__", None)
    return isinstance(owner, torch.optim.Optimizer) and getattr(target, "__name__", "") == "step"
