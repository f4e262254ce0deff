"""The generated Python wrapper: allocate buffers, call kernels and extern ops, return outputs.

The wrapper is Python source (printed by ``EMBER_LOGS=output_code`` and written
to the debug directory) executed once into a namespace holding the loaded
kernels, constants and a few helpers. Buffers are freed right after their last
use, and a dead buffer with the same byte size is reused for a new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from ..graph import LoweredGraph, OutputSpec, op_name
from ..ir import Buffer, ExternKernel, IRNode, Layout, ReinterpretView
from ..scheduler import ExternCall, KernelPlan, Step


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
        self, graph: LoweredGraph, steps: list[Step], kernel_args: dict[str, list[str]]
    ) -> None:
        self.graph = graph
        self.steps = steps
        self.kernel_args = kernel_args
        self.consts: list[Any] = []
        self.lines: list[str] = []
        self.layouts: dict[str, Layout] = {b.name: b.layout for b in graph.buffers}
        self.layouts.update({b.name: b.layout for b in graph.inputs})
        self.multi_names = {m.name for s in steps if isinstance(s, ExternCall) for m in s.outputs}

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
        last_use = self._last_uses()
        outputs = {o.name for o in g.outputs if o.kind != "const"}
        keep = outputs | set(names) | set(g.constants)
        pool: dict[tuple[int, torch.dtype], list[str]] = {}
        allocated: set[str] = set()
        pinned = self._aliased_by_externs()
        ln = self.lines
        ln.append("def call(args):")
        if names:
            ln.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = args")
        for name in g.constants:
            ln.append(f"    {name} = _constants[{name!r}]")
        for i, step in enumerate(self.steps):
            if isinstance(step, KernelPlan):
                for name in step.stores:
                    lay = self.layouts[name]
                    key = (lay.storage_numel() * _itemsize(lay.dtype), lay.dtype)
                    free = pool.get(key)
                    if free and name not in outputs:
                        old = free.pop()
                        ln.append(
                            f"    {name} = _view({old}, {lay.size}, {lay.stride}, 0)  # reuses {old}"
                        )
                    else:
                        ln.append(
                            f"    {name} = empty_strided({lay.size}, {lay.stride}, dtype={lay.dtype})"
                        )
                    allocated.add(name)
                ptrs = ", ".join(f"{a}.data_ptr()" for a in self.kernel_args[step.name])
                ln.append(f"    {step.name}({ptrs})")
            else:
                self._extern(step)
            for name in sorted(n for n, s in last_use.items() if s == i and n not in keep):
                dead = self.layouts.get(name)
                if dead is not None and name in allocated and name not in pinned:
                    pool.setdefault(
                        (dead.storage_numel() * _itemsize(dead.dtype), dead.dtype), []
                    ).append(name)
                elif name in self.layouts or name in self.multi_names:
                    ln.append(f"    del {name}")
        ln.append(f"    return [{', '.join(self._output(o) for o in g.outputs)}]")
        return WrapperCode("\n".join(ln) + "\n", self.consts)

    def _extern(self, step: ExternCall) -> None:
        k: ExternKernel = step.kernel
        args = [self.arg(a) for a in k.args]
        args += [f"{key}={self.arg(v)}" for key, v in k.kwargs.items()]
        op = self.const(k.op)
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

    def _aliased_by_externs(self) -> set[str]:
        """Buffers an extern op may return a view of: their memory must never be reused."""
        pinned: set[str] = set()
        for step in self.steps:
            if not isinstance(step, ExternCall):
                continue
            schema = getattr(step.kernel.op, "_schema", None)
            if schema is not None and not any(r.alias_info is not None for r in schema.returns):
                continue
            for a in tree_flatten((step.kernel.args, step.kernel.kwargs))[0]:
                if isinstance(a, ReinterpretView):
                    pinned.add(a.base.name)
                elif isinstance(a, Buffer):
                    pinned.add(a.name)
        return pinned

    def _last_uses(self) -> dict[str, int]:
        last: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            if isinstance(step, KernelPlan):
                for name in self.kernel_args[step.name]:
                    last[name] = i
            else:
                for a in tree_flatten((step.kernel.args, step.kernel.kwargs))[0]:
                    if isinstance(a, ReinterpretView):
                        last[a.base.name] = i
                    elif isinstance(a, Buffer):
                        last[a.name] = i
                last[step.kernel.name] = i
                for m in step.outputs:
                    last.setdefault(m.name, i)
        return last


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def namespace(
    kernels: dict[str, Any], constants: dict[str, torch.Tensor], consts: list[Any]
) -> dict[str, Any]:
    ns: dict[str, Any] = {
        "torch": torch,
        "empty_strided": torch.empty_strided,
        "_restride": _restride,
        "_view": _view,
        "_c": consts,
        "_constants": constants,
    }
    ns.update(kernels)
    return ns
