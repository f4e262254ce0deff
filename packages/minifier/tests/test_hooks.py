"""The repro hook the frontends call: levels, environment, what gets written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import minifier_planted as planted
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from ember.minifier.artifacts import read_dump
from ember.minifier.cli import main as cli_main
from ember.minifier.errors import InaccurateBackend
from ember.minifier.hooks import materialize, maybe_wrap_backend, options_from_env, wrap_backend
from ember.minifier.state import compute_nodes

aten = torch.ops.aten


def test_env_parsing() -> None:
    assert options_from_env({}) is None
    opts = options_from_env({"EMBER_REPRO_AFTER": "aot", "EMBER_REPRO_LEVEL": "4",
                             "EMBER_REPRO_DIR": "/tmp/x"})
    assert opts is not None and (opts.after, opts.level, str(opts.repro_dir)) == ("aot", 4, "/tmp/x")
    with pytest.warns(UserWarning, match="EMBER_REPRO_AFTER='inductor' is not one of dynamo, aot"):
        assert options_from_env({"EMBER_REPRO_AFTER": "inductor"}) is None
    with pytest.warns(UserWarning, match="EMBER_REPRO_LEVEL='9' is not 1..4; using 2"):
        opts = options_from_env({"EMBER_REPRO_AFTER": "dynamo", "EMBER_REPRO_LEVEL": "9"})
    assert opts is not None and opts.level == 2


def test_maybe_wrap_only_wraps_the_named_stage() -> None:
    fn = planted.healthy
    assert maybe_wrap_backend(fn, after="aot", environ={}) is fn
    assert maybe_wrap_backend(fn, after="aot", environ={"EMBER_REPRO_AFTER": "dynamo"}) is fn
    assert maybe_wrap_backend(fn, after="dynamo", environ={"EMBER_REPRO_AFTER": "dynamo"}) is not fn


def test_level_1_dumps_the_failing_graph_and_reraises(tmp_path: Path) -> None:
    gm, inputs = planted.small_graph()
    compiler = wrap_backend(planted.raises_on_sigmoid, after="aot", level=1, repro_dir=tmp_path)
    with pytest.raises(NotImplementedError, match="planted bug") as info:
        compiler(gm, inputs)
    note = "\n".join(getattr(info.value, "__notes__", []))
    assert f"dumped the failing graph to {tmp_path / 'aot_graph_0' / 'failing'}" in note
    dump = read_dump(tmp_path / "aot_graph_0" / "failing")
    assert len(compute_nodes(dump.gm.graph)) == 11
    assert dump.record["kind"] == "error" and dump.record["after"] == "aot"
    assert not (tmp_path / "aot_graph_0" / "minified").exists()


def test_level_2_minifies_run_time_errors(tmp_path: Path) -> None:
    gm, inputs = planted.small_graph()
    compiler = wrap_backend(planted.fails_on_add_relu, after="dynamo", level=2, repro_dir=tmp_path)
    compiled = compiler(gm, inputs)  # compiles fine, fails when run
    with pytest.raises(RuntimeError, match="planted bug") as info:
        compiled(*inputs)
    note = "\n".join(getattr(info.value, "__notes__", []))
    assert "minified 11 -> 2 nodes into" in note
    repro = tmp_path / "dynamo_graph_0" / "minified"
    assert (repro / "repro.py").exists()
    targets = [n.target for n in compute_nodes(read_dump(repro).gm.graph)]
    assert targets == [aten.add.Tensor, aten.relu.default]
    record = json.loads((repro / "failure.json").read_text())
    assert record["signature"]["phase"] == "run" and record["after"] == "dynamo"


def test_level_3_dumps_every_graph(tmp_path: Path) -> None:
    gm, inputs = planted.small_graph()
    compiler = wrap_backend(planted.healthy, after="dynamo", level=3, repro_dir=tmp_path)
    out = compiler(gm, inputs)(*inputs)
    torch.testing.assert_close(out, gm(*inputs))
    assert (tmp_path / "dynamo_graph_0" / "graph" / "inputs.json").exists()
    assert not (tmp_path / "dynamo_graph_0" / "failing").exists()


@pytest.mark.slow
def test_level_3_dump_survives_a_crash_and_minifies_isolated(tmp_path: Path) -> None:
    # the compiler kills the process: only the dump written before compiling survives
    gm, inputs = planted.small_graph()
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import minifier_planted as p\n"
        "from ember.minifier import wrap_backend\n"
        "gm, inputs = p.small_graph()\n"
        "wrap_backend(p.crashes_on_sigmoid, after='aot', level=3, repro_dir=sys.argv[2])(gm, inputs)\n"
    )
    here = str(Path(planted.__file__).parent)
    proc = subprocess.run([sys.executable, "-c", script, here, str(tmp_path)], timeout=300)
    assert proc.returncode == -9
    dump = tmp_path / "aot_graph_0" / "graph"
    assert cli_main(["minify", str(dump), "--isolate", "--quiet"]) == 0
    record = json.loads((dump / "minified" / "failure.json").read_text())
    assert record["signature"]["message"] == "killed by SIGKILL" and record["final_nodes"] == 1


def test_level_4_catches_inaccuracy(tmp_path: Path) -> None:
    x, y = torch.randn(16, 16), torch.randn(16, 16)
    gm = planted.make_fx(lambda x, y: torch.relu(x * y).sum(0) + y.cos())(x, y)
    compiler = wrap_backend(planted.inaccurate_mul, after="aot", level=4, repro_dir=tmp_path)
    with pytest.raises(InaccurateBackend, match="is inaccurate: output 0: relative RMS error"):
        compiler(gm, [x, y])
    repro = tmp_path / "aot_graph_0" / "minified"
    assert [n.target for n in compute_nodes(read_dump(repro).gm.graph)] == [aten.mul.Tensor]
    # a healthy backend passes level 4 untouched
    ok = wrap_backend(planted.healthy, after="aot", level=4, repro_dir=tmp_path / "ok")
    torch.testing.assert_close(ok(gm, [x, y])(x, y), gm(x, y))
    assert not (tmp_path / "ok" / "aot_graph_0" / "failing").exists()  # level 4 includes 3: graph/ only


def test_fake_example_inputs_become_real() -> None:
    with FakeTensorMode():
        fake = torch.empty(3, 4).t()
    real = materialize(fake, 0)
    assert type(real) is torch.Tensor and real.shape == (4, 3) and real.stride() == (1, 4)
    assert torch.equal(real, materialize(fake, 0))
