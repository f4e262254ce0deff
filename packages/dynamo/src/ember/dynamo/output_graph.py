"""The graph under construction, its inputs, and compiling it.

One ``OutputGraph`` per captured graph: an FX graph of torch-level ops, a
fake-tensor mode that computes every node's metadata, the graph's tensor
inputs (each read from a frame source and guarded), the parameters and
buffers it reads (``get_attr`` on a root module), the guards and the side
effects. :meth:`OutputGraph.call_graph` hands the finished ``GraphModule``
to the backend and emits the bytecode that calls the result (the one graph
call emitter, for a whole frame and for a frame split at a break).
"""

from __future__ import annotations

import functools
import itertools
import operator
import re
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from bytecode import Instr
from torch.utils import _pytree as pytree

from ember.ir import Attr, DictEntry, DictItem, Global, Item, Local, Source
from ember.ir.shapes import EagerLayoutFakeMode, float_int_pow, symbolic_dispatch

from .builder import wrap_constant_result
from .codegen import OUT_LOCAL, PyCodegen
from .compiled_graph import graph_entry
from .eager_fallback import no_aliasing_guard
from .empty_check import empty_input_error
from .errors import Unsupported, UserRaised
from .frame import CapturedGraph, CompilerFn
from .guard_collector import GuardCollector
from .mutable import Trail
from .numpy_ops import ndarray_needs_copy, ndarray_to_tensor, ndarrays_to_graph_inputs
from .shapes import ShapePolicy
from .side_effects import SideEffects
from .tensor_subclass import (
    BASE_CLASSES,
    as_plain,
    is_capturable_class,
    is_dtensor,
    is_placement,
    result_class,
)
from .variables.base import VariableTracker
from .variables.constant import ConstantVariable, OpaqueConstantVariable, is_constant_value
from .variables.dicts import DictVariable
from .variables.known_scalars import attach_known, with_values
from .variables.lazy import LazyVariable
from .variables.lists import BaseListVariable, ListVariable, NamedTupleVariable, TupleVariable
from .variables.sym import SYM_TYPES, SliceVariable, SymNodeVariable, is_symbolic
from .variables.tensor import TensorVariable

#: the local holding a graph call's converted NumPy inputs
ARRAYS_LOCAL = "__ember_arrays"


@dataclass
class GraphInput:
    source: Source
    #: the tensor, or a dynamic Python float (ADR 0044)
    value: torch.Tensor | float
    node: torch.fx.Node
    var: TensorVariable | SymNodeVariable
    #: what turns the frame's value into the graph's tensor (a NumPy array's
    #: ``ndarray_to_tensor``); None: the value is the tensor
    convert: Callable[[Any], torch.Tensor] | None = None
    #: the example's version when the input was made: a later one means the graph
    #: changes the input in place
    version: int | None = 0


#: how Python's operator protocol says it has no method for the operand types
PYTHON_OPERATOR_TYPE_ERRORS = ("unsupported operand type(s)", "bad operand type for unary")


def _path_text(source: Source) -> str:
    if isinstance(source, (Local, Global)):
        return source.name
    if isinstance(source, Attr):
        return f"{_path_text(source.base)}_{source.member}"
    if isinstance(source, (Item, DictItem)):
        return f"{_path_text(source.base)}_{source.index}"
    if isinstance(source, DictEntry):
        return f"{_path_text(source.base)}_{source.part}_{source.position}"
    raise TypeError(f"no name for source {source.expr()}")


def name_hint(source: Source) -> str:
    """An identifier derived from the path, for placeholders and attributes."""
    text = re.sub(r"[^0-9a-zA-Z_]+", "_", _path_text(source)).strip("_")
    if not text or text[0].isdigit():
        text = "v_" + text
    return text


def _version_of(t: torch.Tensor) -> int | None:
    """``t._version``; None for an inference tensor (it has no version counter, and
    cannot be changed in place outside inference mode)."""
    try:
        return int(t._version)
    except RuntimeError:
        return None


def _result_class(args: list[VariableTracker]) -> type:
    """The class torch's default ``__torch_function__`` gives an op's results (``tensor_subclass``)."""
    classes: list[type] = []
    pending: list[VariableTracker] = list(args)
    while pending:
        v = pending.pop()
        if isinstance(v, TensorVariable):
            classes.append(v.cls)
        elif isinstance(v, BaseListVariable):
            pending.extend(v.items)
    try:
        return result_class(classes)
    except TypeError as e:
        raise Unsupported(str(e)) from e


