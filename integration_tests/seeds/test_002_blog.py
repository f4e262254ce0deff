"""Seed 002, the blog post on torch.compile (``002_1daa7122265368d2.txt``).

The blog's own model (a ViT + GPT-2 captioner, trained on 8 A100s) is in the
transformers zoo (``integration_tests/models``, issue 13); here each technique
it walks through runs on a small model, with ember's names:
``ember.dynamo.compile`` for ``torch.compile``, ``ember.dynamo`` for
``torch._dynamo`` and ``torch.compiler``, ``ember.dynamo.set_logs`` for
``torch._logging.set_logs``, ``EMBER_LOGS`` for ``TORCH_LOGS``,
``EMBER_CACHE_DIR`` for ``TORCHINDUCTOR_CACHE_DIR``. CUDA-only settings run on
the CPU where their point survives (README.md says which).
"""

from __future__ import annotations

import copy
import logging
import warnings

import pytest
import torch

import ember.dynamo
from ember.dynamo.testing import CompileCounter, CompileCounterWithBackend

from .fresh_process import run_example


class Block(torch.nn.Module):
    """A small pre-norm MLP block: the unit the blog compiles regionally."""

    def __init__(self, d: int = 16):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 2 * d)
        self.down = torch.nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Chatty(torch.nn.Module):
    """The graph-break killers the blog lists: a print, an assert, a branch on data."""

    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        y = self.block(x)
        print("block done")
        assert y.shape == x.shape
        if y.mean() > 0:
            y = y * 2
        return y


# -- Avoiding Graph-Breaks -----------------------------------------------------------


def test_explain_lists_every_graph_break(capsys: pytest.CaptureFixture[str]) -> None:
    model = Chatty()
    explanation = ember.dynamo.explain(model)(torch.randn(2, 16))
    reasons = [b.reason for b in explanation.break_reasons]
    assert explanation.graph_break_count == 2
    assert "print" in reasons[0] and "data-dependent control flow" in reasons[1]


def test_ember_logs_graph_breaks_recompiles_perf_hints(tmp_path) -> None:
    # export EMBER_LOGS="graph_breaks,recompiles,perf_hints" (the blog's starting point)
    proc = run_example("""
        import torch
        import ember.dynamo

        def fn(x, w):
            y = x @ w
            print("a graph break")
            return y.relu()

        compiled = ember.dynamo.compile(fn)
        with torch.no_grad():
            compiled(torch.randn(4, 8), torch.randn(8, 8))
            compiled(torch.randn(6, 8), torch.randn(8, 8))
    """, tmp_path, {"EMBER_LOGS": "graph_breaks,recompiles,perf_hints"})
    err = proc.stderr
    assert "graph break in `fn`" in err and "`print(\"a graph break\")`" in err, err
    assert "recompiling `fn`" in err and "L['x'].size()[0] was 6, the graph assumed 4" in err, err
    assert "extern kernel for aten::mm" in err, err


