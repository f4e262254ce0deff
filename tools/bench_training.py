"""Training-step benchmark: eager, ember and torch.compile side by side (issue 18).

    .venv/bin/python tools/bench_training.py [--steps 30] [--rows optimizer,model,model+optimizer,ddp,fsdp2,tp]
                                              [--model mlp|blog]

Rows, on a 6-layer MLP (width 512), or with ``--model blog`` on the seed blog's
ViT+GPT-2 captioner (``integration_tests/models/zoo.py``, small config, captions
padded to 16, the blog's loop: ``model(**batch).loss``), trained with Adam
(foreach, the default):

- ``optimizer``: ``optimizer.step`` alone, gradients fixed;
- ``model``: the model compiled, the optimizer eager;
- ``model+optimizer``: both compiled (the seed blog's step 3);
- ``ddp``: two gloo processes, ``compile(DDP(model))``, SGD eager (the MLP under a
  forward in user code, so that torch.compile, which starts tracing only in user
  frames, has a frame to compile after DDP's forward breaks; each process gets
  ``cpu_count // 2`` OpenMP threads, as torchrun gives);
- ``fsdp2``: two gloo processes, a GPT of 4 blocks sharded with FSDP2 (every block, then
  the root) and compiled whole, Adam eager.
- ``tp``: two gloo processes, the same GPT with each block's MLP tensor-parallel
  (``parallelize_module``, ``ColwiseParallel``/``RowwiseParallel``: DTensor parameters,
  all-reduces in the graphs, ADR 0069), compiled whole, Adam eager.

The distributed rows (``tools/bench_distributed.py``) build every column's model in the
same two processes and time them step by step in turn, like the other rows; their
``cpu`` is the whole process's CPU time of a step (gloo's threads included).

Columns: ``eager``, ``ember`` (backend ``inductor``) and ``torch.compile``
(inductor). The columns of a row are timed step by step in turn (a drifting load
weighs on each alike). Each cell reports the median step time after warm-up, the speedup
over eager, the median CPU time of a step (``cpu``, ms: every thread of the process,
OpenMP spin-waiting included; with ``OMP_NUM_THREADS=1`` the figure least moved by
other jobs on the machine), and how many graphs the backend compiled (for DDP: the graphs one
step runs, the pieces a forward is split into at gradient-bucket boundaries).
The ``optimizer`` row also gives kernels per step: the C++ kernels in the
compiled step's code (ember: its wrapper's kernel calls; torch.compile: the
kernels inductor generated), for eager the ATen calls one step makes. Every
cell also checks its result against eager's (parameters; for the blog model's
training rows the losses, within 1e-3 relative: see ``main``) and says ``WRONG``
if they differ. Timings depend on the machine's
load: note ``uptime`` beside them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
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


class Blog:
    """The seed blog's captioner and its loop's batches (``zoo.caption_batch``)."""

    def __init__(self) -> None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration_tests"))
        from models import zoo

        self.zoo = zoo
        self.model: nn.Module = zoo.build("vit_gpt2_train").model

    def batch(self, i: int) -> dict[str, torch.Tensor]:
        batch: dict[str, torch.Tensor] = self.zoo.caption_batch(length=16, seed=i % 4)
        return batch


class KernelCount:
    """Kernels in the compiled optimizer step (see the module docstring)."""

    def __init__(self, column: str) -> None:
        self.column = column
        self.messages: list[str] = []
        self.handler: logging.Handler | None = None
        self.before = 0

    def __enter__(self) -> KernelCount:
        if self.column == "ember":
            outer = self

            class Keep(logging.Handler):
                def emit(self, record: logging.LogRecord) -> None:
                    outer.messages.append(record.getMessage())

            self.handler = Keep(logging.INFO)
            log = logging.getLogger("ember.output_code")
            log.addHandler(self.handler)
            self.level = log.level
            log.setLevel(logging.INFO)
        elif self.column == "torch.compile":
            from torch._inductor import metrics

            self.before = metrics.generated_kernel_count
        return self

    def __exit__(self, *exc: object) -> None:
        if self.handler is not None:
            log = logging.getLogger("ember.output_code")
            log.removeHandler(self.handler)
            log.setLevel(self.level)

    def kernels(self) -> int | None:
        if self.column == "ember":
            wrappers = [m.split("kernels:")[0] for m in self.messages if "kernels:" in m]
            return len(re.findall(r"^\s+kernel\d+\(", wrappers[-1], flags=re.M)) if wrappers else None
        if self.column == "torch.compile":
            from torch._inductor import metrics

            return int(metrics.generated_kernel_count - self.before)
        return None


def eager_aten_calls(step: Callable[[], Any]) -> int:
    """ATen calls one eager step makes (top-level ``aten::`` profiler events)."""
    with torch.profiler.profile() as prof:
        step()
    return sum(
        1 for e in prof.events()
        if e.name.startswith("aten::") and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))
    )


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


class Cell:
    """One (row, column) training setup: its model, optimizer and ``step``."""

    def __init__(self, row: str, column: str, which: str) -> None:
        self.row, self.column = row, column
        self.blog = Blog() if which == "blog" else None
        self.model = self.blog.model if self.blog is not None else mlp()
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        compile_fn, self.counter = compiler(column)
        gen = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(BATCH, WIDTH, generator=gen), torch.randn(BATCH, 1, generator=gen)
        self.forward: Any = self.model
        if row in ("model", "model+optimizer"):
            self.forward = compile_fn(self.model)
        if row in ("optimizer", "model+optimizer"):
            self.opt.step = compile_fn(self.opt.step)
        if row == "optimizer":
            for p in self.model.parameters():
                p.grad = torch.randn(p.shape, generator=gen) * 1e-2
        self.count = 0
        self.losses: list[float] = []
        self.times: list[float] = []
        self.cpu_times: list[float] = []
        self.kernels: int | None = None

    def step(self) -> float:
        self.count += 1
        if self.row == "optimizer":
            self.opt.step()
            return 0.0
        self.opt.zero_grad()
        if self.blog is not None:
            loss = self.forward(**self.blog.batch(self.count)).loss
        else:
            loss = nn.functional.mse_loss(self.forward(self.x), self.y)
        loss.backward()
        self.opt.step()
        return float(loss.item())

    def warm_up(self, steps: int) -> None:
        """The first steps (compiles included), untimed; counts the step's kernels."""
        with KernelCount(self.column) as kernels:
            for _ in range(steps):
                self.losses.append(self.step())
        self.kernels = kernels.kernels()

    def timed_step(self) -> None:
        start, cpu = time.perf_counter(), time.process_time()
        self.losses.append(self.step())
        self.times.append(time.perf_counter() - start)
        self.cpu_times.append(time.process_time() - cpu)

    def result(self) -> dict[str, Any]:
        params = torch.cat([p.detach().flatten() for p in self.model.parameters()])
        kernels = self.kernels
        if self.row == "optimizer" and self.column == "eager":
            kernels = eager_aten_calls(self.step)  # one more step, after the parameters were taken
        return {
            "seconds": statistics.median(self.times),
            "cpu_seconds": statistics.median(self.cpu_times),
            "graphs": None if self.counter is None else self.counter.graphs,
            "kernels": kernels if self.row == "optimizer" else None,
            "losses": self.losses,
            "params": params,
        }


