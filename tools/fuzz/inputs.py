"""Input specs: shape, dtype, memory layout and autograd role of one program input.

An input is built from a fresh base tensor by a short chain of layout steps
(``offset`` = a slice with a storage offset, ``gapped`` = every other element
of the last dim, ``transposed``, ``expanded`` = stride-0 dims, ``channels_last``),
so it reaches the compiled function exactly as user code would hand it over.
The same spec renders the Python source that builds it, which is what a
reproducer contains; :func:`build_inputs` runs that source, so the fuzzer and
the reproducer cannot disagree about the inputs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch

DTYPES = ("float32", "float64", "int64", "bool")
LAYOUTS = ("contiguous", "offset", "gapped", "transposed", "expanded", "channels_last")


@dataclass(frozen=True, slots=True)
class InputSpec:
    """One input: ``layout`` steps applied in order to a base of the right shape.

    ``grad`` is ``"none"``, ``"leaf"`` (the input itself is a leaf that requires
    grad) or ``"nonleaf"`` (a view of ``base * 1`` where ``base`` is the leaf).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    layout: tuple[str, ...] = ()
    grad: str = "none"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "layout": list(self.layout), "grad": self.grad}

    @staticmethod
    def from_json(d: dict[str, Any]) -> InputSpec:
        return InputSpec(d["name"], tuple(d["shape"]), d["dtype"], tuple(d["layout"]), d["grad"])


def _step_input_shape(step: str, shape: tuple[int, ...]) -> tuple[tuple[int, ...], str]:
    """The shape a layout ``step`` needs as input to produce ``shape``, and its source suffix."""
    if step == "offset":
        if not shape:
            return (3,), "[1]"
        return (shape[0] + 2, *shape[1:]), "[2:]"
    if step == "gapped":
        return (*shape[:-1], shape[-1] * 2), "[..., ::2]"
    if step == "transposed":
        return (*shape[:-2], shape[-1], shape[-2]), ".transpose(-1, -2)"
    if step == "expanded":
        base = tuple(1 if (i % 2 == 0 and s > 1) else s for i, s in enumerate(shape))
        if base == shape and shape:
            base = (1, *shape[1:])
        return base, f".expand({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''})"
    if step == "channels_last":
        return shape, ".contiguous(memory_format=torch.channels_last)"
    raise ValueError(f"unknown layout step {step!r}")


def resized(specs: list[InputSpec], grow: int) -> list[InputSpec]:
    """The same inputs with every size above 1 grown by ``grow``, consistently across
    inputs (two dims of one size keep one size, so broadcasting still lines up); sizes 0
    and 1 stay (they are special to broadcasting and reductions)."""
    return [InputSpec(s.name, tuple(d + grow if d > 1 else d for d in s.shape), s.dtype,
                      s.layout, s.grad) for s in specs]


def valid_layout(shape: tuple[int, ...], layout: tuple[str, ...]) -> bool:
    ndim = len(shape)
    for step in layout:
        if step in ("gapped",) and ndim < 1:
            return False
        if step == "transposed" and ndim < 2:
            return False
        if step == "channels_last" and ndim != 4:
            return False
        if step == "expanded" and ndim < 1:
            return False
    return True


def _shape_src(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _base_src(dtype: str, shape: tuple[int, ...]) -> str:
    s = _shape_src(shape)
    if dtype in ("float32", "float64"):
        return f"torch.randn({s}, generator=g, dtype=torch.{dtype})"
    if dtype == "int64":
        return f"torch.randint(-4, 8, {s}, generator=g)"
    return f"torch.rand({s}, generator=g) > 0.5"


def input_source(spec: InputSpec) -> list[str]:
    """Lines (inside ``make_inputs``) that bind ``spec.name`` and maybe append leaves."""
    shape = spec.shape
    suffixes: list[str] = []
    for step in reversed(spec.layout):
        shape, suffix = _step_input_shape(step, shape)
        suffixes.append(suffix)
    chain = "".join(reversed(suffixes))
    base = _base_src(spec.dtype, shape)
    up = " if not upcast else b.double()" if spec.dtype == "float32" else ""
    lines = [f"b = {base}", f"b = b{up}" if up else ""]
    lines = [ln for ln in lines if ln]
    if spec.grad == "leaf":
        lines.append(f"{spec.name} = b{chain}.requires_grad_()")
        lines.append(f"leaves.append({spec.name})")
    elif spec.grad == "nonleaf":
        lines.append("b.requires_grad_()")
        lines.append("leaves.append(b)")
        lines.append(f"{spec.name} = (b * 1){chain}")
    else:
        lines.append(f"{spec.name} = b{chain}")
    return lines


def make_inputs_source(specs: list[InputSpec]) -> str:
    """``def make_inputs(seed, upcast=False) -> (inputs, leaves)`` as source."""
    out = ["def make_inputs(seed, upcast=False):",
           "    g = torch.Generator().manual_seed(seed)",
           "    leaves = []"]
    for spec in specs:
        out += ["    " + ln for ln in input_source(spec)]
    names = ", ".join(s.name for s in specs)
    out.append(f"    return [{names}{',' if len(specs) == 1 else ''}], leaves")
    return "\n".join(out) + "\n"


def build_inputs(specs: list[InputSpec], seed: int,
                 upcast: bool = False) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(inputs, leaves whose .grad gradients are compared) for these specs."""
    ns: dict[str, Any] = {"torch": torch}
    exec(compile(make_inputs_source(specs), "<fuzz inputs>", "exec"), ns)
    inputs, leaves = ns["make_inputs"](seed, upcast)
    return inputs, leaves


def random_spec(rng: random.Random, name: str, *, dtype: str | None = None,
                ndim: int | None = None) -> InputSpec:
    """A random input: mostly float32, small dims, one or two layout steps."""
    if dtype is None:
        dtype = rng.choices(DTYPES, weights=(70, 8, 14, 8))[0]
    if ndim is None:
        ndim = rng.choices((0, 1, 2, 3, 4), weights=(4, 20, 40, 24, 12))[0]
    shape = tuple(rng.randint(1, 5) for _ in range(ndim))
    if ndim and rng.random() < 0.04:  # zero-size
        shape = tuple(0 if i == rng.randrange(ndim) else s for i, s in enumerate(shape))
    layout: tuple[str, ...] = ()
    r = rng.random()
    if r < 0.45:
        layout = ()
    elif r < 0.85:
        layout = (rng.choice(LAYOUTS[1:]),)
    else:
        layout = (rng.choice(LAYOUTS[1:]), rng.choice(LAYOUTS[1:4]))
    if not valid_layout(shape, layout):
        layout = ("offset",) if ndim >= 1 and rng.random() < 0.5 else ()
    grad = "none"
    if dtype in ("float32", "float64"):
        grad = rng.choices(("none", "leaf", "nonleaf"), weights=(45, 40, 15))[0]
    return InputSpec(name, shape, dtype, layout, grad)
