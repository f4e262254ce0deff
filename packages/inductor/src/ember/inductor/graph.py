"""GraphLowering: walks an ATen fx graph and turns every node into loop IR.

The result is the list of realized buffers in creation (= topological) order,
the graph inputs and constants, and the output spec. Everything after this
(scheduling, codegen) reads only these.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._pytree import tree_flatten, tree_map

from ember.ir.shapes import EagerLayoutFakeMode
from ember.ir.updates import input_updates_of

from .conv_layout import channels_last_strides, prefers_channels_last
from .decompositions import NEVER_DECOMPOSE, decompose_node
from .errors import LoweringError
from .fx_util import attr_value, graph_device, op_name
from .index import affine_coefficients, index_symbols, simplify_index
from .ir import (
    Buffer,
    ComputedBuffer,
    ExternKernel,
    InputBuffer,
    IRNode,
    Layout,
    MultiOutput,
    Pointwise,
    Reduction,
    ReinterpretView,
    View,
    as_strided_of_buffer,
)
from .logs import perf_hints
from .lowering import (
    SUPPORTED_DTYPES,
    creation,
    find_lowering,
    pointwise,
    pooling,
    reduction,
    views,
)
from .lowering.reduction import REDUCTION_TARGETS
from .memory_order import input_order_strides
from .ops_handler import DepsOps
from .options import InductorOptions
from .sizes import Size, SizeHints, as_size, as_sizes

_SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)

aten = torch.ops.aten
#: Imported for their registrations: every ATen op they lower is in ``LOWERINGS``.
_LOWERING_TABLES = (creation, pointwise, pooling, reduction, views)

_MAX_DECOMPOSE_DEPTH = 8


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """How the wrapper produces one flat output: a buffer, a view of one, or a constant."""

    kind: str  # "buffer" | "view" | "const" | "size" (a symbolic int: ``value``)
    name: str = ""
    layout: Layout | None = None
    value: Any = None


@dataclass
class LoweredGraph:
    inputs: list[InputBuffer]
    constants: dict[str, torch.Tensor]
    buffers: list[Buffer]
    outputs: list[OutputSpec]
    out_spec: Any
    fallbacks: collections.Counter[str] = field(default_factory=collections.Counter)
    #: constant name -> the ``get_attr`` target it reads (its data comes from the module at run time)
    constant_targets: dict[str, str] = field(default_factory=dict)
    #: each size symbol's value for the inputs compiled with (heuristics only)
    hints: SizeHints = field(default_factory=SizeHints)
    #: input position -> the symbolic int that input is (a ``SymInt`` graph input)
    size_inputs: dict[int, Any] = field(default_factory=dict)


def _body_stats(node: IRNode) -> tuple[int, int, int, int]:
    """(distinct buffers read, ops, transcendental ops, costly ops) of ``node``'s body."""
    deps = DepsOps()
    node.make_loader()(index_symbols("t", len(node.get_size())), deps)
    return len({n for n, _ in deps.loads}), deps.num_ops, deps.num_heavy, deps.num_costly


def _reads_transposed(node: IRNode) -> bool:
    """Whether ``node`` reads some input with a stride above 1 along its last dim of more
    than one element (through a permuted view: ``x.permute(0, 2, 1) + pos``)."""
    size = node.get_size()
    dims = [i for i, s in enumerate(size) if s != 1]
    if not dims or not all(isinstance(s, int) for s in size):
        return False
    syms = index_symbols("t", len(size))
    deps = DepsOps()
    try:
        node.make_loader()(syms, deps)
    except Exception:  # a loader that needs more than loads and arithmetic
        return False
    last, ranges = syms[dims[-1]], dict(zip(syms, size))
    for _, index in deps.loads:
        fit = affine_coefficients(simplify_index(index, ranges), syms)
        if fit is not None and isinstance(fit[0].get(last), int) and int(fit[0][last]) > 1:
            return True
    return False