def test_ember_logs_print_each_block_once(tmp_path) -> None:
    proc = run_example("""
        import torch
        import ember.dynamo

        compiled = ember.dynamo.compile(lambda x, w: (x @ w).relu())
        with torch.no_grad():
            compiled(torch.randn(4, 8), torch.randn(8, 8))
    """, tmp_path, {"EMBER_LOGS": "output_code,perf_hints",
                    "EMBER_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.stderr.count("extern kernel for aten::mm") == 1, proc.stderr
    assert proc.stderr.count("def call(") == 1, proc.stderr


def test_set_logs_in_code(caplog: pytest.LogCaptureFixture) -> None:
    # torch._logging.set_logs(graph_breaks=True, recompiles=True, perf_hints=True)
    ember.dynamo.set_logs(graph_breaks=True, recompiles=True, perf_hints=True)
    try:
        with caplog.at_level(logging.INFO, logger="ember"):
            compiled = ember.dynamo.compile(Chatty(), backend="eager")
            compiled(torch.randn(2, 16))
            compiled(torch.randn(3, 16))
    finally:
        ember.dynamo.set_logs(graph_breaks=False, recompiles=False, perf_hints=False)
    names = [r.name for r in caplog.records]
    assert "ember.graph_breaks" in names and "ember.recompiles" in names


def test_fullgraph_fails_at_the_first_graph_break() -> None:
    with pytest.raises(ember.dynamo.Unsupported, match=r"print\(\"block done\"\)"):
        ember.dynamo.compile(Chatty(), backend="eager", fullgraph=True)(torch.randn(2, 16))


def test_torch_where_replaces_a_data_dependent_branch() -> None:
    def branchy(y):
        if y.mean() > 0:
            y = y * 2
        return y

    def graph_friendly(y):
        return torch.where(y.mean() > 0, y * 2, y)

    counter = CompileCounter()
    y = torch.randn(8)
    torch.testing.assert_close(ember.dynamo.compile(graph_friendly, backend=counter, fullgraph=True)(y), branchy(y))
    assert counter.frame_count == 1


def test_torch_cond_replaces_a_data_dependent_branch() -> None:
    def graph_friendly(y):
        return torch.cond(y.mean() > 0, lambda y: y * 2, lambda y: y.clone(), (y,))

    counter = CompileCounter()
    compiled = ember.dynamo.compile(graph_friendly, backend=counter, fullgraph=True)
    for y in (torch.ones(8), -torch.ones(8)):  # both branches, one graph
        torch.testing.assert_close(compiled(y), y * 2 if y.mean() > 0 else y)
    assert counter.frame_count == 1


def test_is_compiling_keeps_prints_out_of_the_graph(capsys: pytest.CaptureFixture[str]) -> None:
    # if not torch.compiler.is_compiling(): print(...)
    def fn(x):
        y = x.sin()
        if not ember.dynamo.is_compiling():
            print("eager only")
        return y + 1

    counter = CompileCounter()
    x = torch.randn(4)
    torch.testing.assert_close(ember.dynamo.compile(fn, backend=counter, fullgraph=True)(x), fn(x))
    assert counter.frame_count == 1
    assert capsys.readouterr().out.count("eager only") == 1  # the eager call only


# -- Avoiding Recompiles -------------------------------------------------------------


def test_set_stance_fail_on_recompile() -> None:
    compiled = ember.dynamo.compile(Block(), backend="eager")
    compiled(torch.randn(2, 16))
    ember.dynamo.set_stance("fail_on_recompile")
    with pytest.raises(ember.dynamo.RecompileError, match=r"L\['x'\].size\(\)\[0\] was 3, the graph assumed 2"):
        compiled(torch.randn(3, 16))
    compiled(torch.randn(2, 16))  # a cached graph still serves


# -- Compiling Graphs with Variable-Shaped Tensors -------------------------------------


def test_default_dynamic_none_recompiles_once_to_a_dynamic_graph() -> None:
    counter = CompileCounter()
    compiled = ember.dynamo.compile(Block(), backend=counter)
    for length in (5, 7, 9, 12):
        x = torch.randn(2, length, 16)
        torch.testing.assert_close(compiled(x), compiled._orig_mod(x))
    assert counter.frame_count == 2


def test_mark_dynamic_avoids_recompiles() -> None:
    counter = CompileCounter()
    compiled = ember.dynamo.compile(Block(), backend=counter)
    for length in (5, 7, 9, 12):
        batch = torch.randn(2, length, 16)
        ember.dynamo.mark_dynamic(batch, 1)
        torch.testing.assert_close(compiled(batch), compiled._orig_mod(batch))
    assert counter.frame_count == 1


def test_dynamic_true_compiles_one_graph_for_every_length() -> None:
    counter = CompileCounter()
    compiled = ember.dynamo.compile(Block(), backend=counter, fullgraph=True, dynamic=True)
    for length in (5, 7, 9, 12):
        x = torch.randn(2, length, 16)
        torch.testing.assert_close(compiled(x), compiled._orig_mod(x))
    assert counter.frame_count == 1


def test_dynamic_false_compiles_a_fixed_number_of_static_graphs() -> None:
    # Pad to multiples of 32: eight lengths, eight static graphs, then no more compiles.
    counter = CompileCounter()
    compiled = ember.dynamo.compile(Block(), backend=counter, dynamic=False)
    lengths = [32 * k for k in range(1, 9)]
    for length in lengths + lengths:
        x = torch.randn(1, length, 16)
        torch.testing.assert_close(compiled(x), compiled._orig_mod(x))
    assert counter.frame_count == 8


def test_recompile_limit_falls_back_to_eager() -> None:
    # "a recompilation limit (the default is 8) after which it ... falls back to eager"
    counter = CompileCounter()
    # static shapes: with the default dynamic=None the second size makes the dim dynamic
    compiled = ember.dynamo.compile(lambda x: x * 2, backend=counter, dynamic=False)
    with pytest.warns(RuntimeWarning, match=r"hit cache_size_limit \(8\)"):
        for n in range(1, 12):
            x = torch.randn(n)
            torch.testing.assert_close(compiled(x), x * 2)
    assert counter.frame_count == 8


# -- Debugging Compilation Issues ---------------------------------------------------


def test_ember_logs_plus_dynamo_traces_capture(tmp_path) -> None:
    proc = run_example("""
        import torch
        import ember.dynamo

        def toy_example(a, b):
            x = a / (torch.abs(a) + 1)
            return x * b

        ember.dynamo.compile(toy_example, backend="eager")(torch.randn(4), torch.randn(4))
    """, tmp_path, {"EMBER_LOGS": "+dynamo"})
    assert "LOAD_FAST" in proc.stderr and "toy_example" in proc.stderr, proc.stderr


def test_disable_a_problematic_function_top_down() -> None:
    @ember.dynamo.disable
    def problematic(x):
        return torch.nonzero(x).float().sum()

    def model(x):
        return problematic(x.relu()) + x.sum()

    counter = CompileCounter()
    x = torch.randn(16)
    torch.testing.assert_close(ember.dynamo.compile(model, backend=counter)(x), model(x))
    assert counter.frame_count == 2


# -- Advanced Compiler Modes and Options ---------------------------------------------------

_MODES = ["reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("mode", _MODES)
def test_modes_are_never_silently_ignored(mode: str, backend: str) -> None:
    # On a CPU none of the three modes can do what it says (CUDA graphs, Triton autotuning):
    # compiling with one says so.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = ember.dynamo.compile(Block(), backend=backend, fullgraph=True, mode=mode)
        x = torch.randn(2, 16)
        torch.testing.assert_close(compiled(x), compiled._orig_mod(x))
    assert any(mode in str(w.message) for w in caught), [str(w.message) for w in caught]


def test_shape_padding_option() -> None:
    # options={"shape_padding": True}: ember.inductor pads nothing and says so; the
    # model still compiles and runs
    with pytest.warns(UserWarning, match=r"options\['shape_padding'\]=True: ember.inductor does not pad"):
        compiled = ember.dynamo.compile(Block(), fullgraph=True, options={"shape_padding": True})
    x = torch.randn(2, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), compiled._orig_mod(x))


def test_unknown_options_are_refused_naming_what_ember_accepts() -> None:
    with pytest.raises(ember.dynamo.CompileOptionsError,
                       match=r"unknown options key 'shape_pading'; ember.inductor accepts .*max_fusion_size"):
        ember.dynamo.compile(Block(), options={"shape_pading": True})


# -- Compiling the Optimizer ----------------------------------------------------------


def test_compile_the_optimizer_step() -> None:
    # the blog's spelling; its first step (which creates Adam's state) is compiled too,
    # and it updates the parameters as eager's step does
    model = Block()
    reference = copy.deepcopy(model)
    optimizer = torch.optim.Adam(model.parameters())
    eager_optimizer = torch.optim.Adam(reference.parameters())
    counter = CompileCounter()
    optimizer.step = ember.dynamo.compile(optimizer.step, backend=counter)
    x = torch.randn(2, 16)
    model(x).sum().backward()
    reference(x).sum().backward()
    optimizer.step()
    eager_optimizer.step()
    assert counter.frame_count == 1
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got, want)


def test_ddp_training_without_fullgraph(gloo_world_of_one: None) -> None:
    # Step #5: "we have to disable the fullgraph setting because the cross-GPU gradient
    # sharing requires graph-breaking communication calls" (one gloo process here; two in
    # integration_tests/test_ddp.py). Without fullgraph, a compiled DDP model trains as eager
    # DDP does; with it, ember says why it cannot (test_ddp.py::test_fullgraph_with_ddp_says_why).
    from torch.nn.parallel import DistributedDataParallel as DDP

    def make() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 32), torch.nn.GELU(),
            torch.nn.Linear(32, 1),
        )
        ddp = DDP(net, bucket_cap_mb=2 * 1024 / 2**20)
        return ddp, torch.optim.SGD(ddp.parameters(), lr=0.05)

    (compiled_model, opt_c), (eager_model, opt_e) = make(), make()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = ember.dynamo.compile(compiled_model, backend=counter)
    torch.manual_seed(1)
    for _ in range(3):
        x, y = torch.randn(8, 16), torch.randn(8, 1)
        for model, opt in ((compiled, opt_c), (eager_model, opt_e)):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
    for a, b in zip(compiled_model.parameters(), eager_model.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    # split where the 2 KiB buckets end, walking back from the output: the last two layers
    # (4.3 KiB) fill one bucket, the first layer (2.1 KiB) another; each compiled once
    assert counter.frame_count == 2


def test_mark_static_address_of_gradients() -> None:
    # accepted (issue 15); on CPU tensors it changes nothing (CUDA graphs read a marked
    # tensor in place under mode='reduce-overhead': ADR 0039)
    model = Block()
    model(torch.randn(2, 16)).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        ember.dynamo.mark_static_address(p.grad)
    counter = CompileCounter()
    step = ember.dynamo.compile(lambda g: [t * 0.5 for t in g], backend=counter)
    got = step([p.grad for p in model.parameters()])
    for g, w in zip(got, grads, strict=True):
        torch.testing.assert_close(g, w * 0.5)
    assert counter.frame_count == 1


# -- Foreach Map Optimization ------------------------------------------------------------


def _adam_state(model):
    optimizer = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01))
    model(torch.randn(2, 16)).sum().backward()
    optimizer.step()  # warm up the optimizer state
    steps, params, exp_avgs = [], [], []
    for p in model.parameters():
        state = optimizer.state[p]
        steps.append(state["step"])
        params.append(p)
        exp_avgs.append(state["exp_avg"])
    return steps, params, exp_avgs


