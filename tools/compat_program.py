"""The program tools/compat.py runs in each mixed-version virtualenv (outside the repo).

It trains a small model through the whole pipeline (ember.dynamo captures, ember.aotgrad
traces the backward, ember.inductor compiles C++ kernels) at three batch sizes (static,
then automatic dynamic), every output and gradient compared with eager, under
``EMBER_STRICT=1`` so that no stage can fall back to eager unseen; it also writes a
graph IR file and a guard IR file, and reads the ones another environment wrote; a
module compiled by backend name goes through the shared compile cache (``EMBER_CACHE_DIR``),
so a pairing run after another starts from the frames that one stored.

    python compat_program.py OUT_DIR [OTHER_DIR]

Prints one JSON line: the ember versions installed and the graph count.
"""

from __future__ import annotations

import copy
import importlib.metadata as md
import json
import sys
from pathlib import Path

import torch
from torch import nn

import ember.dynamo
import ember.ir as ir
from ember.dynamo.testing import CompileCounterWithBackend

PACKAGES = ("ember-ir", "ember-guards", "ember-dynamo", "ember-aotgrad", "ember-inductor")


def train_and_compare() -> int:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))
    ref = copy.deepcopy(model)
    counter = CompileCounterWithBackend("inductor")
    compiled = ember.dynamo.compile(model, backend=counter)
    for batch in (4, 6, 9):
        x = torch.randn(batch, 8)
        out, expected = compiled(x), ref(x)
        torch.testing.assert_close(out, expected)
        out.square().sum().backward()
        expected.square().sum().backward()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            assert p.grad is not None and q.grad is not None
            torch.testing.assert_close(p.grad, q.grad)
            p.grad = q.grad = None
    return counter.frame_count


def write_files(out: Path) -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    x = torch.randn(4, 8)
    graph = ir.from_fx(torch.fx.symbolic_trace(model), [x])
    ir.save(graph, out / "graph")
    torch.save({"x": x, "y": model(x).detach()}, out / "io.pt")
    # guards without object ids (an id means nothing in another process; ember.dynamo's
    # stored frames name such objects portably and are exercised by warm_start below)
    guards = ir.GuardSet((
        ir.Guard(ir.parse_source("L['x'].size()[0]"), ir.GuardKind.CONSTANT_MATCH, {"value": ir.encode_value(4)}),
        ir.Guard(ir.parse_source("L['cfg']['mode']"), ir.GuardKind.EQUALS_MATCH, {"value": ir.encode_value("fast")}),
        ir.Guard(None, ir.GuardKind.GLOBAL_STATE, ir.global_state_payload()),
    ))
    (out / "guards.json").write_text(guards.dumps())


def read_files(other: Path) -> None:
    import ember.guards

    io = torch.load(other / "io.pt")
    gm = ir.to_fx(ir.load(other / "graph"))
    torch.testing.assert_close(gm(io["x"]), io["y"])
    guards = ir.GuardSet.loads((other / "guards.json").read_text(), file=str(other / "guards.json"))
    frame = {"x": io["x"], "cfg": {"mode": "fast"}}
    check = ember.guards.compile(guards, frame, {})
    assert check({"x": torch.randn(4, 8), "cfg": {"mode": "fast"}}, {})
    assert not check({"x": torch.randn(5, 8), "cfg": {"mode": "fast"}}, {})
    assert not check({"x": torch.randn(4, 8), "cfg": {"mode": "slow"}}, {})
    with torch.no_grad():
        assert not check({"x": torch.randn(4, 8), "cfg": {"mode": "fast"}}, {})


def warm_start() -> bool:
    """A module compiled by backend name, its frame stored in (or read from) the shared
    ``EMBER_CACHE_DIR``; True where this process captured nothing (the frame another
    environment stored was bound and run)."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 12), nn.Tanh(), nn.Linear(12, 3))
    ref = copy.deepcopy(model)
    x = torch.randn(4, 8)
    out = ember.dynamo.compile(model, backend="inductor")(x)
    expected = ref(x)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    return "ember.dynamo.symbolic_convert" not in sys.modules


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    reused = warm_start()  # first: before anything else imports the bytecode interpreter
    graphs = train_and_compare()
    write_files(out)
    if len(sys.argv) > 2:
        read_files(Path(sys.argv[2]))
    print(json.dumps({"versions": {p: md.version(p) for p in PACKAGES}, "graphs": graphs,
                      "read_other": len(sys.argv) > 2, "stored_frame_reused": reused}))


if __name__ == "__main__":
    main()