class GraphLowering:
    """Lowers one fx graph (``run``) into a ``LoweredGraph``."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: list[Any],
        options: InductorOptions,
        dtypes: frozenset[torch.dtype] = SUPPORTED_DTYPES,
        label: str = "C++",
        *,
        welford: bool = False,
        calls_need_unit_stride: bool = False,
    ) -> None:
        """``dtypes``: what the backend's kernels handle (``label`` names it in messages);
        ``welford``: its kernels compute ``welford_m2`` reductions (variance in one pass)."""
        self.gm = gm
        self.example_inputs = example_inputs
        self.options = options
        self.dtypes = dtypes
        self.label = label
        self.welford = welford
        self.calls_need_unit_stride = calls_need_unit_stride
        self.device = graph_device(example_inputs)
        self.buffers: list[Buffer] = []
        self.inputs: list[InputBuffer] = []
        self.constants: dict[str, torch.Tensor] = {}
        self.constant_targets: dict[str, str] = {}
        self.fallbacks: collections.Counter[str] = collections.Counter()
        self.fake_mode = EagerLayoutFakeMode(allow_non_fake_inputs=True)
        self.hints = SizeHints.of_inputs(example_inputs)
        if self.hints:  # symbolic sizes: torch's dispatch cache keys on its own ShapeEnv
            self.fake_mode.cache_enabled = False
        self.size_inputs: dict[int, Any] = {}
        self.env: dict[torch.fx.Node, Any] = {}
        self._updates = _update_nodes(gm)
        #: buffer name -> layout of every input and registered buffer (``_stored_in_order``)
        self._layouts: dict[str, Layout] = {}
        self._depth = 0
        self._shared: dict[IRNode, Buffer] = {}  # IR nodes hash by identity; _realize_shared
        #: convolutions read channels-last inputs (``conv_layout``, ADR 0056)
        self._channels_last_convs = prefers_channels_last(gm, self.device, self.hints)

    # -- naming and realization -------------------------------------------------
    def _name(self) -> str:
        return f"buf{len(self.buffers)}"

    def register(self, buf: Buffer) -> Buffer:
        self.buffers.append(buf)
        self._layouts[buf.name] = buf.layout
        return buf

    def realize(
        self, node: IRNode, stride: tuple[Size, ...] | None = None
    ) -> Buffer | ReinterpretView:
        if isinstance(node, (Buffer, ReinterpretView)) and stride is None:
            return node
        if isinstance(node, View) and stride is None:
            view = as_strided_of_buffer(node)
            if view is not None:
                return view
        size, dtype = node.get_size(), node.get_dtype()
        if stride is None and isinstance(node, Pointwise):
            stride = input_order_strides(node, self._stored_in_order)  # eager's: its inputs'
        layout = (
            Layout(size, stride, dtype) if stride is not None else Layout.contiguous(size, dtype)
        )
        data: Pointwise | Reduction
        if isinstance(node, Reduction):
            data = node
        else:
            data = Pointwise(size, dtype, node.make_loader())
        return self.register(ComputedBuffer(self._name(), layout, data=data))

    def _stored_in_order(self, name: str) -> bool:
        """Whether buffer ``name``'s memory is in its logical (row-major) order."""
        layout = self._layouts.get(name)
        if layout is None and name.startswith("const"):
            value = self.constants[name]
            return bool(value.is_contiguous())
        return layout is not None and _in_logical_order(layout.size, layout.stride)

    def realize_for_extern(self, node: IRNode) -> Buffer | ReinterpretView:
        """A buffer or strided view for an ATen call (which accepts any strides).

        A view (permute, transpose, slice, expand) of a value not yet computed is
        realized as its base in the base's own order, and passed as a strided view:
        ``mm(g.t(), x)`` then reads ``g`` transposed instead of a kernel writing a
        transposed copy of it, and other users of ``g`` share the same buffer.
        """
        if not isinstance(node, View):
            return self.realize(node)
        chain: list[View] = []
        root: IRNode = node
        while isinstance(root, View):
            chain.append(root)
            root = root.base
        if not isinstance(root, (Pointwise, Reduction)):  # already a buffer: a strided view
            return self.realize(node)
        base = self._realize_shared(root)
        rebuilt: IRNode = base
        for v in reversed(chain):
            rebuilt = dataclasses.replace(v, base=rebuilt)
        view = as_strided_of_buffer(rebuilt)
        return view if view is not None else self.realize(rebuilt)

    def _realize_shared(self, node: Pointwise | Reduction) -> Buffer:
        """Realize ``node`` once; every graph value holding it now holds the buffer."""
        done = self._shared.get(node)
        if done is not None:
            return done
        buf = self.realize(node)
        assert isinstance(buf, Buffer)
        self._shared[node] = buf
        for k, v in self.env.items():
            if v is node:
                self.env[k] = buf
        return buf

    # -- extern fallback --------------------------------------------------------------
    def fallback(self, fx_node: torch.fx.Node, reason: str) -> Any:
        op = fx_node.target
        self.fallbacks[op_name(op)] += 1
        perf_hints.info("extern kernel for %s: %s", op_name(op), reason)
        schema = getattr(op, "_schema", None)
        mutated_positions = []
        if schema is not None:
            for k, a in enumerate(schema.arguments):
                if a.alias_info is not None and a.alias_info.is_write:
                    mutated_positions.append(k)
        if mutated_positions:
            self._realize_pending()

        def to_ir(a: Any) -> Any:
            if isinstance(a, torch.fx.Node):
                value = self.env[a]
                return tree_map(
                    lambda v: self.realize_for_extern(v) if isinstance(v, IRNode) else v, value
                )
            if isinstance(a, (list, tuple)):  # Tensor[] / Tensor?[] arguments (index_put)
                return [to_ir(x) for x in a]
            if isinstance(a, _SYM_TYPES):
                # a symbolic size a decomposition passed on as a value (``slice_backward``'s
                # ``end`` in its ``slice_scatter``): its expression, computed on every call
                # from the bound symbols, never the size of the call it was traced at
                return as_size(a)
            return a

        if (
            op in _LAYOUT_FOLLOWS_INPUT
            and self._channels_last_convs
            and isinstance(fx_node.args[0], torch.fx.Node)
        ):
            first = self._realize_channels_last(fx_node.args[0])
            args = (first, *(to_ir(a) for a in fx_node.args[1:]))
        else:
            args = tuple(to_ir(a) for a in fx_node.args)
        kwargs = {k: to_ir(v) for k, v in fx_node.kwargs.items()}
        mutated = tuple(
            _buffer_name(args[k])
            for k in mutated_positions
            if k < len(args) and isinstance(args[k], IRNode)
        )
        val = fx_node.meta["val"]
        stride: tuple[Size, ...] | None = None
        if op in _LAYOUT_FOLLOWS_INPUT and not any(
            u.target in _READS_STRIDES for u in _consumers(fx_node)
        ):
            val = self._rerun_on_layouts(op, args, kwargs, val)
            stride = _symbolic_channels_last_result(args, val)
        if isinstance(val, torch.Tensor):
            size = as_sizes(val.shape)
            layout = Layout(size, stride or as_sizes(val.stride()), val.dtype)
            return self.register(
                ExternKernel(
                    self._name(),
                    layout,
                    op=op,
                    args=args,
                    kwargs=kwargs,
                    reason=reason,
                    mutated=mutated,
                )
            )
        flat, spec = tree_flatten(val)
        dummy = Layout((), (), torch.float32)
        kernel = self.register(
            ExternKernel(
                self._name(),
                dummy,
                op=op,
                args=args,
                kwargs=kwargs,
                reason=reason,
                mutated=mutated,
                tuple_result=True,
            )
        )
        assert isinstance(kernel, ExternKernel)
        outs: list[Any] = []
        for i, v in enumerate(flat):
            if isinstance(v, torch.Tensor):
                layout = Layout(as_sizes(v.shape), as_sizes(v.stride()), v.dtype)
                outs.append(self.register(MultiOutput(self._name(), layout, source=kernel, path=i)))
            else:
                outs.append(v)
        from torch.utils._pytree import tree_unflatten

        return tree_unflatten(outs, spec)

    def _rerun_on_layouts(self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                          val: Any) -> Any:
        """``op``'s fake result for its arguments as realized here, when their layouts
        differ from the traced ones. A convolution's output memory format follows its
        input's: a traced channels-last input (a GroupNorm's fake result) that this graph
        realized contiguous makes ATen return a contiguous output, which the wrapper then
        copied into the traced layout (``_restride``: one copy per convolution of
        diffusers' VAE). Static layouts only; on any failure the traced value stands."""
        def fake(a: Any) -> Any:
            if isinstance(a, (Buffer, ReinterpretView)):
                lay = a.layout
                if not all(isinstance(v, int) for v in (*lay.size, *lay.stride)):
                    raise _Symbolic
                return torch.empty_strided(lay.size, lay.stride, dtype=lay.dtype,
                                           device=self.device)
            if isinstance(a, IRNode):
                raise _Symbolic
            return a

        try:
            with self.fake_mode:
                fargs, fkwargs = tree_map(fake, (args, kwargs))
                got = op(*fargs, **fkwargs)
        except Exception:  # symbolic layouts, or the fake kernel refuses: keep the traced one
            return val
        if not isinstance(got, torch.Tensor) or not isinstance(val, torch.Tensor):
            return val
        if tuple(got.shape) != tuple(val.shape) or got.dtype != val.dtype:
            return val
        return got

    def _realize_channels_last(self, arg: torch.fx.Node) -> Any:
        """A convolution's input stored channels-last (a copy where it is stored otherwise);
        later readers of ``arg`` read the same buffer."""
        value = self.env[arg]
        if not isinstance(value, IRNode):
            return value
        size = value.get_size()
        if len(size) != 4:
            return self.realize_for_extern(value)
        want = channels_last_strides(size)
        if isinstance(value, (Buffer, ReinterpretView)) and _significant(
            value.layout.size, value.layout.stride
        ) == _significant(value.layout.size, want):
            return value
        buf = self.realize(value, want)
        if not isinstance(value, (Buffer, ReinterpretView)):
            self.env[arg] = buf  # computed once, in this layout, for every reader
        return buf

    def _realize_pending(self) -> None:
        for n, v in list(self.env.items()):
            if isinstance(v, IRNode) and not isinstance(v, (Buffer, ReinterpretView)):
                self.env[n] = self.realize(v)

    # -- the walk ---------------------------------------------------------------------
    def run(self) -> LoweredGraph:
        self._propagate_meta()
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for i, node in enumerate(placeholders):
            ex = self.example_inputs[i]
            if isinstance(ex, torch.SymInt):
                self.size_inputs[i] = self.env[node] = as_size(ex)
                continue
            if not isinstance(ex, torch.Tensor):
                raise LoweringError(
                    f"input {i} ({node.name}) is a {type(ex).__name__}, not a tensor"
                )
            buf = InputBuffer(f"arg{i}", Layout(as_sizes(ex.shape), as_sizes(ex.stride()), ex.dtype))
            self.inputs.append(buf)
            self._layouts[buf.name] = buf.layout
            self.env[node] = buf
        outputs: list[OutputSpec] = []
        out_spec = None
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "get_attr":
                self.env[node] = self._constant(node)
            elif node.op == "call_function":
                self.env[node] = self._lower_call(node)
                self._maybe_realize(node)
            elif node.op == "output":
                flat, out_spec = tree_flatten(node.args[0])
                outputs = [self._output(a) for a in flat]
            else:
                raise LoweringError(
                    f"node {node.name!r}: {node.op} nodes are not ATen-level; run aotgrad first"
                )
        return LoweredGraph(
            self.inputs,
            self.constants,
            self.buffers,
            outputs,
            out_spec,
            self.fallbacks,
            self.constant_targets,
            self.hints,
            self.size_inputs,
        )

    def _propagate_meta(self) -> None:
        if all("val" in n.meta for n in self.gm.graph.nodes if n.op not in ("output",)):
            return
        with self.fake_mode:
            fakes = [
                self.fake_mode.from_tensor(x) if isinstance(x, torch.Tensor) else x
                for x in self.example_inputs
            ]
        interp = torch.fx.Interpreter(self.gm)
        env_iter = iter(fakes)

        def run_node(n: torch.fx.Node) -> Any:
            out = (
                next(env_iter)
                if n.op == "placeholder"
                else torch.fx.Interpreter.run_node(interp, n)
            )
            n.meta["val"] = out
            return out

        interp.run_node = run_node  # type: ignore[method-assign]
        with self.fake_mode:
            interp.run(*fakes)

    def _constant(self, node: torch.fx.Node) -> InputBuffer:
        value = attr_value(self.gm, str(node.target))
        if not isinstance(value, torch.Tensor) or isinstance(value, FakeTensor):
            raise LoweringError(
                f"get_attr {node.target!r} is not a real tensor; compiled code needs its data"
            )
        name = f"const{len(self.constants)}"
        self.constants[name] = value
        self.constant_targets[name] = str(node.target)
        return InputBuffer(name, Layout(as_sizes(value.shape), as_sizes(value.stride()), value.dtype))

    def _unsupported(self, node: torch.fx.Node) -> str | None:
        vals = tree_flatten((node.meta.get("val"),))[0]
        for a in tree_flatten((node.args, node.kwargs))[0]:
            if isinstance(a, torch.fx.Node):
                vals.extend(tree_flatten(a.meta.get("val"))[0])
        for v in vals:
            if isinstance(v, torch.Tensor):
                if v.dtype not in self.dtypes:
                    return f"dtype {v.dtype} has no {self.label} lowering"
                if v.device != self.device:
                    return f"device {v.device} has no code generator"
        return None

    def _lower_call(self, node: torch.fx.Node) -> Any:
        val = node.meta.get("val")
        if isinstance(val, _SYM_TYPES):  # size arithmetic (sym_size, mul, ...): its expression
            return as_size(val)
        target = node.target
        name = op_name(target)
        reason = self._unsupported(node)
        if name in self.options.force_fallback or _qualified(target) in self.options.force_fallback:
            reason = "listed in options.force_fallback"
        lowering = find_lowering(target) if reason is None else None
        if lowering is not None:
            args, kwargs = tree_map(self._ir_arg, _positional(target, node.args, node.kwargs))
            return lowering(self, node, *args, **kwargs)
        if reason is None and self._depth < _MAX_DECOMPOSE_DEPTH:
            sub = decompose_node(node, self.fake_mode)
            if sub is not None:
                return self._lower_subgraph(node, sub)
            reason = "no lowering or decomposition"
        return self.fallback(node, reason or "unsupported")

    def _ir_arg(self, a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        return as_size(a) if isinstance(a, _SYM_TYPES) else a

    def _lower_subgraph(self, node: torch.fx.Node, sub: torch.fx.Graph) -> Any:
        args = [
            a for a in tree_flatten((node.args, node.kwargs))[0] if isinstance(a, torch.fx.Node)
        ]
        seen: dict[str, torch.fx.Node] = {}
        for a in args:
            seen.setdefault(a.name, a)
        saved = self.env
        self.env = dict(saved)
        self._depth += 1
        try:
            result: Any = None
            for sn in sub.nodes:
                if sn.op == "placeholder":
                    self.env[sn] = saved[seen[str(sn.target)]]
                elif sn.op == "call_function":
                    self.env[sn] = self._lower_call(sn)
                    self._maybe_realize(sn)
                elif sn.op == "output":
                    result = tree_map(self._ir_arg, sn.args[0])
            return result
        finally:
            self._depth -= 1
            self.env = saved

    def _maybe_realize(self, node: torch.fx.Node) -> None:
        value = self.env[node]
        if not isinstance(value, (Pointwise, View)):
            return
        if isinstance(value, View) and as_strided_of_buffer(value) is not None:
            return
        reads, ops, heavy, costly = _body_stats(value)
        users = len(node.users)
        opts = self.options
        if reads and _is_scalar_feeding_tensor(node, value, ops - reads):
            # a 0-d value computed from scalars (an optimizer's ``-lr / (1 - beta ** step)``)
            # read by a loop over a tensor: computed once, not once per element
            self.env[node] = self.realize(value)
        elif reads and costly and _is_broadcast_along_innermost(
                node, value, self._channels_last_convs, self.hints):
            # a batch norm's ``rsqrt(var + eps)`` per channel, read by a loop over a
            # channels-last activation: computed once per channel, not once per element
            self.env[node] = self.realize(value)
        elif users > 1 and node in self._updates:
            # the new value of an input (ember.ir.updates) is stored anyway: other users read
            # it rather than recompute it from the old value, which an in-place write may
            # already have overwritten (inplace.py)
            self.env[node] = self.realize(value, _output_stride(node))
        elif ops > opts.max_inline_ops or (
            users > 1
            and (
                reads > opts.realize_reads_threshold
                or ops > opts.realize_ops_threshold
                # softmax's exp(x - max) feeds the sum and the division: compute it once
                # (stored in a kernel-local array when both land in one kernel); a value
                # read through a permutation, once (Whisper's residual stream starts as
                # the transposed convolution output: every layer re-read it strided)
                or (_feeds_reduction(node) and (heavy or _reads_transposed(value)))
            )
        ):
            self.env[node] = self.realize(value, _output_stride(node))
        elif heavy and self.calls_need_unit_stride and _permuted_by_a_user(node):
            # computed in its own order, then read through the permutation: gcc 12 leaves a
            # loop that reads its input strided and calls erf/tanh/log scalar (Whisper's
            # GELU of its convolutions, read transposed by every layer norm: 33 -> 5 us)
            self.env[node] = self.realize(value, _output_stride(node))
        elif _feeds_extern_and_more(node):
            self.env[node] = self.realize_for_extern(value)

    def _output(self, arg: Any) -> OutputSpec:
        if not isinstance(arg, torch.fx.Node):
            return OutputSpec("const", value=arg)
        value = self.env[arg]
        if not isinstance(value, IRNode):
            if isinstance(value, sympy.Basic):
                return OutputSpec("size", value=value)
            return OutputSpec("const", value=value)
        val = arg.meta["val"]
        stride = as_sizes(val.stride())
        if isinstance(value, InputBuffer):
            return OutputSpec("buffer", name=value.name, layout=value.layout)
        view = as_strided_of_buffer(value) if isinstance(value, (View, ReinterpretView)) else None
        if view is not None:
            if view.layout == view.base.layout:
                return OutputSpec("buffer", name=view.base.name, layout=view.base.layout)
            return OutputSpec("view", name=view.base.name, layout=view.layout)
        dense = _is_dense(as_sizes(val.shape), stride, self.hints)
        # a buffer realized in another order (a reduction, a value read by several
        # kernels) is copied, so the caller gets eager's strides
        if isinstance(value, Buffer) and (
            not dense
            or _significant(value.layout.size, value.layout.stride)
            == _significant(as_sizes(val.shape), stride)
        ):
            return OutputSpec("buffer", name=value.name, layout=value.layout)
        buf = self.realize(value, stride if dense else None)
        assert isinstance(buf, Buffer)
        # a value returned twice (a training forward's output that is also saved for the
        # backward) is one buffer, not one stored copy per position
        self.env[arg] = buf
        return OutputSpec("buffer", name=buf.name, layout=buf.layout)


def _symbolic_channels_last_result(args: tuple[Any, ...], val: Any) -> tuple[Size, ...] | None:
    """A convolution's channels-last output strides where its input is stored
    channels-last at symbolic sizes (``_rerun_on_layouts`` asks the fake kernel at static
    sizes only; ATen's output follows its input's memory format), else None."""
    if not isinstance(val, torch.Tensor) or val.dim() != 4 or not args:
        return None
    x = args[0]
    if not isinstance(x, (Buffer, ReinterpretView)) or len(x.layout.size) != 4:
        return None
    lay = x.layout
    if all(isinstance(v, int) for v in (*lay.size, *lay.stride)):
        return None  # static: the fake kernel decided
    if _significant(lay.size, lay.stride) != _significant(lay.size, channels_last_strides(lay.size)):
        return None
    return channels_last_strides(as_sizes(val.shape))


class _Symbolic(Exception):
    """A layout with symbolic sizes: ``_rerun_on_layouts`` keeps the traced value."""


#: extern ops whose output layout follows their input's (re-derived from the layouts the
#: graph realized, ``GraphLowering._rerun_on_layouts``)
_LAYOUT_FOLLOWS_INPUT = frozenset({aten.convolution.default})

#: ops that read their input's storage through the traced strides: a value they use keeps
#: its traced layout
_READS_STRIDES = frozenset(
    {aten.as_strided.default, aten.as_strided_.default, aten.as_strided_scatter.default}
)


# Ops that only reinterpret their input: looked through when asking where a value goes.
_VIEW_OPS = frozenset(
    {
        aten.t.default,
        aten.permute.default,
        aten.transpose.int,
        aten.view.default,
        aten.reshape.default,
        aten.expand.default,
        aten._unsafe_view.default,
    }
)


def _consumers(
    node: torch.fx.Node, through: frozenset[Any] | None = None
) -> list[torch.fx.Node]:
    """The ops using ``node``'s value, looking through view ops (t, permute, view, ...)
    or the ops ``through``."""
    through = _VIEW_OPS if through is None else through
    stack, seen, consumers = list(node.users), set(), []
    while stack:
        user = stack.pop()
        if user in seen:
            continue
        seen.add(user)
        if user.target in through:
            stack.extend(user.users)
        else:
            consumers.append(user)
    return consumers


_VIEWS_AND_COPIES = _VIEW_OPS | {aten.clone.default}


def _update_nodes(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """The nodes ``gm`` returns as new values of its inputs (``ember.ir.updates``)."""
    pairs = input_updates_of(gm)
    if not pairs:
        return set()
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    flat = tree_flatten(out.args[0])[0]
    return {flat[k] for k, _ in pairs if k < len(flat) and isinstance(flat[k], torch.fx.Node)}


#: a small value is stored when a loop reads it broadcast over this many times its
#: elements, and over at least ``_BROADCAST_MIN_ELEMENTS`` elements (a stored value costs
#: one more kernel call: a few microseconds)
_BROADCAST_RATIO = 16
_BROADCAST_MIN_ELEMENTS = 8192


def _is_broadcast_along_innermost(
    node: torch.fx.Node, value: IRNode, channels_last: bool, hints: SizeHints
) -> bool:
    """Whether ``value`` (of static size; the caller knows it computes a costly op: a
    division, a square root, a transcendental function) is read broadcast by an op with
    ``_BROADCAST_RATIO`` times more elements, along that op's innermost dim. Inlined, the
    op runs for every element of the reader: a batch norm's ``rsqrt(var + eps)`` over a
    channels-last activation, where the channel is the innermost index (ShuffleNet's
    per-channel scale: ~37 us of a 49k-element kernel, 20 us computed once). Along an outer
    dim (NCHW) the C++ compiler computes it once per row already, and a stored value costs
    a kernel."""
    size = value.get_size()
    if not all(isinstance(s, int) for s in size):
        return False
    numel = math.prod(int(s) for s in size)
    for user in _consumers(node):
        val = user.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        try:  # symbolic sizes by their values for the inputs at hand (a heuristic)
            n = math.prod(hints.hints_of(as_sizes(val.shape)))
        except ValueError:
            continue
        if n < _BROADCAST_MIN_ELEMENTS or n < _BROADCAST_RATIO * numel:
            continue
        if node not in user.all_input_nodes or _varies_innermost(size, val, channels_last, hints):
            return True
    return False


def _varies_innermost(
    size: tuple[Size, ...], out: torch.Tensor, channels_last: bool, hints: SizeHints
) -> bool:
    """Whether a value of ``size``, broadcast (right-aligned) to ``out``, takes more than one
    value along the dim ``out`` is stored innermost in (a 4-d value's channels in a graph
    computing channels-last)."""
    nd = out.dim()
    if len(size) > nd:
        return True
    try:  # symbolic sizes and strides by their values for the inputs at hand
        shape = hints.hints_of(as_sizes(out.shape))
        stride = hints.hints_of(as_sizes(out.stride()))
    except ValueError:
        return True
    dims = [d for d in range(nd) if shape[d] != 1]
    if not dims:
        return False
    inner = 1 if channels_last and nd == 4 else min(dims, key=lambda d: stride[d])
    k = inner - (nd - len(size))
    return k >= 0 and size[k] != 1


def _is_scalar_feeding_tensor(node: torch.fx.Node, value: IRNode, ops: int) -> bool:
    """Whether ``value`` has one element, does arithmetic (``ops`` beyond its loads) and is
    read (through views) by an op producing more than one element. (A value computed from
    constants alone stays inline: the C++ compiler folds it.)"""
    if ops <= 0 or not all(s == 1 for s in value.get_size()):
        return False
    for user in _consumers(node):
        val = user.meta.get("val")
        if isinstance(val, torch.Tensor) and any(s != 1 for s in val.shape):
            return True
    return False


def _in_logical_order(size: tuple[Size, ...], stride: tuple[Size, ...]) -> bool:
    """Whether the dims of more than one element have non-increasing strides (row-major
    order, gaps allowed: a slice's layout); symbolic strides count as in order."""
    steps = [st for n, st in zip(size, stride) if n != 1]
    if not all(isinstance(st, int) for st in steps):
        return True
    return all(int(a) >= int(b) for a, b in zip(steps, steps[1:]))


def _feeds_reduction(node: torch.fx.Node) -> bool:
    """Whether some use of ``node`` (through views and copies) is a reduction. A copy
    counts: a layer norm of a permuted value reads ``clone(x, contiguous)`` (Whisper's
    residual stream after its convolutions), and the value's GELU was recomputed from
    the convolution's output in every later layer's kernel."""
    return any(u.target in REDUCTION_TARGETS for u in _consumers(node, _VIEWS_AND_COPIES))


_PERMUTING = frozenset({aten.t.default, aten.permute.default, aten.transpose.int})


def _permuted_by_a_user(node: torch.fx.Node) -> bool:
    """Whether a direct user of ``node`` is a view that reorders its dims."""
    return any(u.target in _PERMUTING for u in node.users)


def _feeds_extern_and_more(node: torch.fx.Node) -> bool:
    """Whether ``node`` (looking through views) feeds an ATen call such as ``mm`` and another op.

    Such a value is stored for the ATen call anyway, so its other users read that
    buffer instead of recomputing it (``gelu_backward`` feeds both ``mm`` and the
    bias-gradient ``sum``).
    """
    consumers = _consumers(node)
    return len(consumers) > 1 and any(u.target in NEVER_DECOMPOSE for u in consumers)


def _positional(
    target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``clamp(x, max=1.0)`` -> ``clamp(x, None, 1.0)``: arguments that the schema allows
    positionally are passed so (lowerings name their parameters freely); keyword-only
    ones stay keywords."""
    schema = getattr(target, "_schema", None)
    if schema is None or not kwargs:
        return tuple(args), dict(kwargs)
    out, rest = list(args), dict(kwargs)
    positional = [a for a in schema.arguments if not a.kwarg_only]
    last = max((i for i, a in enumerate(positional) if a.name in rest), default=-1)
    for a in positional[len(out) : last + 1]:
        if a.name in rest:
            out.append(rest.pop(a.name))
        elif a.has_default_value():
            out.append(a.default_value)
        else:
            return tuple(args), dict(kwargs)
    return tuple(out), rest


def _qualified(target: Any) -> str:
    name = getattr(target, "_schema", None)
    if name is None:
        return str(target)
    overload = getattr(target, "_overloadname", "default")
    return f"{target._schema.name}.{overload}"


def _buffer_name(node: IRNode) -> str:
    if isinstance(node, ReinterpretView):
        return node.base.name
    if isinstance(node, Buffer):
        return node.name
    raise LoweringError("a mutated argument is not a realized buffer")


def _significant(size: tuple[Size, ...], stride: tuple[Size, ...]) -> tuple[Size | None, ...]:
    """Strides of dims with size other than 1 (the stride of a size-1 dim is never read)."""
    return tuple(st if sz != 1 else None for sz, st in zip(size, stride))


def _output_stride(node: torch.fx.Node) -> tuple[int, ...] | None:
    """Eager's (dense, static) strides for a value the graph returns, else None (contiguous)."""
    if not any(u.op == "output" for u in node.users):
        return None
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    size, stride = as_sizes(val.shape), as_sizes(val.stride())
    if not all(isinstance(v, int) for v in size + stride):
        return None
    return stride if _is_dense(size, stride, SizeHints()) else None


def _is_dense(size: tuple[Size, ...], stride: tuple[Size, ...], hints: SizeHints) -> bool:
    """Non-overlapping and without holes: a permutation of contiguous strides (symbolic
    strides must equal the expected products as expressions)."""
    dims = sorted(
        ((st, sz) for sz, st in zip(size, stride) if sz != 1),
        key=lambda p: (hints.hint(p[0]), hints.hint(p[1])),
    )
    expected: Size = 1
    for st, sz in dims:
        if sympy.expand(sympy.sympify(st) - expected) != 0:
            return False
        expected = as_size(expected * sz) if isinstance(sz, sympy.Basic) else expected * sz
    return True
