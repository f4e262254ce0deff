"""The benchmark tool's own logic, with fake workloads and compilers; nothing is timed.

Fakes come in through the tool's plugin hook (a Python file that registers
them), exactly as a worker process would load them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import cli, report
from bench.measure import TimingOptions, compare
from bench.probe import probe
from bench.registry import COMPILERS, WORKLOADS, load_builtins, load_plugins
from bench.runner import run_worker
from bench.worker import CellSpec, run_cell

PLUGIN = '''
import os, signal, time
import torch
from bench.registry import Case, Compiler, Workload, register_compiler, register_workload
from bench.workloads import inference_step, training_step

def double_plus_one(x):
    return x * 2 + 1

def _fast(device):
    torch.manual_seed(0)
    return Case(double_plus_one, [(torch.randn(8, device=device),)], inference_step)

def _fast_train(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    return Case(model, [(torch.randn(3, 4),)], training_step(model), params=list(model.parameters()))

def _chatty(device):
    def f(x):
        print("hello from the workload")
        return x + 1
    case = Case(f, [(torch.ones(2),)], inference_step)
    case.silence_stdout = True
    return case

register_workload(Workload("fake_fast", "x * 2 + 1 on 8 floats", _fast))
register_workload(Workload("fake_train", "tiny MLP training step", _fast_train, training=True))
register_workload(Workload("fake_chatty", "prints every call", _chatty))
def _dropout(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 2))
    return Case(model, [(torch.randn(5, 4),)], training_step(model), params=list(model.parameters()))

register_workload(Workload("fake_dropout", "dropout training step", _dropout, training=True, random=True))
register_workload(Workload("fake_needs", "needs a missing module", _fast, requires=("no_such_module_xyz",)))

def _crash(model, options, stats):
    def run(*args):
        raise RuntimeError("boom: the backend exploded\\nsecond line of the error")
    return run

def _wrong(model, options, stats):
    stats.graphs += 1
    stats.counted = True
    def run(*args):
        out = model(*args)
        return out + 1 if isinstance(out, torch.Tensor) else out
    return run

def _late_wrong(model, options, stats):
    calls = [0]
    def run(*args):
        calls[0] += 1
        out = model(*args)
        return out if calls[0] <= 2 else out * 1.5
    return run

def _grad_wrong(model, options, stats):
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()
        @staticmethod
        def backward(ctx, g):
            return g * 3
    def run(*args):
        return Scale.apply(model(*args))
    return run

def _segv(model, options, stats):
    os.kill(os.getpid(), signal.SIGSEGV)

def _hang(model, options, stats):
    time.sleep(600)

def _other_rng(model, options, stats):
    def run(*args):
        torch.rand(3)  # its own random draws: dropout masks differ from eager's
        return model(*args)
    return run

def _no_dropout(model, options, stats):
    def run(*args):
        model.eval()
        try:
            return model(*args)
        finally:
            model.train()
    return run

register_compiler(Compiler("other_rng", "own RNG", _other_rng, rng_matches_eager=False))
register_compiler(Compiler("other_rng_strict", "own RNG, claims eager's", _other_rng))
register_compiler(Compiler("no_dropout", "ignores dropout", _no_dropout, rng_matches_eager=False))
register_compiler(Compiler("crashy", "raises", _crash))
register_compiler(Compiler("wrong", "adds one", _wrong))
register_compiler(Compiler("late_wrong", "wrong after warm-up", _late_wrong))
register_compiler(Compiler("grad_wrong", "wrong gradients", _grad_wrong))
register_compiler(Compiler("segv", "segfaults", _segv))
register_compiler(Compiler("hang", "never returns", _hang))
register_compiler(Compiler("missing", "not installed", _wrong, available=lambda: "not installed here"))
'''

FAST = TimingOptions(warmup=1, repeats=2, min_block_s=0.0, max_block_calls=1)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("bench") / "fakes.py"
    path.write_text(PLUGIN)
    load_builtins()
    load_plugins([str(path)])
    return str(path)


def cell(plugin: str, workload: str, compiler: str) -> dict[str, Any]:
    return run_cell(CellSpec(workload, compiler, plugins=(plugin,), timing=FAST))


def test_fake_workload_runs_and_reports_every_figure(plugin: str) -> None:
    r = cell(plugin, "fake_fast", "eager")
    assert r["status"] == "ok", r
    assert r["max_abs_err"] == 0.0
    for key in ("first_call_s", "compile_cpu_s", "median_s", "q1_s", "q3_s", "min_s"):
        assert isinstance(r[key], float) and r[key] >= 0
    assert r["repeats"] == 2 and r["breaks"] == 0


def test_crashing_compiler_is_an_error_with_its_first_line(plugin: str) -> None:
    r = cell(plugin, "fake_fast", "crashy")
    assert r["status"] == "error"
    assert r["error"] == "RuntimeError: boom: the backend exploded"
    assert r["error_phase"] == "compile"
    assert "median_s" not in r


def test_wrong_output_is_marked_wrong_and_never_timed(plugin: str) -> None:
    r = cell(plugin, "fake_fast", "wrong")
    assert r["status"] == "wrong"
    assert r["error"].startswith("WRONG")
    assert r["max_abs_err"] == pytest.approx(1.0)
    assert "median_s" not in r


def test_output_that_goes_wrong_after_warm_up_is_caught(plugin: str) -> None:
    r = cell(plugin, "fake_fast", "late_wrong")
    assert r["status"] == "wrong"
    assert "after warm-up" in r["error"]


def test_wrong_gradients_are_caught_in_a_training_step(plugin: str) -> None:
    r = cell(plugin, "fake_train", "grad_wrong")
    assert r["status"] == "wrong", r


def test_dropout_checked_in_eval_mode_when_the_compiler_has_its_own_rng(plugin: str) -> None:
    r = cell(plugin, "fake_dropout", "other_rng")
    assert r["status"] == "ok", r
    assert r["check"].startswith("eval mode")
    assert cell(plugin, "fake_dropout", "eager")["check"] == "as run"
    # a compiler that claims eager's random numbers is held to them
    assert cell(plugin, "fake_dropout", "other_rng_strict")["status"] == "wrong"


def test_dropped_dropout_is_wrong(plugin: str) -> None:
    r = cell(plugin, "fake_dropout", "no_dropout")
    assert r["status"] == "wrong"
    assert "dropout had no effect" in r["error"]


def test_training_step_reports_saved_activation_bytes(plugin: str) -> None:
    r = cell(plugin, "fake_train", "eager")
    assert r["status"] == "ok", r
    # the input (3x4, saved by linear 1), tanh's output (3x8, saved by tanh and linear 2:
    # one storage), the 3x2 output (saved by the loss's square); parameters excluded
    assert r["saved_bytes"] == (3 * 4 + 3 * 8 + 3 * 2) * 4


def test_workload_prints_are_silenced(plugin: str, capsys: pytest.CaptureFixture[str]) -> None:
    r = cell(plugin, "fake_chatty", "eager")
    assert r["status"] == "ok"
    assert "hello" not in capsys.readouterr().out


def test_unavailable_compiler_and_workload(plugin: str) -> None:
    r = cell(plugin, "fake_fast", "missing")
    assert r == {**r, "status": "unavailable", "error": "not installed here"}
    r = cell(plugin, "fake_needs", "eager")
    assert r["status"] == "unavailable" and "no_such_module_xyz" in r["error"]
    found = probe("cpu", ["eager", "missing"])
    assert found["compilers"]["missing"] == "not installed here"
    assert found["compilers"]["eager"] is None
    assert "no_such_module_xyz" in found["workloads"]["fake_needs"]


def test_unknown_names_are_errors_not_crashes(plugin: str) -> None:
    assert cell(plugin, "no_such_workload", "eager")["status"] == "error"
    with pytest.raises(SystemExit, match="unknown compiler nope"):
        cli.main(["--compilers", "eager,nope"])


def test_builtin_registry_has_the_issue_grid() -> None:
    load_builtins()
    for name in (
        "pointwise", "softmax", "layernorm_gelu", "mlp", "mlp_train", "cnn_block",
        "encoder_layer", "gpt_block_train", "graph_break", "tiny_add",
        "gpt2_2layer", "vit_gpt2_train", "vit_gpt2_train_2len",
    ):
        assert name in WORKLOADS
    for name in cli.DEFAULT_COMPILERS:
        assert name in COMPILERS
    assert WORKLOADS["vit_gpt2_train_2len"].amortize_steps > 0
    assert len(WORKLOADS["vit_gpt2_train_2len"].requires) == 1


def test_compare_tolerances_shapes_and_nans() -> None:
    import torch

    a = torch.tensor([1.0, 2.0, float("nan")])
    assert compare([a], [a.clone()], 1e-3, 1e-3).ok
    assert not compare([a], [torch.tensor([1.0, 2.0, 3.0])], 1e-3, 1e-3).ok
    assert not compare([a], [a[:2]], 1e-3, 1e-3).ok
    assert not compare([a], [], 1e-3, 1e-3).ok
    big = torch.tensor([1000.0, 0.0])
    assert compare([big], [big + 0.5], 1e-3, 1e-3).ok  # atol scales with the largest value
    assert not compare([big], [big + 2.0], 1e-3, 1e-3).ok


# --- formatting ---------------------------------------------------------------------------


def _results() -> list[dict[str, Any]]:
    return [
        {"workload": "w", "compiler": "eager", "status": "ok", "median_s": 2e-3, "q1_s": 1.9e-3,
         "q3_s": 2.1e-3, "first_call_s": 0.01, "max_abs_err": 0.0, "breaks": 0},
        {"workload": "w", "compiler": "fast", "status": "ok", "median_s": 1e-3, "q1_s": 0.9e-3,
         "q3_s": 1.1e-3, "first_call_s": 3.5, "warm_first_call_s": 0.5, "max_abs_err": 1e-6,
         "graphs": 2, "breaks": 1, "recompiles": 0, "saved_bytes": 4096,
         "eager_here": {"median_s": 4e-3}},
        {"workload": "w", "compiler": "bad", "status": "wrong", "error": "WRONG: output 0",
         "median_s": 1e-4, "max_abs_err": 1.0},
        {"workload": "w", "compiler": "gone", "status": "unavailable", "error": "not here"},
    ]


def test_speedups_against_eager_cell_and_beside_and_none_for_wrong_cells() -> None:
    rs = _results()
    report.add_speedups(rs)
    assert rs[0]["speedup"] == 1.0
    assert rs[1]["speedup"] == pytest.approx(2.0)  # eager's own cell: 2 ms
    assert rs[1]["speedup_beside"] == pytest.approx(4.0)  # eager timed beside it: 4 ms
    assert rs[2]["speedup"] is None and rs[3]["speedup"] is None


def test_tables_are_aligned_and_mark_failures() -> None:
    rs = _results()
    report.add_speedups(rs)
    table = report.long_table(rs)
    lines = table.splitlines()
    header, rule = lines[0], lines[1]
    assert header.split()[:3] == ["workload", "compiler", "status"]
    assert len(rule) == len(header)
    fast = next(line for line in lines if " fast " in line)
    assert fast.split()[7:9] == ["2.00x", "4.00x"] and "3.50" in fast and "0.50" in fast and "  4" in fast
    bad = next(line for line in lines if " bad " in line)
    assert "WRONG" in bad and "x" not in bad.split("WRONG")[1].replace("e", "")
    assert "w x bad: wrong: WRONG: output 0" in table
    assert "w x gone: unavailable: not here" in table
    matrix = report.speedup_matrix(rs).splitlines()
    assert matrix[0].split() == ["speedup", "vs", "eager", "eager", "fast", "bad", "gone"]
    assert matrix[2].split() == ["w", "1.00x", "2.00x", "WRONG", "n/a"]
    rs[1]["graphs"] = 0  # the compiler fell back to eager: flagged, not passed off as compiled
    matrix = report.speedup_matrix(rs).splitlines()
    assert matrix[2].split()[2] == "2.00x*" and matrix[-1].startswith("* compiled no graph")


def test_json_has_raw_figures_and_machine_info() -> None:
    rs = _results()
    info = report.machine_info()
    data = json.loads(report.to_json(rs, info, "python tools/bench.py --quick"))
    assert data["format"] == "ember.bench" and data["version"][0] == 1
    assert data["command"] == "python tools/bench.py --quick"
    for key in ("cpu", "cores", "torch", "python", "date_utc"):
        assert data["machine"][key]
    assert data["results"][1]["saved_bytes"] == 4096


def test_saved_run_is_reprinted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rs = _results()
    report.add_speedups(rs)
    saved = tmp_path / "run.json"
    saved.write_text(report.to_json(rs, report.machine_info(), "python tools/bench.py --quick"))
    assert cli.main(["--from-json", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "2.00x" in out and "WRONG" in out and "command: python tools/bench.py --quick" in out
    saved.write_text('{"format": "other"}')
    with pytest.raises(SystemExit, match="not an ember.bench"):
        cli.main(["--from-json", str(saved)])


def test_plot_writes_a_png(tmp_path: Path) -> None:
    from bench.plot import plot_speedups

    rs = _results()
    report.add_speedups(rs)
    out = tmp_path / "s.png"
    plot_speedups(rs, out, title="t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_picks_the_best_ember_backend_and_formats_its_table() -> None:
    from bench.demo import choose, demo_table

    avail = {
        "compilers": {"ember-inductor": "not installed", "ember-aot_eager": None, "ember-eager": None},
        "workloads": {"gpt2_2layer": "needs transformers"},
    }
    assert choose(avail) == ("gpt_block", "ember-aot_eager")
    avail["workloads"]["gpt2_2layer"] = None
    avail["compilers"] = {k: "missing" for k in avail["compilers"]}
    assert choose(avail) == ("gpt2_2layer", None)
    rs = _results()
    report.add_speedups(rs)
    lines = demo_table(rs).splitlines()
    assert lines[0].split()[:3] == ["compiler", "graphs", "breaks"]
    assert lines[3].split() == ["fast", "2", "1", "3.50", "s", "1.000", "2.00x"]
    assert lines[4].split()[-1] == "WRONG"


# --- processes ----------------------------------------------------------------------------


def test_worker_process_returns_its_result_with_the_thread_count(plugin: str, tmp_path: Path) -> None:
    spec = CellSpec("fake_fast", "eager", plugins=(plugin,), timing=FAST)
    r = run_worker(spec, tmp_path, timeout_s=120, threads=1)
    assert r["status"] == "ok", r
    assert r["torch_threads"] == 1 and r["max_abs_err"] == 0.0
    assert r["cell_wall_s"] > 0


def test_segfaulting_worker_is_recorded_as_a_crash(plugin: str, tmp_path: Path) -> None:
    spec = CellSpec("fake_fast", "segv", plugins=(plugin,), timing=FAST)
    r = run_worker(spec, tmp_path, timeout_s=120)
    assert r["status"] == "crash"
    assert "code -11" in r["error"]


def test_worker_past_its_timeout_is_killed_and_recorded(plugin: str, tmp_path: Path) -> None:
    spec = CellSpec("fake_fast", "hang", plugins=(plugin,), timing=FAST)
    r = run_worker(spec, tmp_path, timeout_s=0.5)
    assert r["status"] == "timeout"


@pytest.mark.slow
def test_command_line_end_to_end(plugin: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    rc = cli.main([
        "--quick", "--workloads", "fake_fast,fake_train", "--compilers", "crashy,wrong,missing,segv",
        "--plugin", plugin, "--json", str(out_json), "--plot", str(out_png), "--repeats", "2",
    ])
    assert rc == 0
    text = capsys.readouterr().out
    data = json.loads(out_json.read_text())
    cells = {(r["workload"], r["compiler"]): r for r in data["results"]}
    assert set(cells) == {(w, c) for w in ("fake_fast", "fake_train")
                          for c in ("eager", "crashy", "wrong", "missing", "segv")}
    assert cells["fake_fast", "eager"]["status"] == "ok"
    assert cells["fake_fast", "crashy"]["status"] == "error"
    assert cells["fake_fast", "wrong"]["status"] == "wrong"
    assert cells["fake_fast", "missing"]["status"] == "unavailable"
    assert cells["fake_fast", "segv"]["status"] == "crash"
    assert cells["fake_train", "eager"]["saved_bytes"] > 0
    assert "WRONG" in text and "n/a" in text
    assert out_png.is_file()


def test_peak_bytes_counts_what_a_call_allocates_above_its_inputs() -> None:
    import torch
    from bench.measure import peak_bytes

    x = torch.randn(256, 256)  # 256 KiB, alive before the call: the baseline

    def step() -> None:
        a = x * 2  # +256 KiB
        b = a.sin()  # +256 KiB: the peak, 512 KiB
        del a
        c = b + 1  # a's memory freed first: back to 512 KiB
        del b, c

    peak = peak_bytes(step, "cpu", lambda: None)
    # plus a few bytes: the Python scalars become 0-d tensors
    assert 2 * 256 * 256 * 4 <= peak < 2 * 256 * 256 * 4 + 1024


def test_vision_rows_are_the_vision_zoo() -> None:
    from bench.registry import WORKLOADS, load_builtins
    from bench.workloads_vision import vision_names

    load_builtins()
    names = vision_names()
    assert len(names) == 31 and ("timm_deit_train", True) in names and ("tv_vit", False) in names
    for name, training in names:
        w = WORKLOADS["vision_" + name]
        assert w.training == training and not w.suite and len(w.requires) == 1
    assert cli._names("vision", WORKLOADS, "workload") == ["vision_" + n for n, _ in names]
