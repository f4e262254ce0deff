"""A generated program: input specs, a body of statements, the returned values.

A program is plain Python source over ``torch`` and ``F``
(``torch.nn.functional``): ``def fn(x0, x1, ...)`` whose body is a list of
statements, each a few source lines with the names it defines and uses (what
the shrinker needs to drop a statement and everything that depends on it).
The same source is what the fuzzer compiles, what a reproducer contains and
what ``replay`` runs: JSON holds the pieces, :meth:`Program.source` joins them.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

from .inputs import InputSpec, make_inputs_source


@dataclass(frozen=True, slots=True)
class Stmt:
    """Source lines (unindented) that define ``defines`` and read ``uses``."""

    lines: tuple[str, ...]
    defines: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    kind: str = "assign"

    def to_json(self) -> dict[str, Any]:
        return {"lines": list(self.lines), "defines": list(self.defines),
                "uses": list(self.uses), "kind": self.kind}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Stmt:
        return Stmt(tuple(d["lines"]), tuple(d["defines"]), tuple(d["uses"]), d["kind"])


@dataclass(frozen=True)
class Program:
    """``fn(*inputs)`` returning ``outputs`` (a tuple, or one value when ``single``).

    ``backward``: the harness sums the differentiable outputs (weighted) and
    calls ``.backward()`` after the call, as a training step would.
    """

    seed: int
    inputs: tuple[InputSpec, ...]
    body: tuple[Stmt, ...]
    outputs: tuple[str, ...]
    single: bool = False
    backward: bool = True
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    # -- source -------------------------------------------------------------------------
    def fn_source(self) -> str:
        params = ", ".join(s.name for s in self.inputs)
        lines = [f"def fn({params}):"]
        for stmt in self.body:
            lines += ["    " + ln for ln in stmt.lines]
        if self.single:
            lines.append(f"    return {self.outputs[0]}")
        else:
            outs = ", ".join(self.outputs)
            lines.append(f"    return ({outs}{',' if len(self.outputs) == 1 else ''})")
        return "\n".join(lines) + "\n"

    def inputs_source(self) -> str:
        return make_inputs_source(list(self.inputs))

    def source(self) -> str:
        return self.inputs_source() + "\n\n" + self.fn_source()

    def make_fn(self) -> Callable[..., Any]:
        """A fresh function object (own code object, so no compile cache is shared)."""
        src = self.fn_source()
        filename = f"<fuzz program {self.seed} {abs(hash(src)) % 10**8}>"
        # dynamo reads source lines for graph-break messages: make them readable
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        ns: dict[str, Any] = {"torch": torch, "F": F, "_trace": []}
        exec(compile(src, filename, "exec"), ns)
        fn: Callable[..., Any] = ns["fn"]
        return fn

    # -- editing (the shrinker) -------------------------------------------------------------
    def without(self, drop: set[int]) -> Program:
        return replace(self, body=tuple(s for i, s in enumerate(self.body) if i not in drop))

    def dependents(self, index: int) -> set[int]:
        """``index`` and every later statement reading what it (transitively) defines."""
        names = set(self.body[index].defines)
        if self.body[index].kind in ("inplace", "block"):
            names |= set(self.body[index].uses)
        out = {index}
        for j in range(index + 1, len(self.body)):
            stmt = self.body[j]
            if names & set(stmt.uses):
                out.add(j)
                names |= set(stmt.defines)
        return out

    # -- JSON -----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "inputs": [s.to_json() for s in self.inputs],
                "body": [s.to_json() for s in self.body], "outputs": list(self.outputs),
                "single": self.single, "backward": self.backward}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Program:
        return Program(d["seed"], tuple(InputSpec.from_json(s) for s in d["inputs"]),
                       tuple(Stmt.from_json(s) for s in d["body"]), tuple(d["outputs"]),
                       d.get("single", False), d.get("backward", True))