def foreach_map_momentum(steps, params, exp_avgs, beta1=0.9, lr=1e-3):
    """A foreach_map optimizer step in the Foreach Map tutorial's style (first moment only)."""
    from torch._higher_order_ops.foreach_map import foreach_map

    with torch.no_grad():
        grads = [p.grad for p in params]
        torch._foreach_copy_(steps, foreach_map(lambda s: s + 1, steps))
        updated = foreach_map(torch.lerp, exp_avgs, grads, 1 - beta1)
        torch._foreach_copy_(exp_avgs, updated)
        torch._foreach_copy_(params, foreach_map(lambda p, m: p - lr * m, params, updated))


def test_compiled_foreach_map_step_matches_eager() -> None:
    torch.manual_seed(0)
    model = Block()
    reference = copy.deepcopy(model)
    torch.manual_seed(1)
    inputs = _adam_state(model)
    torch.manual_seed(1)
    ref_inputs = _adam_state(reference)
    counter = CompileCounter()
    compiled_adam = ember.dynamo.compile(foreach_map_momentum, backend=counter)
    for _ in range(3):
        compiled_adam(*inputs)
        foreach_map_momentum(*ref_inputs)
    for got, want in zip(inputs[1], ref_inputs[1]):
        torch.testing.assert_close(got, want)
    assert counter.frame_count >= 1


