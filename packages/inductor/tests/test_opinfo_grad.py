"""OpInfo gradient sweep: for every op inductor lowers, gradients through ember.aotgrad +
ember.inductor match eager's on OpInfo's samples (float32).

Each op's samples (``requires_grad=True``) become one function; ember.aotgrad traces
its forward and backward with inductor's decompositions and ember.inductor compiles
both graphs. An op whose forward graph needs an extern fallback is not lowered and is
skipped; for the rest, a fixed weighted sum of the outputs is backpropagated and
every input's gradient must match eager's (``torch.testing`` float32 tolerances,
widened 10x for the reassociation a fused backward does). ``opinfo_grad_known_failures.txt``
lists pairs known not to match, with the reason. The full sweep is ``slow``; a
representative subset runs by default.

Coverage summary: ``python packages/inductor/tests/test_opinfo_grad.py [--samples N] [op ...]``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten

from ember.aotgrad import AotOptions, aot_function
from ember.inductor import CompiledGraph, InductorOptions, compile_graph
from ember.inductor.decompositions import decomposition_table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from opinfo_graphs import graph_fn

CACHE = os.environ.get(
    "EMBER_TEST_CACHE", str(Path(tempfile.gettempdir()) / f"ember-inductor-tests-{os.getuid()}")
)
FAST = {
    "add", "mul", "div", "sub", "exp", "sin", "tanh", "sigmoid", "where", "clamp", "sum",
    "mean", "amax", "var", "cat", "permute", "gather", "index_select", "nn.functional.gelu",
    "nn.functional.relu", "softmax", "log_softmax", "nn.functional.layer_norm", "maximum",
    "pow", "abs", "expand", "nn.functional.embedding", "cumsum",
}


def _known_failures() -> dict[str, str]:
    out: dict[str, str] = {}
    path = Path(__file__).with_name("opinfo_grad_known_failures.txt")
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, reason = line.split(":", 1)
            out[name.strip()] = reason.strip()
    return out


def _variant_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def _loss(outs: Any) -> torch.Tensor | None:
    """A fixed weighted sum of the differentiable outputs (every element gets its own weight)."""
    total: torch.Tensor | None = None
    for k, t in enumerate(tree_flatten(outs)[0]):
        if not (isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()):
            continue
        w = torch.cos(torch.arange(t.numel(), dtype=torch.float64) * 0.7 + k).to(t.dtype)
        term = (t * w.view(t.shape)).sum()
        total = term if total is None else total + term
    return total


def _grads(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> list[torch.Tensor | None] | None:
    loss = _loss(fn(*inputs))
    if loss is None:
        return None
    wrt = [t for t in inputs if t.requires_grad]
    got = torch.autograd.grad(loss, wrt, allow_unused=True)
    out: list[torch.Tensor | None] = []
    it = iter(got)
    for t in inputs:
        out.append(next(it) if t.requires_grad else None)
    return out


def _copies(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]


def grad_sweep(op: Any, max_samples: int) -> tuple[str, str]:
    """('lowered'|'fallback'|'skip', detail); raises AssertionError on a mismatch."""
    dtype = torch.float32
    if not op.supports_autograd or dtype not in op.supported_dtypes("cpu"):
        return "skip", "no float32 autograd"
    try:
        samples = [s for _, s in zip(range(max_samples),
                                     op.sample_inputs("cpu", dtype, requires_grad=True))]
    except Exception as e:
        return "skip", f"no samples: {type(e).__name__}"
    if not samples:
        return "skip", "no samples"
    fn, tensors = graph_fn(op, samples)
    if not any(t.requires_grad for t in tensors):
        return "skip", "no input requires grad"
    try:
        expected = _grads(fn, _copies(tensors))
    except Exception as e:
        return "skip", f"eager backward fails: {type(e).__name__}"
    if expected is None:
        return "skip", "no differentiable output"
    compiled: dict[str, CompiledGraph] = {}
    opts = InductorOptions(cache_dir=CACHE, fallback_on_error=False)

    def compiler(name: str) -> Callable[..., Any]:
        def compile_fn(gm: torch.fx.GraphModule, inputs: list[Any]) -> Any:
            c = compile_graph(gm, inputs, opts)
            if isinstance(c, CompiledGraph):
                compiled[name] = c
            return c
        return compile_fn

    aot = aot_function(fn, compiler("forward"), compiler("backward"),
                       decompositions=decomposition_table(), options=AotOptions(strict=True))
    got = _grads(aot, _copies(tensors))
    forward = compiled.get("forward")
    if forward is None:
        return "skip", "the forward graph ran eagerly"
    if forward.report.fallbacks:
        return "fallback", ",".join(sorted(forward.report.fallbacks))
    assert got is not None, "the compiled function has no differentiable output"
    for i, (e, g) in enumerate(zip(expected, got)):
        if e is None:
            assert g is None or not g.any(), f"input {i}: a gradient where eager has none"
            continue
        assert g is not None, f"input {i}: no gradient where eager has one"
        torch.testing.assert_close(g, e, rtol=1.3e-5, atol=1e-4, equal_nan=True,
                                   msg=lambda m, i=i: f"gradient of input {i}: {m}")
    backward = compiled.get("backward")
    kernels = backward.report.kernels if backward is not None else 0
    return "lowered", f"{len(samples)} samples, backward {kernels} kernels"


OPS = [op for op in op_db if op.supports_autograd]


def _run(op: Any, samples: int) -> None:
    key = _variant_name(op)
    known = _known_failures().get(key)
    try:
        status, detail = grad_sweep(op, samples)
    except Exception as e:
        if known:
            pytest.xfail(known)
        raise AssertionError(f"{key}: {type(e).__name__}: {str(e)[:800]}") from e
    if known:
        pytest.fail(f"{key} is listed as a known failure ({known}) but passed: remove it")
    if status != "lowered":
        pytest.skip(f"{status}: {detail}")


@pytest.mark.parametrize("op", [op for op in OPS if op.name in FAST], ids=_variant_name)
def test_opinfo_grad_fast(op: Any) -> None:
    _run(op, samples=2)


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS, ids=_variant_name)
def test_opinfo_grad_full(op: Any) -> None:
    _run(op, samples=6)


def main(argv: list[str]) -> None:
    samples = int(argv[argv.index("--samples") + 1]) if "--samples" in argv else 6
    only = {a for a in argv if not a.startswith("-") and not a.isdigit()}
    counts: dict[str, int] = {}
    for op in OPS:
        if only and op.name not in only:
            continue
        try:
            status, detail = grad_sweep(op, samples)
        except Exception as e:
            status, detail = "FAIL", f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
        counts[status] = counts.get(status, 0) + 1
        print(f"{status:8} {_variant_name(op):45} {detail}", flush=True)
    print(f"\n{counts}")


if __name__ == "__main__":
    main(sys.argv[1:])
