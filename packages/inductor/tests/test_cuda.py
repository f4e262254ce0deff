"""ember.inductor on CUDA tensors (real Triton kernels on a GPU), compared with eager.

Skipped where torch sees no GPU (the default test machine); ``tools/gpu_check.sh`` runs it
on a lent GPU machine. The same models run on CPU tensors in ``test_models.py`` (C++ and
Triton's interpreter); here they run on the GPU, with ember.dynamo in front for the
end-to-end cases.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ember.inductor import CompiledGraph, InductorOptions, make_backend
from ember.inductor.testing import recording

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
pytest.importorskip("triton")

DEV = "cuda"


sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_models import GPTBlock as Block  # noqa: E402  (the same models as on CPU)
from test_models import _models, assert_trains_like_eager  # noqa: E402


def _opts(tmp_path: Any, **kw: Any) -> InductorOptions:
    return InductorOptions(cache_dir=str(tmp_path), fallback_on_error=False, **kw)


def _all_compiled(reports: list[Any]) -> None:
    assert reports and all(isinstance(g, CompiledGraph) for g in reports), [
        g.report.eager_reason for g in reports
    ]
    assert sum(g.report.kernels for g in reports) >= 1
    assert all(g.report.kernel_suffix == "py" for g in reports)  # Triton kernels, not C++


@pytest.mark.parametrize("name", list(_models()))
def test_inference_on_cuda(name: str, reports: list[Any], tmp_path: Any) -> None:
    torch.manual_seed(0)
    make_model, make_input = _models()[name]
    model, x = make_model().to(DEV).eval(), make_input().to(DEV)
    if name == "transformer":
        model.train()  # eval takes ATen's fused fast path; dropout is 0
    compiled = torch.compile(model, backend=make_backend(_opts(tmp_path)))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    _all_compiled(reports)


@pytest.mark.parametrize("name", ["mlp", "cnn_bn", "gpt_block", "transformer"])
def test_training_on_cuda(name: str, reports: list[Any], tmp_path: Any) -> None:
    pytest.importorskip("ember.aotgrad")
    torch.manual_seed(0)
    make_model, make_input = _models()[name]
    model, x = make_model().to(DEV).train(), make_input().to(DEV)
    ref_model = make_model().to(DEV).train()
    ref_model.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend=make_backend(_opts(tmp_path)))
    assert_trains_like_eager(compiled, model, ref_model, x)
    _all_compiled(reports)


def test_ember_dynamo_end_to_end_on_cuda(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    dynamo = pytest.importorskip("ember.dynamo")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    model = Block().to(DEV)
    x = torch.randn(2, 8, 64, device=DEV)
    compiled = dynamo.compile(model, backend="inductor", fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    compiled(x).sum().backward()
    assert model.qkv.weight.grad is not None


# -- symbolic sizes (ADR 0050): compiled Triton kernels taking sizes as arguments ------------


def _six_lengths(model: nn.Module, lengths: tuple[int, ...], train: bool, monkeypatch: Any) -> tuple[int, list[Any]]:
    """``model`` through ember.dynamo (default ``dynamic=None``) at each length, against a
    copy run eagerly (outputs, and gradients when ``train``); (frames compiled, graphs)."""
    import copy

    import ember.dynamo as ed
    import ember.inductor.backends as backends
    from ember.dynamo.testing import CompileCounterWithBackend

    seen: list[Any] = []

    monkeypatch.setattr(backends, "compile_graph", recording(backends.compile_graph, seen))
    ed.reset()
    ref = copy.deepcopy(model)
    cnt = CompileCounterWithBackend(make_backend(InductorOptions(fallback_on_error=False)))
    compiled = ed.compile(model, backend=cnt)
    for t in lengths:
        x = torch.randn(2, t, 64, device=DEV)
        with torch.set_grad_enabled(train):
            got, want = compiled(x), ref(x)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        if train:
            grad = torch.randn_like(got)
            got.backward(grad)
            want.backward(grad)
            for (n, p), q in zip(model.named_parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-3, msg=lambda m, n=n: f"{n}: {m}")
            model.zero_grad(set_to_none=True)
            ref.zero_grad(set_to_none=True)
    ed.reset()
    return cnt.frame_count, seen


def test_six_lengths_compile_twice_with_symbolic_triton_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    frames, seen = _six_lengths(Block().to(DEV).eval(), (8, 11, 16, 23, 30, 37), False, monkeypatch)
    assert frames <= 2
    _all_compiled(seen)
    assert any(g.report.symbolic for g in seen)  # the recompiled graph: a symbolic length


def test_training_at_growing_lengths_with_symbolic_triton_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ember.aotgrad")
    torch.manual_seed(0)
    frames, seen = _six_lengths(Block().to(DEV).train(), (8, 12, 19, 33), True, monkeypatch)
    assert frames <= 2
    _all_compiled(seen)
    assert any(g.report.symbolic for g in seen)


def test_symbolic_reduction_variants_and_int64_bound_on_cuda(tmp_path: Any) -> None:
    """One symbolic graph at sizes on both sides of the persistent/looped boundary."""
    from test_symbolic import Builder, aten

    b = Builder()
    x = b.input("x", ["a", "b"], {"a": 4, "b": 6}, device=DEV)
    gm = b.module(
        b.call(aten.sum.dim_IntList, b.call(aten.mul.Tensor, x, 2.0), [1]),
        b.call(aten.amax.default, x, [0]),
    )
    from ember.inductor import compile_graph

    c = compile_graph(gm, b.inputs, _opts(tmp_path, graph_cache=False))
    assert isinstance(c, CompiledGraph), c.report.eager_reason
    for shape in [(4, 6), (9, 17), (3, 2000), (5, 1025), (1000, 3)]:
        t = torch.randn(*shape, device=DEV)
        got = c(t)
        torch.testing.assert_close(got[0], (t * 2).sum(1))
        torch.testing.assert_close(got[1], t.amax(0))


def test_opinfo_symbolic_sweep_on_cuda() -> None:
    """The default symbolic OpInfo sweep (``test_opinfo.py``) on CUDA tensors."""
    import test_opinfo

    failures = []
    for op in test_opinfo.TRITON_OPS:
        if op.name not in test_opinfo.TRITON_SYMBOLIC_FAST:
            continue
        try:
            test_opinfo.sweep_symbolic(op, torch.float32, 2, device=DEV)
        except Exception as e:
            failures.append(f"{test_opinfo._variant_name(op)}: {type(e).__name__}: {str(e)[:200]}")
    assert not failures, failures


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_kernels(dtype: torch.dtype, reports: list[Any], tmp_path: Any) -> None:
    x = torch.randn(64, 257, device=DEV, dtype=dtype)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.softmax(x, -1), (x.float().sin() * 2).to(dtype) + x

    compiled = torch.compile(fn, backend=make_backend(_opts(tmp_path)))
    for g, e in zip(compiled(x), fn(x)):
        torch.testing.assert_close(g, e, atol=2e-2, rtol=2e-2)
    _all_compiled(reports)


def test_embedding_lookup_matches_eager(reports: list[Any], tmp_path: Any) -> None:
    emb = nn.Embedding(100, 16).to(DEV)
    idx = torch.randint(0, 100, (4, 9), device=DEV)

    def fn(idx: torch.Tensor) -> torch.Tensor:
        return emb(idx) * 2 + emb(torch.arange(idx.shape[1], device=DEV))

    compiled = torch.compile(fn, backend=make_backend(_opts(tmp_path)))
    with torch.no_grad():
        torch.testing.assert_close(compiled(idx), fn(idx))
    _all_compiled(reports)


# -- mode="reduce-overhead": CUDA reports ----------------------------------------------------


def _ro(tmp_path: Any) -> InductorOptions:
    return _opts(tmp_path, mode="reduce-overhead")


def _graph(fn: Callable[..., Any], inputs: list[torch.Tensor], opts: InductorOptions) -> CompiledGraph:
    from torch.fx.experimental.proxy_tensor import make_fx

    from ember.inductor import compile_graph

    c = compile_graph(make_fx(fn)(*inputs), inputs, opts)
    assert isinstance(c, CompiledGraph), c.report.eager_reason
    return c


def test_reduce_overhead_replays_and_matches_eager(tmp_path: Any) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        return [(x * 2 + y).relu(), (x - y).sum(0)]

    x, y = torch.randn(64, 33, device=DEV), torch.randn(64, 33, device=DEV)
    c = _graph(fn, [x, y], _ro(tmp_path))
    assert c.cudagraphs is not None, "reduce-overhead on CUDA must record CUDA reports"
    held = []
    for _ in range(6):
        x, y = torch.randn_like(x), torch.randn_like(y)
        got = c(x, y)
        for g, e in zip(got, fn(x, y)):
            torch.testing.assert_close(g, e)
        held.append((got, fn(x, y)))
        del got
    assert c.cudagraphs.replays >= 4
    # outputs of earlier calls, still held, were never overwritten by later replays
    for got, want in held:
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)


def test_reduce_overhead_outputs_held_across_calls_stay_correct(tmp_path: Any) -> None:
    def fn(x: torch.Tensor) -> list[torch.Tensor]:
        return [x.sin() * 3]

    x = torch.randn(1000, device=DEV)
    c = _graph(fn, [x], _ro(tmp_path))
    inputs = [torch.randn(1000, device=DEV) for _ in range(8)]
    outs = [c(a)[0] for a in inputs]  # every output kept: no replay may overwrite one
    for a, o in zip(inputs, outs):
        torch.testing.assert_close(o, a.sin() * 3)
    assert c.cudagraphs is not None and c.cudagraphs.recordings <= 4


def test_reduce_overhead_writes_to_inputs_reach_the_callers_tensor(tmp_path: Any) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        x.mul_(2)
        return [x + y]

    x, y = torch.randn(40, device=DEV), torch.randn(40, device=DEV)
    c = _graph(fn, [x.clone(), y], _ro(tmp_path))
    for _ in range(4):
        x, y = torch.randn(40, device=DEV), torch.randn(40, device=DEV)
        ex = x.clone()
        (out,) = c(x, y)
        (want,) = fn(ex, y)
        torch.testing.assert_close(x, ex)  # the caller's x was doubled, as eager does
        torch.testing.assert_close(out, want)
    assert c.cudagraphs is not None and c.cudagraphs.replays >= 2


def test_reduce_overhead_refuses_host_syncs_with_a_reason(tmp_path: Any, caplog: Any) -> None:
    import logging

    def fn(x: torch.Tensor, idx: torch.Tensor) -> list[torch.Tensor]:
        return [x[idx] * 2]

    x, idx = torch.randn(10, 4, device=DEV), torch.tensor([0, 3, 9], device=DEV)
    with caplog.at_level(logging.INFO, logger="ember.perf_hints"):
        c = _graph(fn, [x, idx], _ro(tmp_path))
    for _ in range(3):
        torch.testing.assert_close(c(x, idx)[0], x[idx] * 2)
    if any("err_ptr" in src for src in c.report.kernel_sources.values()):
        assert c.cudagraphs is None
        assert "check gathered indices on the host" in caplog.text
    else:  # the gather is ATen's (device-side checks): recorded like any other graph
        assert c.cudagraphs is not None and c.cudagraphs.replays >= 1


def test_reduce_overhead_training_steps_match_eager(tmp_path: Any) -> None:
    """Parameters are recorded in place: the optimizer's updates reach every replay."""
    pytest.importorskip("ember.aotgrad")
    torch.manual_seed(0)
    model = Block().to(DEV)
    ref = Block().to(DEV)
    ref.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    compiled = torch.compile(model, backend=make_backend(_ro(tmp_path)))
    for step in range(5):
        x = torch.randn(2, 8, 64, device=DEV)
        loss = compiled(x).square().mean()
        ref_loss = ref(x).square().mean()
        torch.testing.assert_close(loss, ref_loss, atol=1e-4, rtol=1e-4, msg=lambda m, step=step: f"step {step}: {m}")
        loss.backward()
        ref_loss.backward()
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, atol=1e-4, rtol=1e-3, msg=lambda m, n=n: f"{n}: {m}")


