"""The generated Python wrapper: allocate buffers, call kernels and extern ops, return outputs.

The wrapper is Python source (printed by ``EMBER_LOGS=output_code`` and written
to the debug directory) executed once into a namespace holding the loaded
kernels, constants and a few helpers. It prints decisions made elsewhere: the
step order (``scheduler.py``), when buffers are allocated, reused and freed
(``memory_plan.py``), and how the backend calls a kernel and allocates memory
(``Backend.call``/``Backend.allocate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from ..errors import LoweringError
from ..fx_util import op_name
from ..graph import LoweredGraph, OutputSpec
from ..ir import Buffer, ExternKernel, IRNode, Layout, ReinterpretView
from ..kernel_plan import ExternCall, KernelPlan, Step
from ..memory_plan import StepMemory
from .backend import Backend, KernelSource
from .pysize import pyexpr, pysizes


@dataclass
class WrapperCode:
    source: str
    constants: list[Any] = field(default_factory=list)


class WrapperWriter:
    def __init__(
        self,
        graph: LoweredGraph,
        steps: list[Step],
        kernels: dict[str, KernelSource],
        memory: list[StepMemory],
        backend: Backend,
    ) -> None:
        self.graph = graph
        self.steps = steps
        self.kernels = kernels
        self.memory = memory
        self.backend = backend
        self.consts: list[Any] = []
        self.lines: list[str] = []
        #: buffers this wrapper allocated (storage offset 0), and views of them at offset 0:
        #: their views need no ``storage_offset()`` read (``_as_strided`` is called directly)
        self.fresh: set[str] = set()
        #: C++ kernels read only ``data_ptr()``: a buffer reusing a fresh one is bound to
        #: the same tensor, and viewed with its own layout only where an op or the caller
        #: sees it (``ref``), which saves an ``as_strided`` (~1-2 us) per reuse
        self.lazy: dict[str, Layout] = {}
        #: each buffer's layout, as the tensor bound to its name has it (unless ``lazy``)
        self.buffer_layouts: dict[str, Layout] = {b.name: b.layout for b in graph.buffers}
        self.const_views = 0
        #: ``_as_strided`` expression of a fresh buffer -> the local holding that view
        self.views: dict[str, str] = {}
        self.view_of: dict[str, tuple[str, str]] = {}  # local -> (its buffer, expression)
        self.n_views = 0
        #: C++ kernels: buffer -> the local holding its ``data_ptr()``, read once per call
        #: and shared by every kernel that takes it (dropped after an extern call)
        self.pointers: dict[str, str] = {}
        #: C++ kernels: buffer -> the buffer whose tensor it is bound to (computed in place
        #: into an input, or reusing a dead buffer): same memory, same pointer
        self.same_memory: dict[str, str] = {}
        #: C++ kernels: small buffers only kernels read or write -> their byte offset in
        #: one scratch block the call allocates (``scratch_buffers``)
        self.scratch: dict[str, int] = {}

    def free(self, name: str) -> None:
        """``del name`` and of the views of it held in locals (they would keep it alive)."""
        if name in self.scratch:
            return  # part of the call's scratch block, not a tensor of its own
        self.pointers.pop(name, None)
        self.lines.append(f"    del {name}")
        for var, (base, expr) in list(self.view_of.items()):
            if base == name:
                self.lines.append(f"    del {var}")
                del self.view_of[var], self.views[expr]

    def hand_over(self, old: str, new: str) -> None:
        """Buffer ``new`` took dead buffer ``old``'s memory: ``old``'s name and its views'
        go, so that the memory is freed when ``new``'s name is (an old name kept bound
        held every reused buffer to the end of the call). ``new`` is bound to the same
        tensor (or a view of it): what resolved its address through ``old`` now stops at
        ``new``."""
        pointer = self.pointers.pop(old, None)
        if self.same_memory.get(new) == old:
            del self.same_memory[new]
            if pointer is not None:
                self.pointers[new] = pointer
        for name, root in list(self.same_memory.items()):
            if root == old:
                self.same_memory[name] = new
        self.free(old)

    def ref(self, name: str) -> str:
        """``name`` as a tensor with its own layout."""
        if name in self.scratch:  # scratch_buffers leaves out every buffer read as a tensor
            raise LoweringError(f"internal: scratch buffer {name} is read as a tensor")
        lay = self.lazy.get(name)
        return name if lay is None else self.view(name, lay)

    def view(self, name: str, lay: Layout, shared: bool = True) -> str:
        """``name`` viewed with ``lay`` (its offset relative to ``name``'s own); ``shared``:
        a view of a constant may be one object made on the first call (never returned to
        the caller, who may change its metadata)."""
        if name in self.scratch:
            raise LoweringError(f"internal: scratch buffer {name} is viewed as a tensor")
        if shared and name in self.graph.constants and all(
            isinstance(v, int) for v in (*lay.size, *lay.stride, lay.offset)
        ):
            self.const_views += 1
            return (
                f"_const_view(_vc, {self.const_views}, {name}, {pysizes(lay.size)}, "
                f"{pysizes(lay.stride)}, {pyexpr(lay.offset)})"
            )
        if name in self.fresh:
            # bound to a local on first use, so ops reading the same view of a buffer (the
            # q, k and v projections of one input) share it: as_strided costs ~1-2 us
            off = pyexpr(lay.offset)
            tail = "" if off == "0" else f", {off}"
            expr = f"_as_strided({name}, {pysizes(lay.size)}, {pysizes(lay.stride)}{tail})"
            var = self.views.get(expr)
            if var is None:
                var = self.views[expr] = f"view{self.n_views}"
                self.n_views += 1
                self.view_of[var] = (name, expr)
                self.lines.append(f"    {var} = {expr}")
            return var
        return _view_call(name, lay)

    def const(self, value: Any) -> str:
        self.consts.append(value)
        return f"_c[{len(self.consts) - 1}]"

    def arg(self, a: Any) -> str:
        if isinstance(a, ReinterpretView):
            if a.layout == a.base.layout:
                return self.ref(a.base.name)
            return self.view(a.base.name, a.layout)
        if isinstance(a, Buffer):
            return self.ref(a.name)
        if isinstance(a, IRNode):
            raise TypeError(f"extern argument {a} was not realized")
        if isinstance(a, sympy.Basic):  # a symbolic size, computed from the bound symbols
            return pyexpr(a)
        if isinstance(a, (list, tuple)) and any(isinstance(x, (IRNode, sympy.Basic)) for x in a):
            inner = ", ".join(self.arg(x) for x in a)
            return f"[{inner}]"
        if isinstance(a, (bool, int, float, str)) or a is None:
            return repr(a)
        if _symbolic_value(a):
            # a symbolic value kept as a constant would be the size of the call the graph
            # was compiled at, at every size: the lowering passes its expression instead
            raise LoweringError(f"extern argument {a} is a symbolic value, not its expression")
        return self.const(a)

    def bind_sizes(self, check_inputs: bool) -> None:
        """``s0 = arg0.size(0)`` for each size symbol, then the input checks of a symbolic graph."""
        g = self.graph
        bound: set[sympy.Symbol] = set()
        for i, expr in sorted(g.size_inputs.items()):
            if isinstance(expr, sympy.Symbol) and expr not in bound:
                self.lines.append(f"    {expr.name} = arg{i}")
                bound.add(expr)
        for buf in g.inputs:
            for d, size in enumerate(buf.layout.size):
                if isinstance(size, sympy.Symbol) and size not in bound:
                    self.lines.append(f"    {size.name} = {buf.name}.size({d})")
                    bound.add(size)
        for buf in g.inputs:  # a stride with a symbol of its own (a slice of a larger tensor)
            for d, stride in enumerate(buf.layout.stride):
                if isinstance(stride, sympy.Symbol) and stride not in bound:
                    self.lines.append(f"    {stride.name} = {buf.name}.stride({d})")
                    bound.add(stride)
        missing = sorted(set(g.hints.hints) - bound, key=str)
        if missing:
            raise LoweringError(
                f"size symbol {missing[0]} is not a dimension of any graph input, so the "
                "compiled code cannot compute it"
            )
        if check_inputs:
            for buf in g.inputs:
                lay = buf.layout
                self.lines.append(
                    f"    {buf.name} = _input({buf.name[3:]}, {buf.name}, {pysizes(lay.size)}, "
                    f"{pysizes(lay.stride)}, {self.const(lay.dtype)})"
                )

    def write(self) -> WrapperCode:
        g = self.graph
        names = [b.name for b in g.inputs]
        if g.size_inputs:  # SymInt inputs take their positions among the tensors
            names = [f"arg{i}" for i in range(len(g.inputs) + len(g.size_inputs))]
        ln = self.lines
        ln.append("def call(args):")
        if names:
            ln.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = args")
            # the list is the call's own (``CompiledGraph``): emptied, each input is held by
            # its name only, dropped after its last use (``memory_plan``), so an input the
            # caller handed over is freed there (``ember.ir.boxed``, ADR 0063)
            ln.append("    args.clear()")
        if g.hints:
            self.bind_sizes(check_inputs=True)
        for name in g.constants:
            ln.append(f"    {name} = _constants[{name!r}]")
        cpp = self.backend.name == "cpp"
        if cpp:
            self.scratch, size = scratch_buffers(g, self.steps, self.memory)
            if self.scratch:
                ln.append(f"    _scratch = empty_strided(({size},), (1,), dtype=torch.uint8)  "
                          f"# {len(self.scratch)} small buffers only kernels touch")
                ln.append("    _sp = _scratch.data_ptr()")
        first_write: int | None = None  # the line from which a kernel may write an input
        for step, mem in zip(self.steps, self.memory):
            after_step: list[str] = []
            for a in mem.allocate:
                lay = a.layout
                if a.name in self.scratch:
                    continue
                if a.into_input is not None:
                    if first_write is None:
                        first_write = len(ln)
                    ln.append(f"    {a.name} = {a.into_input}  # computed in place")
                    self.same_memory[a.name] = a.into_input
                elif a.reuses is not None and a.reuses in self.fresh and cpp:
                    how = "in place of" if a.in_place else "reuses"
                    ln.append(f"    {a.name} = {a.reuses}  # {how} {a.reuses} (viewed where read)")
                    self.fresh.add(a.name)
                    self.lazy[a.name] = Layout(lay.size, lay.stride, lay.dtype, 0)
                    self.same_memory[a.name] = a.reuses
                    # a C++ kernel computing in place takes the output's pointer only
                    self.hand_over(a.reuses, a.name)
                elif a.reuses is not None:
                    new_lay = Layout(lay.size, lay.stride, lay.dtype, 0)
                    old_lay = self.buffer_layouts.get(a.reuses)
                    if a.reuses not in self.lazy and old_lay is not None and (
                            old_lay.size, old_lay.stride, old_lay.offset, old_lay.dtype) == (
                            new_lay.size, new_lay.stride, 0, new_lay.dtype):
                        view = a.reuses  # the tensor itself: as_strided to its own layout costs ~2 us
                    else:
                        view = self.view(a.reuses, new_lay)
                    how = "in place of" if a.in_place else "reuses"
                    ln.append(f"    {a.name} = {view}  # {how} {a.reuses}")
                    if a.reuses in self.fresh:
                        self.fresh.add(a.name)
                    if a.in_place and not cpp:
                        after_step.append(a.reuses)  # the kernel takes both (same memory)
                    else:
                        self.hand_over(a.reuses, a.name)
                else:
                    ln.append(f"    {a.name} = {self.backend.allocate(lay)}")
                    self.fresh.add(a.name)
            if isinstance(step, KernelPlan) and cpp:
                ln.append(f"    {self._cpp_call(step.name, self.kernels[step.name])}")
            elif isinstance(step, KernelPlan):
                ln.append(f"    {self.backend.call(step.name, self.kernels[step.name])}")
            else:
                self._extern(step)
                self.pointers.clear()  # an extern op's results are new tensors
            for name in [*mem.free, *after_step]:
                self.free(name)
        ln.append(f"    return [{', '.join(self._output(o) for o in g.outputs)}]")
        if first_write is not None:
            # an exception raised after a kernel wrote an input says so (ember.ir.updates):
            # running the graph again eagerly would apply that write twice
            ln[first_write:] = [
                "    try:",
                *("    " + line.replace("\n", "\n    ") for line in ln[first_write:]),
                "    except Exception as _e:",
                "        _inputs_written(_e)",
                "        raise",
            ]
        return WrapperCode("\n".join(ln) + "\n", self.consts)

    def _pointer(self, name: str) -> str:
        """The expression of buffer ``name``'s address for a C++ kernel."""
        off = self.scratch.get(name)
        if off is not None:
            return "_sp" if off == 0 else f"_sp + {off}"
        root = name
        while root in self.same_memory:
            root = self.same_memory[root]
        local = self.pointers.get(root)
        if local is None:
            local = self.pointers[root] = f"_p{len(self.pointers)}_{root}"
            self.lines.append(f"    {local} = {root}.data_ptr()")
        return local

    def _cpp_call(self, name: str, kernel: KernelSource) -> str:
        """A C++ kernel's call: each tensor's ``data_ptr()`` read once per wrapper call."""
        args = [self._pointer(a) for a in kernel.args] + list(kernel.sizes)
        return f"{name}({', '.join(args)})"

    def _extern(self, step: ExternCall) -> None:
        k: ExternKernel = step.kernel
        args = [self.arg(a) for a in k.args]
        args += [f"{key}={self.arg(v)}" for key, v in k.kwargs.items()]
        op = self.backend.extern_name(op_name(k.op)) or self.const(k.op)
        self.lines.append(f"    {k.name} = {op}({', '.join(args)})  # {op_name(k.op)}: {k.reason}")
        if not k.tuple_result:
            # the common case (the op returned the layout planned for it) costs no call
            lay = k.layout
            stride = pysizes(lay.stride)
            self.lines.append(
                f"    if {k.name} is None or {k.name}.stride() != {stride}: "
                f"{k.name} = _restride({k.name}, {pysizes(lay.size)}, {stride})"
            )
        for m in step.outputs:
            lay = m.layout
            self.lines.append(
                f"    {m.name} = _restride({k.name}[{m.path}], {pysizes(lay.size)}, "
                f"{pysizes(lay.stride)})"
            )

    def _output(self, o: OutputSpec) -> str:
        if o.kind == "const":
            return self.const(o.value)
        if o.kind == "size":
            return pyexpr(o.value)
        if o.kind == "view":
            assert o.layout is not None
            return self.view(o.name, o.layout, shared=False)
        return self.ref(o.name)


#: the largest buffer (bytes) ``scratch_buffers`` places in the scratch block
SCRATCH_BYTES = 256
#: each scratch buffer starts on its own cache line
_SCRATCH_ALIGN = 64


def scratch_buffers(
    graph: LoweredGraph, steps: list[Step], memory: list[StepMemory]
) -> tuple[dict[str, int], int]:
    """Buffers of a C++ wrapper placed in one block allocated per call, and its size.

    A buffer qualifies when only C++ kernels read and write it (no extern op, graph
    output or view sees it as a tensor), it has memory of its own (not computed into an
    input, not reusing or reused by another buffer) and at most ``SCRATCH_BYTES`` of
    static size: the 0-d values an optimizer step computes once per parameter (bias
    corrections) were one ``empty_strided`` each (~1 us), hundreds per step.
    """
    as_tensors = {o.name for o in graph.outputs if o.kind not in ("const", "size")}
    for step in steps:
        if isinstance(step, ExternCall):
            as_tensors.update(step.kernel.buffer_args())
            as_tensors.add(step.kernel.name)
            as_tensors.update(m.name for m in step.outputs)
    reused = {a.reuses for mem in memory for a in mem.allocate if a.reuses is not None}
    offsets: dict[str, int] = {}
    size = 0
    for mem in memory:
        for a in mem.allocate:
            lay = a.layout
            if (a.into_input is not None or a.reuses is not None or a.name in reused
                    or a.name in as_tensors or a.name in graph.constants
                    or not all(isinstance(v, int) for v in (*lay.size, *lay.stride))):
                continue
            nbytes = lay.storage_numel() * lay.dtype.itemsize
            if nbytes > SCRATCH_BYTES or nbytes == 0:
                continue
            offsets[a.name] = size
            size += -(-nbytes // _SCRATCH_ALIGN) * _SCRATCH_ALIGN
    return offsets, size


def _symbolic_value(a: Any) -> bool:
    """Whether ``a`` is (or a list or tuple holds) a ``SymInt``/``SymFloat``/``SymBool``."""
    if isinstance(a, (list, tuple)):
        return any(_symbolic_value(x) for x in a)
    return isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _view_call(name: str, lay: Layout) -> str:
    return f"_view({name}, {pysizes(lay.size)}, {pysizes(lay.stride)}, {pyexpr(lay.offset)})"
