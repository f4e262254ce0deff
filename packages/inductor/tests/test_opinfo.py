"""OpInfo sweep: every op inductor lowers (not falls back on) matches eager on OpInfo's samples.

Each (op, dtype) pair becomes one ATen graph holding all its samples, compiled
once. A pair whose graph needs an extern fallback is "not lowered" and skipped;
the rest must match eager within torch.testing's default tolerances for the
dtype. ``opinfo_known_failures.txt`` lists pairs that are known not to match,
with the reason. The full sweep is ``slow``; a fast subset runs by default.

The Triton backend (kernels run by Triton's interpreter on CPU tensors) is swept
over OpInfo's elementwise and reduction ops at float32: a representative subset
by default, all of them in the slow sweep.

Coverage summary: ``python packages/inductor/tests/test_opinfo.py [--samples N] [--backend triton]
[--device cuda] [op ...]`` (``--device cuda``: the Triton sweep on a GPU, ``tools/gpu_check.sh``).
"""

from __future__ import annotations

import os
import sys

if "cuda" not in sys.argv:  # the Triton sweep on CPU tensors; on a GPU the kernels are compiled
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo.core import (
    BinaryUfuncInfo,
    ReductionOpInfo,
    UnaryUfuncInfo,
)
from torch.utils._pytree import tree_flatten

from ember.inductor import CompiledGraph, InductorOptions, compile_graph
from ember.inductor.testing import recording

sys.path.insert(0, str(Path(__file__).resolve().parent))
from opinfo_graphs import dynamo_graph_fn, graph_fn

DTYPES = (torch.float32, torch.int64)
CACHE = os.environ.get(
    "EMBER_TEST_CACHE", str(Path(tempfile.gettempdir()) / f"ember-inductor-tests-{os.getuid()}")
)
FAST = {
    "add",
    "sub",
    "mul",
    "div",
    "abs",
    "neg",
    "exp",
    "sin",
    "tanh",
    "sigmoid",
    "where",
    "clamp",
    "sum",
    "mean",
    "amax",
    "argmax",
    "var",
    "cat",
    "stack",
    "nn.functional.pad",
    "permute",
    "transpose",
    "gather",
    "nn.functional.relu",
    "nn.functional.gelu",
    "softmax",
    "nn.functional.layer_norm",
    "maximum",
    "remainder",
}


def _known_failures(backend: str = "cpp") -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    name = "opinfo_known_failures.txt" if backend == "cpp" else f"opinfo_known_failures_{backend}.txt"
    path = Path(__file__).with_name(name)
    if not path.exists():  # (no known failures for this backend)
        return out
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, reason = line.split(":", 1)
        name, dtype = key.split()
        out[(name, dtype)] = reason.strip()
    return out


def _variant_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def sweep(
    op: Any, dtype: torch.dtype, max_samples: int, backend: str = "cpp", device: str = "cpu"
) -> tuple[str, str]:
    """('lowered'|'fallback'|'skip', detail); raises AssertionError on a mismatch.

    ``backend`` picks the code generator for CPU tensors; on ``device="cuda"`` the
    samples are CUDA tensors and ember.inductor compiles them with Triton.
    """
    if dtype not in op.supported_dtypes(device):
        return "skip", "dtype not supported by the op"
    try:
        samples = [
            s
            for _, s in zip(range(max_samples), op.sample_inputs(device, dtype, requires_grad=False))
        ]
    except Exception as e:
        return "skip", f"no samples: {type(e).__name__}"
    if not samples:
        return "skip", "no samples"
    fn, tensors = graph_fn(op, samples)
    try:
        expected = fn(*tensors)
        gm = make_fx(fn)(*tensors)
    except Exception as e:
        return "skip", f"does not trace: {type(e).__name__}"
    if not any(n.op == "call_function" for n in gm.graph.nodes):
        return "skip", "no ATen ops (pure view of an input)"
    opts = InductorOptions(cache_dir=CACHE, fallback_on_error=False, cpu_backend=backend)
    compiled = compile_graph(gm, tensors, opts)
    if not isinstance(compiled, CompiledGraph):
        return "skip", f"ran eagerly: {compiled.report.eager_reason}"
    if compiled.report.fallbacks:
        return "fallback", ",".join(sorted(compiled.report.fallbacks))
    got = compiled(*tensors)
    exp_flat, got_flat = tree_flatten(expected)[0], tree_flatten(got)[0]
    assert len(exp_flat) == len(got_flat)
    for e, g in zip(exp_flat, got_flat):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(g, e, equal_nan=True, check_stride=False)
        else:
            assert g == e
    return "lowered", f"{len(samples)} samples, {compiled.report.kernels} kernels"