def run_row(row: str, columns: tuple[str, ...], steps: int, warmup: int, which: str = "mlp") -> dict[str, Any]:
    """Every column's cell, warmed up, then timed step by step in turn (the order rotating),
    so that the load of a shared machine, which drifts, weighs on each column alike."""
    cells = {c: Cell(row, c, which) for c in columns}
    for cell in cells.values():
        cell.warm_up(warmup)
    for i in range(steps):
        k = i % len(columns)
        for c in columns[k:] + columns[:k]:
            cells[c].timed_step()
    return {c: cell.result() for c, cell in cells.items()}


def run_distributed(setup: str, steps: int, warmup: int) -> dict[str, Any]:
    """Two gloo processes, every column in them, interleaved step by step
    (``tools/bench_distributed.py``)."""
    worker = Path(__file__).resolve().with_name("bench_distributed.py")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        # one OpenMP thread per process per core, as torchrun sets it (OMP_NUM_THREADS=1 for
        # 2 processes on 2 cores): more threads than cores make every parallel region of
        # either process wait for the other's spinning threads
        threads = max(1, (os.cpu_count() or 2) // 2)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        for _attempt in range(3):  # another process may hold the port we drew
            port = random.randrange(20000, 40000)
            done = subprocess.run(
                [sys.executable, str(worker), setup, str(port), str(out), str(steps), str(warmup)],
                capture_output=True, text=True, check=False, env=env,
            )
            if done.returncode == 0 or "address already in use" not in done.stderr.lower():
                break
        if done.returncode != 0:
            error = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
            return {c: {"error": error} for c in ("eager", "ember", "torch.compile")}
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rows", default="optimizer,model,model+optimizer,ddp,fsdp2,tp")
    parser.add_argument("--model", choices=("mlp", "blog"), default="mlp",
                        help="the model of the single-process rows (DDP always runs the MLP)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2))))
    columns = ("eager", "ember", "torch.compile")
    print(f"load average: {os.getloadavg()}; torch {torch.__version__}; {torch.get_num_threads()} threads; "
          f"model {args.model}")
    print(f"{'row':18} " + " ".join(f"{c:>42}" for c in columns))
    for row in args.rows.split(","):
        cells = []
        if row in ("ddp", "fsdp2", "tp"):
            results = run_distributed(row, args.steps, args.warmup)
            base = results["eager"].get("seconds")
            for c in columns:
                r = results[c]
                if "error" in r:
                    cells.append(f"error: {r['error'][:22]}")
                    continue
                ok = "" if close(results["eager"]["losses"], r["losses"]) else " WRONG"
                speed = f"{base / r['seconds']:.2f}x" if base else "-"
                graphs = "-" if r["graphs_per_step"] is None else f"{r['graphs_per_step']:g} g/step"
                cells.append(
                    f"{r['seconds'] * 1e3:8.2f} ms {speed:>6} cpu {r['cpu_seconds'] * 1e3:7.2f} {graphs}{ok}"
                )
        else:
            results = run_row(row, columns, args.steps, args.warmup, args.model)
            base = results["eager"]["seconds"]
            for c in columns:
                r = results[c]
                if args.model == "blog" and row != "optimizer":
                    # a transformer trained with Adam (lr 1e-3): a gradient at float noise
                    # level moves a parameter by about lr in either direction, so the
                    # parameters are not comparable after a few steps; the losses are
                    same = close(results["eager"]["losses"], r["losses"], rel=1e-3)
                else:
                    same = torch.allclose(r["params"], results["eager"]["params"], rtol=1e-3, atol=1e-5)
                graphs = "-" if r["graphs"] is None else f"{r['graphs']} g"
                if r["kernels"] is not None:
                    graphs += f" {r['kernels']} {'aten' if c == 'eager' else 'krn'}/step"
                cells.append(
                    f"{r['seconds'] * 1e3:8.2f} ms {base / r['seconds']:5.2f}x "
                    f"cpu {r['cpu_seconds'] * 1e3:7.2f} {graphs}{'' if same else ' WRONG'}"
                )
        print(f"{row:18} " + " ".join(f"{cell:>42}" for cell in cells), flush=True)
    return 0


def close(want: list[float], got: list[float], rel: float = 1e-4) -> bool:
    """Every loss within float tolerance of eager's."""
    return len(want) == len(got) and all(
        abs(a - b) <= rel * max(1.0, abs(a)) for a, b in zip(want, got, strict=True)
    )


if __name__ == "__main__":
    sys.exit(main())