def test_reduce_overhead_through_ember_dynamo(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, reports: list[Any]) -> None:
    dynamo = pytest.importorskip("ember.dynamo")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)).to(DEV)
    compiled = dynamo.compile(model, backend="inductor", mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(16, 64, device=DEV)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    runners = [g.cudagraphs for g in reports if isinstance(g, CompiledGraph)]
    assert runners and all(r is not None for r in runners)
    assert sum(r.replays for r in runners if r is not None) >= 3


def test_an_out_of_range_index_fails_as_eager_does_on_cuda() -> None:
    """A device-side assertion, as eager's CUDA embedding raises (a separate process: the
    assertion leaves the CUDA context unusable, in eager too)."""
    import os
    import subprocess

    script = (
        "import torch, ember.inductor\n"
        "emb = torch.nn.Embedding(10, 4).cuda()\n"
        "f = torch.compile(lambda i: emb(i) * 2, backend=ember.inductor.backend)\n"
        "with torch.no_grad():\n"
        "    print(f(torch.tensor([1, 2], device='cuda')).sum().item())\n"
        "    out = f(torch.tensor([1, 12], device='cuda'))\n"
        "    torch.cuda.synchronize()\n"
        "print('NO ERROR', out)\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert "NO ERROR" not in run.stdout, run.stdout
    assert run.returncode != 0
    assert "assert" in run.stderr.lower(), run.stderr[-2000:]
