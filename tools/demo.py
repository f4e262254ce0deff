"""The README's demo: ember compiling a model, next to eager and torch.compile.

1. Compile: a small built-in model compiled with the best installed ember
   backend (inductor, else aot_eager, else eager), printing graphs and breaks,
   cold compile time and speedup over eager next to torch.compile's. This runs
   the benchmark tool's machinery (tools/bench).
2. Contract: the model's graph is saved as an ember.ir file, loaded in a fresh
   Python process that imports nothing but torch and ember.ir, run, and checked
   against the original.

Run it with ``bash tools/setup.sh`` (which sets up the environment first) or
``.venv/bin/python tools/demo.py``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent

_LOADER = """
import sys, torch
import ember.ir as ir
graph = ir.load(sys.argv[1])
inputs = torch.load(sys.argv[2])
gm = ir.to_fx(graph)
out = gm(*inputs)
out = out[0] if isinstance(out, (tuple, list)) else out
torch.save(out, sys.argv[3])
print(f"  fresh process: loaded {len(graph.nodes)} nodes ({graph.dialect} dialect), ran the graph")
"""


class TinyBlock(torch.nn.Module):
    """A pre-norm MLP block with a residual: enough structure to be a real graph."""

    def __init__(self, d: int = 64) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.up(self.norm(x)))
        return x + self.down(h)


def demo_contract() -> bool:
    import ember.ir as ir

    print("== ember.ir: save a graph, load it in a fresh process, run it ==")
    torch.manual_seed(0)
    model = TinyBlock().eval()
    x = torch.randn(8, 64)
    gm = torch.fx.symbolic_trace(model)
    graph = ir.from_fx(gm, [x])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tiny_block"
        t0 = time.perf_counter()
        ir.save(graph, path)
        dt = (time.perf_counter() - t0) * 1e3
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size
        print(f"  saved {len(graph.nodes)} nodes to {path.name} ({size / 1024:.1f} KiB) in {dt:.1f} ms")
        torch.save([x], Path(tmp) / "inputs.pt")
        out_file = Path(tmp) / "out.pt"
        proc = subprocess.run(
            [sys.executable, "-c", _LOADER, str(path), str(Path(tmp) / "inputs.pt"), str(out_file)],
            capture_output=True,
            text=True,
        )
        print(proc.stdout.rstrip())
        if proc.returncode != 0:
            print(proc.stderr)
            return False
        got = torch.load(out_file)
    with torch.no_grad():
        want = model(x)
    err = (got - want).abs().max().item()
    ok = torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    print(f"  matches eager: {ok} (max abs error {err:.2e})")
    return ok


def demo_compile() -> bool | None:
    """Runs the benchmark tool's demo when it and ember.dynamo are available."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from bench.demo import run_demo  # type: ignore[import-not-found]
    except ImportError as exc:
        print(f"(compile demo unavailable: {exc})")
        return None
    return bool(run_demo())


def main() -> int:
    results = [demo_compile(), demo_contract()]
    return 0 if all(r is not False for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