def _holds_objects(value: Any) -> bool:
    """Whether a constant holds values other than FX-printable literals (placements, meshes)."""
    if isinstance(value, (list, tuple)):
        return any(_holds_objects(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_objects(v) for v in value.values())
    return not (is_constant_value(value) or isinstance(value, type) or value is None)


def fn_label(fn: Any) -> str:
    """A name for ``fn`` in node names and messages; a lambda is named after the function
    it calls from its closure (a parallel style's hook lambda: ``ColwiseParallel.
    _prepare_input_fn``)."""
    name = str(getattr(fn, "__name__", type(fn).__name__))
    if name != "<lambda>":
        return name
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            inner = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        target = inner.func if isinstance(inner, functools.partial) else inner
        if isinstance(target, types.FunctionType):
            return target.__qualname__
    return name


def _float_int_pow(target: Any, args: Any) -> bool:
    return (target in (operator.pow, pow) and len(args) == 2 and isinstance(args[0], torch.SymFloat)
            and type(args[1]) is int)


class OutputGraph:
    def __init__(self, f_globals: dict[str, Any], shapes: ShapePolicy | None = None) -> None:
        self.f_globals = f_globals
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.fake_mode = EagerLayoutFakeMode(allow_non_fake_inputs=True)
        #: grad mode where the graph starts (the frame's entry), which is the mode it runs under
        self.entry_grad = torch.is_grad_enabled()
        #: which input dimensions are symbolic, and the guards on them
        self.shapes = shapes if shapes is not None else ShapePolicy()
        #: sizes that depend on data (``x[mask]``) are unbacked symbols of the same environment
        self.fake_mode.unbacked_env = self.shapes.env
        self.fake_mode.item_values = False  # on for a captured ``.item()`` only (ADR 0060)
        #: (tensor node, dim) -> the graph's ``size`` node for a symbolic dimension
        self.size_nodes: dict[tuple[torch.fx.Node, int], SymNodeVariable] = {}
        #: the translator running now (innermost inlined call); names guard sites
        self.tracing: Any = None
        self.guards = GuardCollector()
        #: undo log of every in-place change (see ``mutable``)
        self.trail = Trail()
        self.side_effects = SideEffects(self.trail)
        self.inputs: dict[str, GraphInput] = {}
        self.attrs: dict[int, TensorVariable] = {}
        self.modules: dict[int, str] = {}
        #: root attribute name -> the frame source it was read from (None: no source)
        self.attr_sources: dict[str, Source | None] = {}
        self.fake_params: dict[int, torch.Tensor] = {}
        #: id(a module's parameter or buffer) -> what reads of it give, inside
        #: ``torch.func.functional_call`` (``variables.higher_order``)
        self.tensor_overrides: dict[int, VariableTracker] = {}
        #: torch.nn leaf modules are inlined, not one ``call_module`` node
        #: (while a ``torch.cond`` branch is traced: ``variables.cond``)
        self.inline_leaves = False
        #: undo actions for process state entered while tracing (autocast)
        self.cleanups: list[Callable[[], Any]] = []
        #: NumPy inputs the graph reads through a copy (negative strides, read-only), with
        #: their example's version: writing one would be lost (``check_copied_arrays``)
        self.copied_arrays: list[tuple[str, torch.Tensor, int]] = []
        #: trackers of cells that existed before the frame ran, by id(cell)
        self.real_cells: dict[int, Any] = {}
        self.guards.add_global_state()

    # --- inputs and attributes ----------------------------------------------
    def _fake(self, t: torch.Tensor) -> torch.Tensor:
        hit = self.fake_params.get(id(t))
        if hit is None:
            # a DTensor is faked as a DTensor over a fake local tensor (ADR 0069)
            hit = self.fake_mode.from_tensor(as_plain(t), static_shapes=True)
            self.fake_params[id(t)] = hit
        return hit

    def add_input(self, value: torch.Tensor, source: Source) -> TensorVariable:
        key = source.expr()
        hit = self.inputs.get(key)
        if hit is not None and isinstance(hit.var, TensorVariable):
            return hit.var
        if not is_capturable_class(type(value)):
            raise Unsupported(
                f"tensor subclass `{type(value).__qualname__}` at {key} (only subclasses that add "
                "nothing to torch.Tensor are captured)"
            )
        dtensor = is_dtensor(value)  # static sizes; class, mesh, placements, local layout guarded
        example = None if dtensor else self.shapes.fake_input(self.fake_mode, source, value)
        if example is None:
            example = self._fake(value)
        if dtensor:
            self.guards.add_dtensor(source, value)
        else:
            self.guards.add_tensor(source, value, self.shapes.payload_dims(source))
        node = self._new_placeholder(source)
        node.meta["example_value"] = example
        var = TensorVariable(node, example, source, type(value))
        self.inputs[key] = GraphInput(source, value, node, var, version=_version_of(example))
        return var

    def _new_placeholder(self, source: Source) -> torch.fx.Node:
        """A graph input for ``source``, placed after the existing inputs, before any op."""
        first = next((n for n in self.graph.nodes if n.op != "placeholder"), None)
        if first is None:
            return self.graph.placeholder(name_hint(source))
        with self.graph.inserting_before(first):
            return self.graph.placeholder(name_hint(source))

    def add_float_input(self, value: float, source: Source, sym: Any) -> SymNodeVariable:
        """A Python float as a graph input (ADR 0044): a placeholder whose example is a
        symbolic float; the frame passes the float itself. Guarded on its type only:
        any finite value reuses the graph, unless a decision pins it (``shape_guards``)."""
        key = source.expr()
        hit = self.inputs.get(key)
        if hit is not None and isinstance(hit.var, SymNodeVariable):
            return hit.var
        self.guards.add_type(source, value)
        example = self.shapes.env.sym_value(sym, float)
        node = self._new_placeholder(source)
        node.meta["example_value"] = example
        var = SymNodeVariable(node, example, source)
        self.inputs[key] = GraphInput(source, value, node, var, version=None)
        return var

    def add_numpy_input(self, value: Any, source: Source) -> TensorVariable:
        """A frame's ``np.ndarray`` as a graph input: the tensor ``ndarray_to_tensor``
        makes of it when the graph is called, guarded on the array's type, dtype,
        shape and strides (static: arrays are not given symbolic sizes)."""
        key = source.expr()
        hit = self.inputs.get(key)
        if hit is not None and isinstance(hit.var, TensorVariable):
            return hit.var
        try:
            tensor = ndarray_to_tensor(value)
        except TypeError as e:  # object, string, datetime, ... arrays
            raise Unsupported(f"NumPy array of dtype `{value.dtype}` at {key}: {e}") from e
        self.guards.add_type(source, value)
        self.guards.add_constant(Attr(Attr(source, "dtype"), "str"), value.dtype.str)
        self.guards.add_constant(Attr(source, "shape"), tuple(int(s) for s in value.shape))
        self.guards.add_constant(Attr(source, "strides"), tuple(int(s) for s in value.strides))
        self.guards.add_constant(Attr(Attr(source, "flags"), "writeable"), bool(value.flags.writeable))
        device = torch.get_default_device()
        if device.type != "cpu":
            warnings.warn(
                f"ember.dynamo traces NumPy arrays on the CPU: the default device ({device}) is "
                f"not applied to the array at {key} (TorchDynamo would move it there)",
                stacklevel=2,
            )
        example = self.fake_mode.from_tensor(tensor, static_shapes=True)
        node = self._new_placeholder(source)
        node.meta["example_value"] = example
        if ndarray_needs_copy(value):
            self.copied_arrays.append((key, example, example._version))
        # no source on the tensor tracker: loading the source gives the array, not a tensor
        var = TensorVariable(node, example, None)
        self.inputs[key] = GraphInput(source, tensor, node, var, ndarray_to_tensor, _version_of(example))
        return var

    def check_copied_arrays(self) -> None:
        """A NumPy input read through a copy must not be written (eager NumPy writes the
        array itself, or raises for a read-only one): a break, so NumPy runs that code."""
        for key, example, version in self.copied_arrays:
            if example._version != version:
                raise Unsupported(
                    f"in-place change of the NumPy array at {key}, which the graph reads "
                    "through a copy (negative strides or read-only)"
                )

    def _unique_attr(self, hint: str) -> str:
        name = hint
        for i in itertools.count(1):
            if not hasattr(self.root, name):
                return name
            name = f"{hint}_{i}"
        raise AssertionError

    def register_attr_tensor(self, value: torch.Tensor, source: Source | None) -> TensorVariable:
        hit = self.attrs.get(id(value))
        if hit is not None:
            return hit
        name = self._unique_attr(name_hint(source) if source else "_tensor_constant")
        if isinstance(value, torch.nn.Parameter):
            self.root.register_parameter(name, value)
        else:
            self.root.register_buffer(name, value)
        self.attr_sources[name] = source
        node = self.graph.get_attr(name)
        example = self._fake(value)
        node.meta["example_value"] = example
        var = TensorVariable(node, example, source, type(value))
        self.attrs[id(value)] = var
        return var

    def register_module(self, module: torch.nn.Module, source: Source | None) -> str:
        hit = self.modules.get(id(module))
        if hit is not None:
            return hit
        name = self._unique_attr(name_hint(source) if source else "_module")
        self.root.add_module(name, module)
        self.modules[id(module)] = name
        self.attr_sources[name] = source
        return name

    def size_of(self, tensor: TensorVariable, dim: int) -> SymNodeVariable:
        """The symbolic size ``tensor.size(dim)``, read once per tensor and dimension."""
        key = (tensor.node, dim)
        hit = self.size_nodes.get(key)
        if hit is None or hit.node._erased:  # rolled back with a failed instruction
            node = self.graph.call_method("size", (tensor.node, dim))
            node.meta["example_value"] = tensor.example.shape[dim]
            hit = SymNodeVariable(node, tensor.example.shape[dim])
            self.size_nodes[key] = hit
        return hit

    # --- global state ----------------------------------------------------------
    def set_grad_enabled(self, mode: bool) -> None:
        self.graph.call_function(torch._C._set_grad_enabled, (mode,))
        torch._C._set_grad_enabled(mode)

    def guard_global_state(self) -> None:
        self.guards.add_global_state()

    # --- ops ---------------------------------------------------------------------
    def to_node_args(self, v: VariableTracker) -> tuple[Any, Any]:
        """(FX argument, fake-tensor argument) for a tracker."""
        if isinstance(v, (TensorVariable, SymNodeVariable)):
            return v.node, v.example
        if isinstance(v, SliceVariable):
            parts = [self.to_node_args(p) for p in v.parts]
            return slice(*(p[0] for p in parts)), slice(*(p[1] for p in parts))
        if isinstance(v, BaseListVariable):
            pairs = [self.to_node_args(i) for i in v.items]
            kind = list if isinstance(v, ListVariable) else tuple
            return kind(p[0] for p in pairs), kind(p[1] for p in pairs)
        if isinstance(v, DictVariable):
            if any(isinstance(i, LazyVariable) for i in v.items.values()):
                raise Unsupported("a dict read from the frame passed whole to a graph op")
            pairs2 = {k: self.to_node_args(i) for k, i in v.items.items()}
            return {k: p[0] for k, p in pairs2.items()}, {k: p[1] for k, p in pairs2.items()}
        if v.is_python_constant():
            value = v.as_python_constant()
            if callable(value) and not isinstance(value, type):
                # FX would print a function argument as its repr: not code
                name = getattr(value, "__name__", type(value).__name__)
                raise Unsupported(f"function `{name}` cannot be passed to a graph op")
            if isinstance(value, slice) or is_constant_value(value) or isinstance(value, type):
                return value, value
        if isinstance(v, OpaqueConstantVariable):
            return v.value, v.value
        raise Unsupported(f"{v.describe()} cannot be passed to a graph op")

    def create_op(
        self,
        kind: str,
        target: Any,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        node_args, fake_args = zip(*[self.to_node_args(a) for a in args]) if args else ((), ())
        node_kwargs = {k: self.to_node_args(v)[0] for k, v in kwargs.items()}
        fake_kwargs = {k: self.to_node_args(v)[1] for k, v in kwargs.items()}
        try:
            with self.fake_mode, symbolic_dispatch(self.shapes.is_symbolic):
                if kind == "call_method":
                    example = getattr(fake_args[0], target)(*fake_args[1:], **fake_kwargs)
                elif _float_int_pow(target, fake_args):
                    # ``t ** 2`` of a symbolic float: real for every ``t`` (torch's
                    # SymFloat.__pow__ would demand ``t >= 0`` and so pin ``t``)
                    target = float_int_pow
                    example = target(*fake_args)
                else:
                    example = target(*fake_args, **fake_kwargs)
        except Unsupported:
            raise
        except Exception as e:
            if type(e).__name__ == "DataDependentOutputException":
                swapped = with_values(self, args, 1 if kind == "call_method" else 0)
                names = list(kwargs)
                swapped_kw = dict(zip(names, with_values(self, list(kwargs.values()), 0)))
                if any(a is not b for a, b in zip([*swapped, *swapped_kw.values()],
                                                  [*args, *kwargs.values()])):
                    return self.create_op(kind, target, swapped, swapped_kw)
            name = target if isinstance(target, str) else getattr(target, "__name__", str(target))
            detail = str(e).splitlines()[0] if str(e) else ""
            if isinstance(e, TypeError) and detail.startswith(PYTHON_OPERATOR_TYPE_ERRORS):
                # Python's operator protocol refused the operand types (``x * None``): the
                # program raises this TypeError, eagerly too. Not a graph break that would
                # run the op for real after a branch only tracing took (ADR 0045)
                raise UserRaised(TypeError, f"`{name}` raises TypeError ({detail})") from e
            raise Unsupported(
                f"`{name}` cannot be traced: {type(e).__name__} on fake tensors"
                + (f" ({detail})" if detail else "")
            ) from e
        raised = empty_input_error(kind, target, tuple(fake_args), fake_kwargs)
        if raised is not None:
            name = target if isinstance(target, str) else getattr(target, "__name__", str(target))
            raise Unsupported(f"`{name}` raises on these sizes in eager (an empty or 0-d tensor) "
                              f"({type(raised).__name__}); it runs eagerly")
        node = self.graph.create_node(kind, target, tuple(node_args), node_kwargs)
        result = self.wrap_result(node, example, args)
        if isinstance(result, TensorVariable) and result.node is node and kind == "call_function":
            attach_known(result, target, args, kwargs)
        return result

    def create_bound_op(
        self, fn: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        """``fn(*args, **kwargs)`` as one graph node, where some arguments are objects a
        graph cannot hold as values (a module, a device mesh, placements): they are bound
        into the node's target, guarded by identity (ADR 0069). torch.distributed's
        Python functions (DTensor.from_local, the parallel styles' hooks) are called so."""
        bound_args: dict[int, Any] = {}
        bound_kwargs: dict[str, Any] = {}
        graph_args: list[VariableTracker] = []
        graph_kwargs: dict[str, VariableTracker] = {}

        def opaque(v: VariableTracker) -> tuple[bool, Any]:
            if isinstance(v, (TensorVariable, SymNodeVariable)):
                return False, None
            if v.is_python_constant():
                value = v.as_python_constant()
                if not _holds_objects(value):
                    return False, None
                # a constant FX cannot write as code (``[Replicate()]`` made in the frame, a
                # DTensor's folded placements): bound. Read from the frame, a container's
                # length and items and a placement's value are guarded where read; any
                # other object is pinned by identity
                if v.source is not None and not is_placement(value) and not isinstance(
                        value, (list, tuple, dict)):
                    self.guards.add_id(v.source, value)
                return True, value
            try:
                self.to_node_args(v)
                return False, None
            except Unsupported:
                pass
            value = getattr(v, "value", None)
            if value is None or v.source is None:
                raise Unsupported(f"{v.describe()} cannot be passed to `{fn_label(fn)}` in a graph")
            self.guards.add_id(v.source, value)
            return True, value

        for i, a in enumerate(args):
            is_bound, value = opaque(a)
            if is_bound:
                bound_args[i] = value
            else:
                graph_args.append(a)
        for k, a in kwargs.items():
            is_bound, value = opaque(a)
            if is_bound:
                bound_kwargs[k] = value
            else:
                graph_kwargs[k] = a
        # a closure even with nothing bound: FX names a function by module and ``__name__``,
        # which does not find a method (``DTensor.to_local``)
        total = len(args)

        def bound(*given: Any, **given_kwargs: Any) -> Any:
            rest = iter(given)
            full = [bound_args[i] if i in bound_args else next(rest) for i in range(total)]
            return fn(*full, **bound_kwargs, **given_kwargs)

        name = "bound_" + re.sub(r"\W", "_", fn_label(fn))
        bound.__name__ = bound.__qualname__ = name
        bound._ember_bound = True  # type: ignore[attr-defined]
        return self.create_op("call_function", bound, graph_args, graph_kwargs)

    def call_module(
        self, mod_var: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        module: torch.nn.Module = mod_var.value
        name = self.register_module(module, mod_var.source)
        node_args, fake_args = zip(*[self.to_node_args(a) for a in args]) if args else ((), ())
        node_kwargs = {k: self.to_node_args(v)[0] for k, v in kwargs.items()}
        fake_kwargs = {k: self.to_node_args(v)[1] for k, v in kwargs.items()}
        state = {n: self._fake(t) for n, t in module.named_parameters()}
        state.update({n: self._fake(t) for n, t in module.named_buffers()})
        try:
            # symbolic sizes through the Python dispatcher, as in create_op: a leaf module's
            # composite C++ kernel would read them as ints (torch 2.11's 3-d ``linear`` calls
            # ``sizes()``), pinning the length of every call (a recompile per length)
            with self.fake_mode, symbolic_dispatch(self.shapes.is_symbolic):
                example = torch.func.functional_call(module, state, tuple(fake_args), fake_kwargs)
        except Exception as e:
            raise Unsupported(
                f"module `{type(module).__name__}` cannot be traced: {type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}"
            ) from e
        node = self.graph.call_module(name, tuple(node_args), node_kwargs)
        return self.wrap_result(node, example, args)

    def wrap_result(
        self, node: torch.fx.Node, example: Any, args: list[VariableTracker]
    ) -> VariableTracker:
        """Trackers for an op's result; non-tensor results fold to constants."""
        if isinstance(example, SYM_TYPES):
            if is_symbolic(example):
                node.meta["example_value"] = example
                return SymNodeVariable(node, example)
            if not node.users:
                self.graph.erase_node(node)
            return ConstantVariable({torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}[
                type(example)](example))
        if isinstance(example, torch.Tensor):
            node.meta["example_value"] = example
            for a in args:
                if isinstance(a, TensorVariable) and a.example is example:
                    return a  # in-place op: the same tensor
            if is_dtensor(example):
                return TensorVariable(node, example, cls=type(example))
            return TensorVariable(node, example, cls=_result_class(args))
        leaves = pytree.tree_leaves(example)
        if not any(isinstance(x, torch.Tensor) for x in leaves):
            # A query (``x.is_contiguous()``) folds away; a call returning
            # None is kept, it is there for its effect (``x[0] = 1``).
            if example is not None and not node.users and node.op != "call_module":
                self.graph.erase_node(node)
            if is_constant_value(example) or example is None:
                return ConstantVariable(example)
            return wrap_constant_result(example)
        node.meta["example_value"] = example
        if isinstance(example, (tuple, list)):
            items: list[VariableTracker] = []
            for i, ex in enumerate(example):
                item = self.graph.call_function(operator.getitem, (node, i))
                items.append(self.wrap_result(item, ex, args))
            if isinstance(example, list):
                return ListVariable(items)
            if type(example) is not tuple:
                return NamedTupleVariable(items, type(example))
            return TupleVariable(items)
        raise Unsupported(f"op result of type `{type(example).__qualname__}` cannot be traced")

    # --- finishing -------------------------------------------------------------------
    def count_ops(self) -> int:
        return sum(1 for n in self.graph.nodes if n.op in ("call_function", "call_method", "call_module"))

    def has_ops(self) -> bool:
        return self.count_ops() > 0

    def compile(
        self, outputs: list[TensorVariable | SymNodeVariable], compiler: CompilerFn, fn_name: str
    ) -> tuple[str, CapturedGraph, list[GraphInput]]:
        """Finish the graph with ``outputs``, run the backend, install the result
        in the frame's globals; returns the global's name and the graph."""
        self.check_copied_arrays()
        self.graph.output(tuple(v.node for v in outputs))
        self._drop_dead_sizes()
        self._drop_unused_inputs()
        gm = torch.fx.GraphModule(self.root, self.graph, class_name=f"GraphModule_{fn_name}")
        gm.recompile()
        inputs = [i for i in self.inputs.values() if i.node.graph is self.graph]
        order = {n: i for i, n in enumerate(self.graph.nodes)}
        inputs.sort(key=lambda i: order[i.node])
        example_inputs: list[Any] = [i.value if isinstance(i.value, float) else as_plain(i.value)
                                     for i in inputs]
        mutated = tuple(
            k for k, i in enumerate(inputs)
            if i.version is not None and isinstance(i.var, TensorVariable)
            and _version_of(i.var.example) != i.version
        )
        # the frame's guards check that no written input shares memory with another (ADR
        # 0062); where they cannot (NumPy inputs, a capture from aliased inputs), each call does
        no_alias = None if any(i.convert is not None for i in inputs) else no_aliasing_guard(
            [i.source for i in inputs], example_inputs, mutated)
        if no_alias is not None:
            self.guards.add_guard(no_alias)

        def compile_graph() -> Any:
            # compiled under the grad mode it runs under, not the one where capture stopped
            # (a break inside `with torch.no_grad()`): the backend decides on it whether to
            # build a backward
            with torch.set_grad_enabled(self.entry_grad):
                return compiler(gm, example_inputs)

        captured = graph_entry(
            gm,
            example_inputs,
            mutated,
            compile_graph,
            self.f_globals,
            alias_guarded=no_alias is not None,
            sources=[i.source for i in inputs],
            attr_sources={k: v for k, v in self.attr_sources.items() if hasattr(gm, k)},
            unstorable=self._unstorable(gm, inputs),
        )
        name = captured.name
        return name, captured, inputs

    def _unstorable(self, gm: torch.fx.GraphModule, inputs: list[GraphInput]) -> str:
        """Why the graph cannot be stored for another process ("" if it can)."""
        if any(i.convert is not None for i in inputs):
            return "a graph input is a NumPy array (stored frames read tensors only)"
        if any(is_dtensor(t) for t in (*gm.parameters(), *gm.buffers())) or any(
                is_dtensor(i.value) for i in inputs) or any(
                getattr(n.target, "_ember_bound", False) for n in gm.graph.nodes):
            return "the graph holds DTensors (its device mesh and process groups live in this process)"
        return ""

    def call_graph(
        self, code: types.CodeType, body: PyCodegen, compiler: CompilerFn, fn_name: str
    ) -> tuple[list[Instr], list[CapturedGraph]]:
        """Compile the graph with the tensors ``body`` asked for as its outputs,
        and the instructions to run before ``body``: call it into ``OUT_LOCAL``.
        Nothing when the graph computes nothing ``body`` needs."""
        if not body.outputs and not self.has_ops():
            return [], []
        name, captured, inputs = self.compile(body.outputs, compiler, fn_name)
        head = PyCodegen(code.co_cellvars, code.co_freevars, code.co_firstlineno)
        arrays = [inp for inp in inputs if inp.convert is not None]
        if arrays:
            # NumPy arrays are converted together: one array passed twice is one tensor
            # (the backends see the aliasing, as for a tensor passed twice)
            head.load_callable_const(ndarrays_to_graph_inputs)
            for inp in arrays:
                head.load_source(inp.source)
            head.call(len(arrays))
            head.store_local(ARRAYS_LOCAL)
        head.load_global(name, push_null=True)
        converted = 0
        for inp in inputs:
            if inp.convert is not None:
                head.load_local(ARRAYS_LOCAL)
                head.load_const(converted)
                head.subscr()
                converted += 1
            elif isinstance(inp.value, float) or type(inp.value) in BASE_CLASSES or is_dtensor(inp.value):
                head.load_source(inp.source)
            else:  # a subclass adding nothing: the graph takes it as a plain tensor
                head.load_callable_const(as_plain)
                head.load_source(inp.source)
                head.call(1)
        head.call(len(inputs))
        head.store_local(OUT_LOCAL)
        return head.instrs, [captured]

    def _drop_dead_sizes(self) -> None:
        """Size arithmetic whose result was only used to decide something at trace time."""
        for node in reversed(list(self.graph.nodes)):
            if not node.users and node.op in ("call_function", "call_method") and isinstance(
                node.meta.get("example_value"), SYM_TYPES
            ):
                self.graph.erase_node(node)

    def user_line(self) -> str:
        """Where the program is now (the site of a guard recorded while tracing)."""
        return str(self.tracing.user_line()) if self.tracing is not None else ""

    def shape_guards(self) -> None:
        """Add the SHAPE_EXPR guards (after the backend ran: it may have guarded too)."""
        for guard in self.shapes.guards():
            self.guards.add_shape(guard)
        for source, value, reason in self.shapes.pinned_floats():
            self.guards.add_constant(source, value, reason)

    def _drop_unused_inputs(self) -> None:
        for key, inp in list(self.inputs.items()):
            if not inp.node.users:
                self.graph.erase_node(inp.node)
                del self.inputs[key]