# -- Modular and Regional Compilation -------------------------------------------------------


class EncoderDecoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(Block(), Block())
        self.decoder = torch.nn.Sequential(Block(), Block())

    def loss_function(self, out, target):
        return torch.nn.functional.mse_loss(out, target)

    def forward(self, x, target):
        return self.loss_function(self.decoder(self.encoder(x)), target)


def test_modular_compilation_of_each_component() -> None:
    torch.manual_seed(0)
    model = EncoderDecoder()
    x, target = torch.randn(2, 16), torch.randn(2, 16)
    want = model(x, target)
    counter = CompileCounter()
    model.encoder = ember.dynamo.compile(model.encoder, backend=counter, fullgraph=True)
    model.decoder = ember.dynamo.compile(model.decoder, backend=counter, fullgraph=True)
    model.loss_function = ember.dynamo.compile(model.loss_function, backend=counter, fullgraph=True)
    torch.testing.assert_close(model(x, target), want)
    assert counter.frame_count == 3


def test_regional_compilation_reuses_one_graph_per_block() -> None:
    torch.manual_seed(0)
    model = EncoderDecoder()
    x, target = torch.randn(2, 16), torch.randn(2, 16)
    want = model(x, target)
    counter = CompileCounter()
    model.encoder = torch.nn.Sequential(
        *[ember.dynamo.compile(layer, backend=counter, fullgraph=True) for layer in model.encoder]
    )
    model.decoder = torch.nn.Sequential(
        *[ember.dynamo.compile(layer, backend=counter, fullgraph=True) for layer in model.decoder]
    )
    torch.testing.assert_close(model(x, target), want)
    # one capture of Block.forward per compiled layer object; the guards differ only in the
    # module, so each layer compiles once and later calls hit the cache
    assert counter.frame_count == 4
    model(x, target)
    assert counter.frame_count == 4


