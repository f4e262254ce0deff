"""Seed 000, the torch.compile FAQ of PyTorch 2.7 (``000_3b30ff149c9150eb.txt``).

Each runnable example as written, with ember's names: ``ember.dynamo.compile``
for ``torch.compile``, ``import ember.dynamo as dynamo`` for ``torch._dynamo``,
``EMBER_LOGS`` for ``TORCH_LOGS``, ``EMBER_REPRO_*`` for ``TORCHDYNAMO_REPRO_*``.
CUDA examples run on the CPU where their point survives (README.md says which).
The feature table is ``README.md`` here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ember.dynamo
import ember.dynamo as dynamo
from ember.dynamo.testing import CompileCounter, CompileCounterWithBackend


def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    print("woo")
    if b.sum() < 0:
        b = b * -1
    return x * b


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


# -- Does torch.compile support training? --------------------------------------


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_training_backward_runs_the_compiled_backward_graph(backend: str) -> None:
    # 2.-5.: AOTAutograd traces a backward per captured forward, min-cut partitions the
    # pair, wraps it in an autograd.Function that eager's engine runs as one op.
    torch.manual_seed(0)
    model = MLP()
    counter = CompileCounterWithBackend(backend)
    compiled = ember.dynamo.compile(model, backend=counter)
    x = torch.randn(5, 8)
    loss = compiled(x).square().mean()
    assert loss.grad_fn is not None
    loss.backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().mean().backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad)
    assert counter.frame_count == 1


def test_training_optimizer_step_is_captured() -> None:
    # 1.: "The .forward() graph and optimizer.step() is captured by TorchDynamo"
    model = MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(5, 8)).sum().backward()
    counter = CompileCounter()
    ember.dynamo.compile(optimizer.step, backend=counter)()
    assert counter.frame_count >= 1


# -- Do you support Distributed code? ------------------------------------------


def test_ddp_model_is_captured(gloo_world_of_one: None) -> None:
    # CPU rendering: one gloo process; the seed's point is that DDP models compile.
    model = torch.nn.parallel.DistributedDataParallel(MLP())
    counter = CompileCounter()
    out = ember.dynamo.compile(model, backend=counter)(torch.randn(5, 8))
    out.sum().backward()
    assert counter.frame_count >= 1


def test_ddp_graphs_split_at_bucket_boundaries(gloo_world_of_one: None) -> None:
    # "the main idea will be to graph break on DDP bucket boundaries": four Linear(64, 64)
    # layers of 16.25 KiB each and a bucket cap of about one layer give one graph per
    # bucket, and training matches eager DDP (two processes: integration_tests/test_ddp.py)
    from torch.nn.parallel import DistributedDataParallel as DDP

    def net() -> torch.nn.Module:
        torch.manual_seed(0)
        layers: list[torch.nn.Module] = []
        for _ in range(4):
            layers += [torch.nn.Linear(64, 64), torch.nn.Tanh()]
        return torch.nn.Sequential(*layers, torch.nn.Linear(64, 1))

    cap = 16 * 1024 / 2**20  # the cap of integration_tests/distributed/ddp_worker.py
    compiled_model, eager_model = DDP(net(), bucket_cap_mb=cap), DDP(net(), bucket_cap_mb=cap)
    counter = CompileCounterWithBackend("aot_eager")
    compiled = ember.dynamo.compile(compiled_model, backend=counter)
    x = torch.randn(8, 64)
    compiled(x).sum().backward()
    eager_model(x).sum().backward()
    assert counter.frame_count == 4
    assert [len(list(g.parameters())) for g in counter.graphs] == [2, 2, 2, 4]
    for a, b in zip(compiled_model.parameters(), eager_model.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad)


# -- Do I still need to export whole graphs? -----------------------------------


def test_fullgraph_gives_one_graph_or_an_error() -> None:
    counter = CompileCounter()
    x = torch.randn(5, 8)
    ember.dynamo.compile(MLP(), backend=counter, fullgraph=True)(x)
    assert counter.frame_count == 1
    with pytest.raises(ember.dynamo.Unsupported, match="print"):
        ember.dynamo.compile(toy_example, backend="eager", fullgraph=True)(x, x)


# -- Why is my code crashing? --------------------------------------------------


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_the_three_backends_to_bisect_a_crash(backend: str) -> None:
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(5, 8, requires_grad=True)
    torch.testing.assert_close(ember.dynamo.compile(model, backend=backend)(x), model(x))


# -- Why are you recompiling in production? -------------------------------------


def test_frozen_run_uses_prior_graphs_only() -> None:
    counter = CompileCounter()
    compiled = ember.dynamo.compile(toy_example, backend=counter)
    compiled(torch.randn(10), torch.ones(10))
    seen = counter.frame_count
    frozen_toy_example = dynamo.run(compiled)
    frozen_toy_example(torch.randn(10), torch.ones(10))
    frozen_toy_example(torch.randn(12), torch.randn(12))  # would recompile: runs eagerly
    assert counter.frame_count == seen


def test_frozen_run_compiles_no_resume_function_either() -> None:
    counter = CompileCounter()
    compiled = ember.dynamo.compile(toy_example, backend=counter)
    compiled(torch.randn(10), torch.ones(10))
    seen = counter.frame_count
    frozen_toy_example = dynamo.run(compiled)
    a, b = torch.randn(10), -torch.ones(10)  # the branch not taken before
    torch.testing.assert_close(frozen_toy_example(a, b), toy_example(a, b))
    assert counter.frame_count == seen


# -- How are you speeding up my code? ------------------------------------------


def test_vertical_fusion_of_two_cosines_is_one_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    # "fuse 2 subsequent cosines means you can do 1 read 1 write instead 2 reads 2 writes"
    from ember.inductor import InductorOptions, make_backend

    reports = []

    def inductor(gm, example_inputs):
        compiled = make_backend(InductorOptions(fallback_on_error=False))(gm, example_inputs)
        reports.append(compiled)
        return compiled

    x = torch.randn(1000)
    with torch.no_grad():
        out = ember.dynamo.compile(lambda x: torch.cos(torch.cos(x)), backend=inductor)(x)
    torch.testing.assert_close(out, torch.cos(torch.cos(x)))
    assert len(reports) == 1
    assert reports[0].report.kernels == 1


def test_pytorch_profiler_sees_ember_kernels() -> None:
    # "try out the PyTorch profiler, visually inspect the generated kernels"
    compiled = ember.dynamo.compile(MLP(), backend="inductor")
    x = torch.randn(5, 8)
    with torch.no_grad():
        compiled(x)
        with torch.profiler.profile() as prof:
            compiled(x)
    names = [e.name for e in prof.events()]
    assert any(name.startswith("ember_graph_") for name in names), sorted(set(names))
    # each generated kernel is its own range, named as in the output code
    assert any(name.startswith("ember_kernel_") for name in names), sorted(set(names))


# -- Identifying the cause of a graph break --------------------------------------


def test_explain_toy_example(capsys: pytest.CaptureFixture[str]) -> None:
    explanation = dynamo.explain(toy_example)(torch.randn(10), torch.ones(10))
    print(explanation)
    out = capsys.readouterr().out
    assert "Graph Count: 3" in out
    assert "Graph Break Count: 2" in out
    # torch 2.7 prints "Op Count: 5": it counts only call_function nodes. ember counts
    # `b.sum()` too (ADR 0016), as the older FAQ (seed 001, "6 ops") did.
    assert "Op Count: 6" in out
    assert explanation.graph_count == 3 and explanation.graph_break_count == 2
    first, second = explanation.break_reasons
    assert "print" in first.reason
    assert (first.user_stack[-1].name, first.user_stack[-1].line) == ("toy_example", 'print("woo")')
    assert "data-dependent control flow" in second.reason
    assert second.user_stack[-1].line == "if b.sum() < 0:"
    assert "Ops per Graph:" in out and "Out Guards:" in out


# -- Why didn't my code recompile when I changed it? -----------------------------


def test_dynamic_shapes_do_not_recompile_on_shape_changes() -> None:
    # env TORCHDYNAMO_DYNAMIC_SHAPES=1: ember's switch is compile(dynamic=True)
    counter = CompileCounter()
    compiled = ember.dynamo.compile(lambda x: x.sin() * 2, backend=counter, dynamic=True)
    for n in (8, 9, 12, 15):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), x.sin() * 2)
    assert counter.frame_count == 1


def test_only_the_graph_that_changed_recompiles() -> None:
    # "if TorchDynamo finds 3 graphs and your change only modified one graph then only
    # that graph will recompile"
    counter = CompileCounter()
    compiled = ember.dynamo.compile(toy_example, backend=counter)
    compiled(torch.randn(10), torch.ones(10))
    assert counter.frame_count == 3
    compiled(torch.randn(10), -torch.ones(10))  # the other side of the branch
    assert counter.frame_count == 4


# -- Why am I getting incorrect results? -----------------------------------------


def test_accuracy_minifier_level_4(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    # EMBER_REPRO_AFTER="aot" EMBER_REPRO_LEVEL=4: an inaccurate backend compiler is
    # caught and minified to the op that is wrong.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packages" / "minifier" / "tests"))
    import minifier_planted as planted

    from ember.aotgrad import aot_autograd
    from ember.minifier import InaccurateBackend, read_dump

    monkeypatch.setenv("EMBER_REPRO_AFTER", "aot")
    monkeypatch.setenv("EMBER_REPRO_LEVEL", "4")
    monkeypatch.setenv("EMBER_REPRO_DIR", str(tmp_path))

    def model(x):
        return (x * 3).relu() + x.sin()

    compiled = ember.dynamo.compile(model, backend=aot_autograd(planted.inaccurate_mul))
    try:  # ember.aotgrad raises the verdict or logs it and runs the graph eagerly
        compiled(torch.randn(4, 4))
    except InaccurateBackend as exc:
        assert "inaccurate" in str(exc)
    minified = [d for d in tmp_path.rglob("minified") if d.is_dir()]
    assert minified, sorted(p.name for p in tmp_path.rglob("*"))
    gm = read_dump(minified[0]).gm
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [torch.ops.aten.mul.Tensor]
    assert (minified[0] / "repro.py").exists()


def test_fallback_random_matches_eager_random_numbers() -> None:
    def fn(x):
        return torch.nn.functional.dropout(x, 0.5) + torch.rand_like(x)

    x = torch.ones(64)
    compiled = ember.dynamo.compile(fn, backend="inductor", options={"fallback_random": True})
    torch.manual_seed(3)
    with torch.no_grad():
        got = compiled(x)
    torch.manual_seed(3)
    torch.testing.assert_close(got, fn(x))


# -- Does torch.func work with torch.compile? ------------------------------------


def test_func_transform_of_a_compiled_function() -> None:
    # The seed writes torch.grad, which torch does not have; torch.func.grad is meant.
    @ember.dynamo.compile(backend="eager")
    def f(x):
        return torch.sin(x)

    def g(x):
        return torch.func.grad(lambda x: f(x).sum())(x)

    x = torch.randn(2, 3)
    torch.testing.assert_close(g(x), torch.cos(x))


def test_compiling_torch_func_grad() -> None:
    def wrapper_fn(x):
        return torch.func.grad(lambda x: x.sin().sum())(x)

    x = torch.randn(3, 3, 3)
    counter = CompileCounter()
    grad_x = ember.dynamo.compile(wrapper_fn, backend=counter, fullgraph=True)(x)
    torch.testing.assert_close(grad_x, x.cos())
    assert counter.frame_count == 1


def test_compiling_torch_vmap() -> None:
    def my_fn(x):
        return torch.vmap(lambda x: x.sum(1))(x)

    x = torch.randn(3, 3, 3)
    counter = CompileCounter()
    output = ember.dynamo.compile(my_fn, backend=counter, fullgraph=True)(x)
    torch.testing.assert_close(output, x.sum(2))
    assert counter.frame_count == 1


def test_allow_in_graph_escape_hatch() -> None:
    counter = CompileCounter()

    @ember.dynamo.compile(backend=counter)
    def f(x):
        return dynamo.allow_in_graph(torch.vmap(torch.sum))(x)

    x = torch.randn(2, 3)
    torch.testing.assert_close(f(x), x.sum(1))
    assert counter.frame_count == 1


def test_functional_call_extracts_the_module_state() -> None:
    model = MLP()
    params = dict(model.named_parameters())
    counter = CompileCounter()

    @ember.dynamo.compile(backend=counter, fullgraph=True)
    def f(params, x):
        return torch.func.functional_call(model, params, (x,))

    x = torch.randn(5, 8)
    torch.testing.assert_close(f(params, x), model(x))
    assert counter.frame_count == 1


# -- Does NumPy work with torch.compile? -----------------------------------------


def numpy_fn(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    return np.sum(X[:, :, None] * Y[:, None, :], axis=(-2, -1))


def test_compile_numpy_code() -> None:
    X = np.random.randn(1024, 64)
    Y = np.random.randn(1024, 64)
    counter = CompileCounter()
    Z = ember.dynamo.compile(numpy_fn, backend=counter)(X, Y)
    assert isinstance(Z, np.ndarray)
    np.testing.assert_allclose(Z, numpy_fn(X, Y), rtol=1e-6)
    assert counter.frame_count == 1


def test_numpy_code_fuses_into_one_cpp_kernel(tmp_path) -> None:
    # EMBER_LOGS=output_code: the multiplication and the sum in one OpenMP C++ kernel
    from .fresh_process import run_example

    proc = run_example("""
        import numpy as np
        import ember.dynamo

        @ember.dynamo.compile
        def numpy_fn(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
            return np.sum(X[:, :, None] * Y[:, None, :], axis=(-2, -1))

        X = np.random.randn(1024, 64)
        Y = np.random.randn(1024, 64)
        Z = numpy_fn(X, Y)
        assert isinstance(Z, np.ndarray)
    """, tmp_path, {"EMBER_LOGS": "output_code"})
    assert proc.stderr.count("// kernel") == 1 and "omp" in proc.stderr, proc.stderr


def test_numpy_code_under_a_device_context() -> None:
    # CPU rendering of `with torch.device("cuda")`: the traced NumPy runs on that device
    X = np.random.randn(64, 8)
    Y = np.random.randn(64, 8)
    counter = CompileCounter()
    with torch.device("cpu"):
        Z = ember.dynamo.compile(numpy_fn, backend=counter)(X, Y)
    assert isinstance(Z, np.ndarray)
    np.testing.assert_allclose(Z, numpy_fn(X, Y), rtol=1e-6)
    assert counter.frame_count == 1


def test_wrap_numpy_takes_and_returns_tensors() -> None:
    @ember.dynamo.compile(fullgraph=True)
    @ember.dynamo.wrap_numpy
    def numpy_fn(X, Y):
        return np.sum(X[:, :, None] * Y[:, None, :], axis=(-2, -1))

    X = torch.randn(1024, 64)
    Y = torch.randn(1024, 64)
    Z = numpy_fn(X, Y)
    assert isinstance(Z, torch.Tensor)
    torch.testing.assert_close(Z, (X[:, :, None] * Y[:, None, :]).sum((-2, -1)), rtol=1e-4, atol=1e-4)


def test_wrap_numpy_differentiates_through_numpy_code() -> None:
    @ember.dynamo.compile(fullgraph=True)
    @ember.dynamo.wrap_numpy
    def numpy_fn(X, Y):
        return np.mean(np.sum(X[:, :, None] * Y[:, None, :], axis=(-2, -1)))

    X = torch.randn(1024, 64, requires_grad=True)
    Y = torch.randn(1024, 64)
    Z = numpy_fn(X, Y)
    assert isinstance(Z, torch.Tensor)
    Z.backward()
    # X.grad now holds the gradient of the computation
    torch.testing.assert_close(X.grad, Y.sum(1, keepdim=True).expand(1024, 64) / 1024)


def test_wrap_numpy_with_a_graph_break() -> None:
    @ember.dynamo.compile
    @ember.dynamo.wrap_numpy
    def numpy_fn(X, Y):
        prod = X[:, :, None] * Y[:, None, :]
        print("oops, a graph break!")
        return np.sum(prod, axis=(-2, -1))

    X = torch.randn(1024, 64)
    Y = torch.randn(1024, 64)
    with torch.device("cpu"):
        Z = numpy_fn(X, Y)
    assert isinstance(Z, torch.Tensor)
    assert Z.device.type == "cpu"


def test_trace_numpy_false_leaves_numpy_to_numpy() -> None:
    from ember.dynamo import config

    config.trace_numpy = False
    X = np.random.randn(64, 8)
    Y = np.random.randn(64, 8)
    np.testing.assert_allclose(ember.dynamo.compile(numpy_fn, backend="eager")(X, Y), numpy_fn(X, Y))


# -- Which API to use for fine grain tracing? --------------------------------------


def test_disable_runs_a_function_eagerly() -> None:
    @dynamo.disable
    def inner(x):
        return x.cos()

    def outer(x):
        return inner(x.sin()) + 1

    counter = CompileCounter()
    x = torch.randn(3)
    torch.testing.assert_close(ember.dynamo.compile(outer, backend=counter)(x), outer(x))
    assert counter.frame_count == 2
    assert all(torch.cos not in [n.target for n in g.graph.nodes] for g in counter.graphs)


def test_disallow_in_graph_keeps_an_operator_out_of_graphs() -> None:
    def fn(x):
        return torch.sub(x.sin(), 1).cos()

    dynamo.disallow_in_graph(torch.sub)
    try:
        counter = CompileCounter()
        x = torch.randn(3)
        torch.testing.assert_close(ember.dynamo.compile(fn, backend=counter)(x), fn(x))
    finally:
        dynamo.allow_in_graph(torch.sub)
    assert counter.frame_count == 2
    assert all(torch.sub not in [n.target for n in g.graph.nodes] for g in counter.graphs)


def test_disable_not_recursive_still_captures_the_callees() -> None:
    def aa_fn(x):
        return x.sin() + 1

    def ab_fn(x):
        return x.cos() * 2

    @dynamo.disable(recursive=False)
    def a_fn(x):
        return aa_fn(x) + ab_fn(x)

    def fn(x):
        return a_fn(x * 2) - 1

    counter = CompileCounter()
    x = torch.randn(3)
    torch.testing.assert_close(ember.dynamo.compile(fn, backend=counter)(x), fn(x))
    captured = {n.target for g in counter.graphs for n in g.graph.nodes}
    assert "sin" in {getattr(t, "__name__", t) for t in captured}
    assert "cos" in {getattr(t, "__name__", t) for t in captured}


def test_graph_break_at_the_top_prevents_inlining() -> None:
    def callee(x):
        dynamo.graph_break()
        return x.sin()

    def fn(x):
        return callee(x * 2) + 1

    counter = CompileCounter()
    x = torch.randn(3)
    torch.testing.assert_close(ember.dynamo.compile(fn, backend=counter)(x), fn(x))
    # fn before the call, callee's own frame, fn after the call
    assert counter.frame_count == 3
