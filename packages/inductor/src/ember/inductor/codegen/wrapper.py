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

import torch

from ..graph import LoweredGraph, OutputSpec, op_name
from ..ir import Buffer, ExternKernel, IRNode, ReinterpretView
from ..kernel_plan import ExternCall, KernelPlan, Step
from ..memory_plan import StepMemory
from .backend import Backend, KernelSource


def _restride(t: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    if t.stride() == stride or t.numel() <= 1:
        return t
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def _view(
    t: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...], offset: int
) -> torch.Tensor:
    return torch.as_strided(t, size, stride, t.storage_offset() + offset)


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

    def const(self, value: Any) -> str:
        self.consts.append(value)
        return f"_c[{len(self.consts) - 1}]"

    def arg(self, a: Any) -> str:
        if isinstance(a, ReinterpretView):
            if a.layout == a.base.layout:
                return a.base.name
            lay = a.layout
            return f"_view({a.base.name}, {lay.size}, {lay.stride}, {lay.offset})"
        if isinstance(a, Buffer):
            return a.name
        if isinstance(a, IRNode):
            raise TypeError(f"extern argument {a} was not realized")
        if isinstance(a, (list, tuple)) and any(isinstance(x, IRNode) for x in a):
            inner = ", ".join(self.arg(x) for x in a)
            return f"[{inner}]"
        if isinstance(a, (bool, int, float, str)) or a is None:
            return repr(a)
        return self.const(a)

    def write(self) -> WrapperCode:
        g = self.graph
        names = [b.name for b in g.inputs]
        ln = self.lines
        ln.append("def call(args):")
        if names:
            ln.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = args")
        for name in g.constants:
            ln.append(f"    {name} = _constants[{name!r}]")
        for step, mem in zip(self.steps, self.memory):
            for a in mem.allocate:
                lay = a.layout
                if a.reuses is not None:
                    ln.append(
                        f"    {a.name} = _view({a.reuses}, {lay.size}, {lay.stride}, 0)  # reuses {a.reuses}"
                    )
                else:
                    ln.append(f"    {a.name} = {self.backend.allocate(lay)}")
            if isinstance(step, KernelPlan):
                ln.append(f"    {self.backend.call(step.name, self.kernels[step.name])}")
            else:
                self._extern(step)
            ln.extend(f"    del {name}" for name in mem.free)
        ln.append(f"    return [{', '.join(self._output(o) for o in g.outputs)}]")
        return WrapperCode("\n".join(ln) + "\n", self.consts)

    def _extern(self, step: ExternCall) -> None:
        k: ExternKernel = step.kernel
        args = [self.arg(a) for a in k.args]
        args += [f"{key}={self.arg(v)}" for key, v in k.kwargs.items()]
        op = self.backend.extern_name(op_name(k.op)) or self.const(k.op)
        self.lines.append(f"    {k.name} = {op}({', '.join(args)})  # {op_name(k.op)}: {k.reason}")
        if not k.tuple_result:
            lay = k.layout
            self.lines.append(f"    {k.name} = _restride({k.name}, {lay.size}, {lay.stride})")
        for m in step.outputs:
            lay = m.layout
            self.lines.append(
                f"    {m.name} = _restride({k.name}[{m.path}], {lay.size}, {lay.stride})"
            )

    def _output(self, o: OutputSpec) -> str:
        if o.kind == "const":
            return self.const(o.value)
        if o.kind == "view":
            assert o.layout is not None
            return f"_view({o.name}, {o.layout.size}, {o.layout.stride}, {o.layout.offset})"
        return o.name


def namespace(
    backend: Backend,
    kernels: dict[str, Any],
    constants: dict[str, torch.Tensor],
    consts: list[Any],
) -> dict[str, Any]:
    ns: dict[str, Any] = {
        "torch": torch,
        "_restride": _restride,
        "_view": _view,
        "_c": consts,
        "_constants": constants,
    }
    ns.update(backend.namespace())
    ns.update(kernels)
    return ns