# -- Reducing Compilation Time ---------------------------------------------------------------


@pytest.mark.slow  # two processes compiling cold; the caches' own tests cover this by default
def test_compile_cache_dir_makes_a_second_process_warm(tmp_path) -> None:
    # TORCHINDUCTOR_CACHE_DIR -> EMBER_CACHE_DIR: a second run of the same program reuses
    # what the first compiled
    source = """
        import torch
        import ember.dynamo

        model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU())
        with torch.no_grad():
            ember.dynamo.compile(model)(torch.randn(4, 16))
    """
    env = {"EMBER_CACHE_DIR": str(tmp_path / "cache")}
    run_example(source, tmp_path, env)
    first = {p for p in (tmp_path / "cache").rglob("*") if p.is_file()}
    assert any(p.suffix == ".so" for p in first)
    run_example(source, tmp_path, env)
    second = {p for p in (tmp_path / "cache").rglob("*") if p.is_file()}
    assert second == first  # nothing new compiled


def test_save_and_load_cache_artifacts(tmp_path, monkeypatch) -> None:
    # Mega-Cache: torch.compiler.save_cache_artifacts / load_cache_artifacts, same shapes
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("EMBER_FRAME_CACHE", "1")
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU())
    x = torch.randn(4, 16)
    with torch.no_grad():
        ember.dynamo.compile(model, backend="eager")(x)
    artifact_bytes, cache_info = ember.dynamo.save_cache_artifacts()
    assert isinstance(artifact_bytes, bytes) and len(cache_info.frames) == 1
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "fresh"))
    restored = ember.dynamo.load_cache_artifacts(artifact_bytes)
    assert restored.frames == cache_info.frames
    assert {p.name for p in (tmp_path / "fresh" / "frames").rglob("*.json")} == {
        p.name for p in (tmp_path / "cache" / "frames").rglob("*.json")
    }


# -- The training step ------------------------------------------------------------------------


def test_train_step_under_autocast() -> None:
    # CPU rendering of `with torch.amp.autocast('cuda', dtype=torch.bfloat16)` around the model
    torch.manual_seed(0)
    model = EncoderDecoder()
    reference = copy.deepcopy(model)
    counter = CompileCounter()
    compiled = ember.dynamo.compile(model, backend=counter, fullgraph=True)
    x, target = torch.randn(4, 16), torch.randn(4, 16)
    with torch.amp.autocast("cpu", dtype=torch.bfloat16):
        loss = compiled(x, target)
        want = reference(x, target)
    loss.backward()
    want.backward()
    torch.testing.assert_close(loss, want)
    for got, ref in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, ref.grad)
    assert counter.frame_count == 1


def test_reset_forgets_compiled_graphs() -> None:
    counter = CompileCounter()
    compiled = ember.dynamo.compile(Block(), backend=counter)
    x = torch.randn(2, 16)
    compiled(x)
    ember.dynamo.reset()
    compiled(x)
    assert counter.frame_count == 2
