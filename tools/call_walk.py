"""The files a call goes through from ``ember.dynamo.compile(fn)`` to a C++ kernel, measured.

    python tools/call_walk.py

Compiles a small function with the ``inductor`` backend under ``torch.no_grad()`` (the
inference path), after a warm-up compile so that imports are not counted, and records
the Python call stack at the first call into each stage's module (``STAGES``). It prints
each stack, then every ember source file on them in the order first met: the walk
docs/architecture.md lists ("a newcomer's walk"). Module and class bodies are not calls
and are left out.
"""

from __future__ import annotations

import inspect
import os
import sys
import tempfile
from types import FrameType
from typing import Any

import torch

#: (file suffix under src/ember/, stage): the stack is taken at the first call into each
STAGES: list[tuple[str, str]] = [
    ("dynamo/builder.py", "capture: wrapping an input"),
    ("dynamo/variables/tensor.py", "capture: a tensor method"),
    ("aotgrad/trace.py", "aotgrad: recording ATen ops"),
    ("aotgrad/functionalize.py", "aotgrad: functionalization"),
    ("inductor/graph.py", "inductor: GraphLowering"),
    ("inductor/lowering/pointwise.py", "inductor: a pointwise lowering"),
    ("inductor/lowering/reduction.py", "inductor: a reduction lowering"),
    ("inductor/ir.py", "inductor: loop IR"),
    ("inductor/scheduler.py", "inductor: scheduling"),
    ("inductor/fusion.py", "inductor: fusion"),
    ("inductor/codegen/cpp.py", "inductor: the C++ backend"),
    ("inductor/codegen/cpp_kernel.py", "inductor: a kernel's loops"),
    ("inductor/codegen/cpp_ops.py", "inductor: a kernel's expressions"),
    ("inductor/cpp_build.py", "inductor: building the kernel"),
    ("inductor/codegen/wrapper.py", "inductor: the wrapper"),
]


def _ember_file(path: str) -> str | None:
    return path.split("/src/ember/", 1)[1] if "/src/ember/" in path else None


def _stack(frame: FrameType | None) -> list[tuple[str, str]]:
    """(file, function) from the outermost ember call in, consecutive frames of one file merged."""
    out: list[tuple[str, str]] = []
    while frame is not None:
        rel = _ember_file(frame.f_code.co_filename)
        if rel and frame.f_code.co_flags & inspect.CO_OPTIMIZED and (not out or out[-1][0] != rel):
            out.append((rel, frame.f_code.co_name))
        frame = frame.f_back
    return out[::-1]


def walk() -> tuple[dict[str, list[tuple[str, str]]], list[str]]:
    import ember.dynamo

    stacks: dict[str, list[tuple[str, str]]] = {}

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not frame.f_code.co_flags & inspect.CO_OPTIMIZED:
            return  # module and class bodies are imports, not calls
        rel = _ember_file(frame.f_code.co_filename)
        for suffix, stage in STAGES:
            if rel == suffix and stage not in stacks:
                stacks[stage] = _stack(frame)

    def warm(x: torch.Tensor) -> torch.Tensor:
        return (x.cos() * 2).sum(0)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x.sin() + 1).relu().sum(1)

    with torch.no_grad():
        ember.dynamo.compile(warm, backend="inductor")(torch.randn(3, 5))
        compiled = ember.dynamo.compile(fn, backend="inductor")
        sys.setprofile(profile)
        try:
            compiled(torch.randn(8, 16))
        finally:
            sys.setprofile(None)
    files: list[str] = []
    for _, stage in STAGES:
        for f, _ in stacks.get(stage, []):
            if f not in files:
                files.append(f)
    return stacks, files


def main() -> None:
    os.environ.setdefault("EMBER_CACHE_DIR", tempfile.mkdtemp(prefix="ember-walk-"))
    stacks, files = walk()
    for _, stage in STAGES:
        print(f"== {stage}")
        for f, name in stacks.get(stage, []):
            print(f"   {f}  {name}")
    print(f"{len(files)} files on these stacks, in the order first met:")
    for f in files:
        print(f"  {f}")


if __name__ == "__main__":
    main()
