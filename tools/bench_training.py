"""Training-step benchmark: eager, ember and torch.compile side by side (issue 18).

    .venv/bin/python tools/bench_training.py [--steps 30] [--rows optimizer,model,model+optimizer,ddp]

Rows, on a 6-layer MLP (width 512) trained with Adam (foreach, the default):

- ``optimizer``: ``optimizer.step`` alone, gradients fixed;
- ``model``: the model compiled, the optimizer eager;
- ``model+optimizer``: both compiled (the seed blog's step 3);
- ``ddp``: two gloo processes, ``compile(DDP(model))``, SGD eager.

Columns: ``eager``, ``ember`` (backend ``inductor``) and ``torch.compile``
(inductor). Each cell reports the median step time after warm-up, the speedup
over eager, and how many graphs the backend compiled (for DDP: graphs per
step, the pieces a forward is split into at gradient-bucket boundaries). Every
cell also checks its result against eager's (losses / parameters, float
tolerance) and says ``WRONG`` if they differ. Timings depend on the machine's
load: note ``uptime`` beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

WIDTH, LAYERS, BATCH = 512, 6, 64


def mlp() -> nn.Module:
    torch.manual_seed(0)
    blocks: list[nn.Module] = []
    for _ in range(LAYERS):
        blocks += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
    return nn.Sequential(*blocks, nn.Linear(WIDTH, 1))


class Counter:
    """A backend wrapper counting the graphs it is handed."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.graphs = inner, 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.graphs += 1
        return self.inner(gm, example_inputs)


def compiler(column: str) -> tuple[Callable[[Any], Any], Counter | None]:
    """``compile(target)`` for a column, and its graph counter."""
    if column == "eager":
        return (lambda target: target), None
    if column == "ember":
        import ember.dynamo

        counter = Counter(ember.dynamo.backends.lookup_backend("inductor"))
        return (lambda target: ember.dynamo.compile(target, backend=counter)), counter
    from torch._inductor.compile_fx import compile_fx

    torch._dynamo.reset()
    counter = Counter(compile_fx)
    return (lambda target: torch.compile(target, backend=counter)), counter


def run_cell(row: str, column: str, steps: int, warmup: int) -> dict[str, Any]:
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    compile_fn, counter = compiler(column)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(BATCH, WIDTH, generator=gen), torch.randn(BATCH, 1, generator=gen)
    forward: Any = model
    if row in ("model", "model+optimizer"):
        forward = compile_fn(model)
    if row in ("optimizer", "model+optimizer"):
        opt.step = compile_fn(opt.step)
    if row == "optimizer":
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=gen) * 1e-2

    def step() -> float:
        if row == "optimizer":
            opt.step()
            return 0.0
        opt.zero_grad()
        loss = nn.functional.mse_loss(forward(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    times, losses = [], []
    for i in range(warmup + steps):
        start = time.perf_counter()
        losses.append(step())
        if i >= warmup:
            times.append(time.perf_counter() - start)
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    return {
        "seconds": statistics.median(times),
        "graphs": None if counter is None else counter.graphs,
        "losses": losses,
        "params": params,
    }


def run_ddp(column: str, steps: int) -> dict[str, Any]:
    """Two gloo processes (``integration_tests/distributed/ddp_worker.py``'s bench mode)."""
    worker = Path(__file__).resolve().parents[1] / "integration_tests" / "distributed" / "ddp_worker.py"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        port = random.randrange(20000, 40000)
        done = subprocess.run(
            [sys.executable, str(worker), "bench", column, str(port), str(out), str(steps)],
            capture_output=True, text=True, check=False,
        )
        if done.returncode != 0:
            return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rows", default="optimizer,model,model+optimizer,ddp")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2))))
    columns = ("eager", "ember", "torch.compile")
    print(f"load average: {os.getloadavg()}; torch {torch.__version__}; {torch.get_num_threads()} threads")
    print(f"{'row':18} " + " ".join(f"{c:>30}" for c in columns))
    for row in args.rows.split(","):
        cells = []
        if row == "ddp":
            results = {c: run_ddp(c, args.steps) for c in columns}
            base = results["eager"].get("seconds")
            for c in columns:
                r = results[c]
                if "error" in r:
                    cells.append(f"error: {r['error'][:22]}")
                    continue
                ok = "" if close(results["eager"]["losses"], r["losses"]) else " WRONG"
                speed = f"{base / r['seconds']:.2f}x" if base else "-"
                graphs = "-" if r["graphs_per_step"] is None else f"{r['graphs_per_step']} g/step"
                cells.append(f"{r['seconds'] * 1e3:8.2f} ms {speed:>6} {graphs}{ok}")
        else:
            results = {c: run_cell(row, c, args.steps, args.warmup) for c in columns}
            base = results["eager"]["seconds"]
            for c in columns:
                r = results[c]
                same = torch.allclose(r["params"], results["eager"]["params"], rtol=1e-3, atol=1e-5)
                graphs = "-" if r["graphs"] is None else f"{r['graphs']} graphs"
                cells.append(
                    f"{r['seconds'] * 1e3:8.2f} ms {base / r['seconds']:5.2f}x {graphs}{'' if same else ' WRONG'}"
                )
        print(f"{row:18} " + " ".join(f"{cell:>30}" for cell in cells), flush=True)
    return 0


def close(want: list[float], got: list[float]) -> bool:
    """Every loss within float tolerance of eager's."""
    return len(want) == len(got) and all(
        abs(a - b) <= 1e-4 * max(1.0, abs(a)) for a, b in zip(want, got, strict=True)
    )


if __name__ == "__main__":
    sys.exit(main())