PAIRS = [(op, dtype) for op in op_db for dtype in DTYPES]
#: OpInfo's elementwise (unary and binary ufuncs) and reduction ops: the Triton sweep
TRITON_OPS = [op for op in op_db if isinstance(op, (UnaryUfuncInfo, BinaryUfuncInfo, ReductionOpInfo))]
#: the Triton ops of the default run (transcendental, comparison, rounding, integer-style and
#: NaN-sensitive math; every reduction kind)
TRITON_FAST = {
    "add",
    "mul",
    "div",
    "exp",
    "log1p",
    "tanh",
    "sigmoid",
    "erf",
    "atan2",
    "pow",
    "remainder",
    "floor_divide",
    "maximum",
    "eq",
    "round",
    "sum",
    "prod",
    "mean",
    "amax",
    "argmin",
    "var",
    "all",
}


def _id(pair: tuple[Any, torch.dtype]) -> str:
    return f"{_variant_name(pair[0])}-{str(pair[1]).removeprefix('torch.')}"


def _run(op: Any, dtype: torch.dtype, samples: int, backend: str = "cpp") -> None:
    key = (_variant_name(op), str(dtype).removeprefix("torch."))
    known = _known_failures(backend).get(key)
    try:
        status, detail = sweep(op, dtype, samples, backend)
    except (AssertionError, Exception) as e:
        if known:
            pytest.xfail(known)
        raise AssertionError(f"{key}: {type(e).__name__}: {str(e)[:500]}") from e
    if known:
        pytest.fail(
            f"{key} is listed as a known failure ({known}) but passed: remove it from the list"
        )
    if status != "lowered":
        pytest.skip(f"{status}: {detail}")


@pytest.mark.parametrize("pair", [p for p in PAIRS if p[0].name in FAST], ids=_id)
def test_opinfo_fast(pair: tuple[Any, torch.dtype]) -> None:
    _run(pair[0], pair[1], samples=3)


@pytest.mark.slow
@pytest.mark.parametrize("pair", PAIRS, ids=_id)
def test_opinfo_full(pair: tuple[Any, torch.dtype]) -> None:
    _run(pair[0], pair[1], samples=8)


@pytest.mark.parametrize("op", [op for op in TRITON_OPS if op.name in TRITON_FAST], ids=_variant_name)
def test_opinfo_triton_fast(op: Any) -> None:
    _run(op, torch.float32, samples=2, backend="triton")


@pytest.mark.slow
@pytest.mark.parametrize("op", TRITON_OPS, ids=_variant_name)
def test_opinfo_triton_full(op: Any) -> None:
    _run(op, torch.float32, samples=8, backend="triton")


def _grown(x: Any) -> Any:
    """``x`` with every dim of 2 or more doubled (``repeat``): the samples at a second size.
    Sizes 0 and 1 stay (a symbolic graph specializes them), equal sizes stay equal, so
    broadcasting and the ops' arguments still fit."""
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return x
    return x.repeat(*(2 if n >= 2 else 1 for n in x.shape))


def sweep_symbolic(
    op: Any, dtype: torch.dtype, max_samples: int, backend: str = "triton", device: str = "cpu"
) -> tuple[str, str]:
    """The op's samples captured by ember.dynamo with ``dynamic=True`` and compiled with
    symbolic sizes, run at the samples' sizes and again with every dim of 2 or more doubled,
    compared with eager both times. ('lowered'|'fallback'|'skip', detail); raises
    AssertionError on a mismatch or when a graph ran eagerly."""
    import ember.dynamo as ed
    import ember.inductor.backends as backends

    if dtype not in op.supported_dtypes(device):
        return "skip", "dtype not supported by the op"
    try:
        # samples with a dim of 2 or more (sizes 0 and 1 are specialized, not symbolic)
        samples = [
            s for s in op.sample_inputs(device, dtype, requires_grad=False)
            if isinstance(s.input, torch.Tensor) and any(n >= 2 for n in s.input.shape)
        ][:max_samples]
    except Exception as e:
        return "skip", f"no samples: {type(e).__name__}"
    fn, tensors = dynamo_graph_fn(op, samples)
    if not tensors:
        return "skip", "no samples with top-level tensor arguments"
    grown = [_grown(t) for t in tensors]
    try:
        expected = [fn(*tensors), fn(*grown)]
    except Exception as e:
        return "skip", f"no eager result at doubled sizes: {type(e).__name__}"
    seen: list[Any] = []
    real = backends.compile_graph

    ed.reset()
    opts = InductorOptions(cache_dir=CACHE, fallback_on_error=False, cpu_backend=backend)
    compiled_fn = ed.compile(fn, backend=backends.make_backend(opts), dynamic=True)
    backends.compile_graph = recording(real, seen)
    try:
        got = [compiled_fn(*tensors), compiled_fn(*grown)]
    finally:
        backends.compile_graph = real
        ed.reset()
    if not seen:
        return "skip", "no graph captured"
    seen = [c for c in seen if c.report.eager_reason != "graph has no operations"]  # views
    if not seen:
        return "skip", "no ATen ops (pure view of an input)"
    for c in seen:
        assert isinstance(c, CompiledGraph), f"graph ran eagerly: {c.report.eager_reason}"
    if not any(c.report.symbolic for c in seen):
        return "skip", "no symbolic sizes (every size specialized)"
    fallbacks = sorted({f for c in seen for f in c.report.fallbacks})
    for want, have in zip(expected, got):
        exp_flat, got_flat = tree_flatten(want)[0], tree_flatten(have)[0]
        assert len(exp_flat) == len(got_flat)
        for e, g in zip(exp_flat, got_flat):
            if isinstance(e, torch.Tensor):
                torch.testing.assert_close(g, e, equal_nan=True, check_stride=False)
            else:
                assert g == e
    if fallbacks:
        return "fallback", ",".join(fallbacks)
    return "lowered", f"{len(samples)} samples, {len(seen)} graphs"


#: the ops of the default symbolic sweep (pointwise of each kind, every reduction kind)
TRITON_SYMBOLIC_FAST = {
    "add", "mul", "div", "exp", "tanh", "atan2", "remainder", "floor_divide", "maximum", "eq",
    "sum", "prod", "mean", "amax", "argmin", "var", "all",
}


def _run_symbolic(op: Any, samples: int) -> None:
    key = (_variant_name(op), "float32")
    known = _known_failures("triton_symbolic").get(key)
    try:
        status, detail = sweep_symbolic(op, torch.float32, samples)
    except (AssertionError, Exception) as e:
        if known:
            pytest.xfail(known)
        raise AssertionError(f"{key}: {type(e).__name__}: {str(e)[:500]}") from e
    if known:
        pytest.fail(f"{key} is listed as a known failure ({known}) but passed: remove it from the list")
    if status != "lowered":
        pytest.skip(f"{status}: {detail}")


@pytest.mark.parametrize(
    "op", [op for op in TRITON_OPS if op.name in TRITON_SYMBOLIC_FAST], ids=_variant_name
)
def test_opinfo_triton_symbolic_fast(op: Any) -> None:
    _run_symbolic(op, samples=2)


@pytest.mark.slow
@pytest.mark.parametrize("op", TRITON_OPS, ids=_variant_name)
def test_opinfo_triton_symbolic_full(op: Any) -> None:
    _run_symbolic(op, samples=6)


def main(argv: list[str]) -> None:
    samples = int(argv[argv.index("--samples") + 1]) if "--samples" in argv else 8
    backend = argv[argv.index("--backend") + 1] if "--backend" in argv else "cpp"
    device = argv[argv.index("--device") + 1] if "--device" in argv else "cpu"
    flags = {"--samples", "--backend", "--device"}
    values = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a in flags}
    only = {a for a in argv if not a.startswith("-") and a not in values}
    triton = backend == "triton" or device == "cuda"
    pairs = [(op, torch.float32) for op in TRITON_OPS] if triton else PAIRS
    counts: dict[str, int] = {}
    failures = []
    for op, dtype in pairs:
        if only and op.name not in only:
            continue
        try:
            status, detail = sweep(op, dtype, samples, backend, device)
        except Exception as e:
            status, detail = (
                "FAIL",
                f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}",
            )
            failures.append(f"{_variant_name(op)} {str(dtype).removeprefix('torch.')}: {detail}")
        counts[status] = counts.get(status, 0) + 1
        print(f"{status:8} {_id((op, dtype)):50} {detail}", flush=True)
    attempted = counts.get("lowered", 0) + counts.get("FAIL", 0)
    print(
        f"\nlowered and matching: {counts.get('lowered', 0)}, failing: {counts.get('FAIL', 0)}, "
        f"fallback: {counts.get('fallback', 0)}, skipped: {counts.get('skip', 0)}; "
        f"coverage lowered/attempted = {counts.get('lowered', 0)}/{attempted + counts.get('fallback', 0)}"
    )
    for f in failures:
        print("FAIL", f)


if __name__ == "__main__":
    main(sys.argv[1:])
