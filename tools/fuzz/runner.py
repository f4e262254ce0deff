"""Fuzz runs: programs checked in worker processes, so a crash or hang costs one program.

A worker (``fuzz.py worker``) reads seeds on stdin and writes one JSON line
when it starts a program and one with its outcome. The parent reads with a
per-program timeout; a worker that dies or hangs is recorded as ``crash`` /
``timeout`` for the program in flight and replaced by a fresh one for the
remaining seeds. Failing programs are written to ``out_dir`` as JSON (replay
with ``fuzz.py replay``) and, with ``shrink``, as a minimal standalone
reproducer next to it.
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .backends import get_backend
from .generate import generate
from .oracle import Outcome, check
from .program import Program
from .repro import reproducer
from .shrink import shrink
from .train_gen import TrainProgram, generate_train
from .train_oracle import check_train
from .train_repro import reproducer_train, shrink_train

LAUNCHER = Path(__file__).resolve().parent.parent / "fuzz.py"


def check_one(program: Program | TrainProgram, backend_name: str, out_dir: str | None,
              do_shrink: bool, resize: bool = False) -> dict[str, Any]:
    backend = get_backend(backend_name)
    start = time.perf_counter()
    fallbacks: list[str] = []
    try:
        if isinstance(program, TrainProgram):
            outcome, fallbacks = check_train(program, backend)
        else:
            outcome = check(program, backend, resize=resize)
    finally:
        backend.reset()
    size = len(program.blocks) if isinstance(program, TrainProgram) else len(program.body)
    record: dict[str, Any] = {
        "seed": program.seed, "backend": backend_name, "status": outcome.status,
        "kind": outcome.kind, "signature": outcome.signature, "detail": outcome.detail,
        "seconds": round(time.perf_counter() - start, 3), "statements": size,
    }
    if fallbacks:  # graphs ember ran eagerly after an internal error it caught (logged)
        record["fallbacks"] = len(fallbacks)
        record["fallback"] = fallbacks[0][:300]
    if outcome.status in ("wrong", "error") and out_dir is not None:
        record["files"] = save_failure(program, backend_name, outcome, out_dir, do_shrink, resize)
    return record


def save_failure(program: Program | TrainProgram, backend_name: str, outcome: Outcome,
                 out_dir: str, do_shrink: bool, resize: bool = False) -> list[str]:
    folder = Path(out_dir) / backend_name
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"seed{program.seed}"
    files = [str(stem.with_suffix(".json"))]
    payload = {"backend": backend_name, "program": program.to_json(),
               "outcome": {"status": outcome.status, "kind": outcome.kind,
                           "detail": outcome.detail}, "resize": resize}
    Path(files[0]).write_text(json.dumps(payload, indent=1))
    path = stem.parent / f"{stem.name}_repro.py"
    if isinstance(program, TrainProgram):
        small_train = (shrink_train(program, get_backend(backend_name), outcome) if do_shrink
                       else program)
        path.write_text(reproducer_train(small_train, backend_name, outcome))
        files.append(str(path))
    elif do_shrink:
        small = shrink(program, get_backend(backend_name), outcome, resize=resize)
        path.write_text(reproducer(small, backend_name, outcome, resize))
        files.append(str(path))
    return files


def worker_main(backend_name: str, out_dir: str | None, do_shrink: bool,
                resize: bool = False, train: bool = False) -> int:
    """Read seeds from stdin, write ``{"start": seed}`` and then the record for each."""
    logging.disable(logging.CRITICAL)
    for line in sys.stdin:
        if not line.strip():
            continue
        seed = int(line)
        print(json.dumps({"start": seed}), flush=True)
        try:
            program = generate_train(seed) if train else generate(seed)
            record = check_one(program, backend_name, out_dir, do_shrink, resize)
        except Exception as e:  # the fuzzer itself failed: report, keep going
            record = {"seed": seed, "backend": backend_name, "status": "fuzzer-error",
                      "kind": type(e).__name__, "signature": f"fuzzer-error:{type(e).__name__}",
                      "detail": str(e)[:500]}
        print(json.dumps(record), flush=True)
    return 0


def _worker_records(backend_name: str, seeds: list[int], out_dir: str | None,
                    do_shrink: bool, timeout: float, resize: bool = False,
                    train: bool = False) -> Iterator[dict[str, Any]]:
    pending = list(seeds)
    while pending:
        cmd = [sys.executable, str(LAUNCHER), "worker", "--backend", backend_name]
        if out_dir:
            cmd += ["--out-dir", out_dir]
        if do_shrink:
            cmd.append("--shrink")
        if resize:
            cmd.append("--resize")
        if train:
            cmd.append("--train")
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=os.environ.copy())
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(f"{s}\n" for s in pending))
        proc.stdin.close()
        in_flight: int | None = None
        started = time.monotonic()
        while True:
            limit = timeout * (4 if do_shrink else 1)
            wait = max(0.1, limit - (time.monotonic() - started)) if in_flight is not None else 60
            ready, _, _ = select.select([proc.stdout], [], [], wait)
            if not ready:
                if in_flight is None:
                    continue
                proc.kill()
                proc.wait()
                yield _lost(in_flight, backend_name, "timeout", f"no result after {limit:.0f} s")
                pending = pending[pending.index(in_flight) + 1:]
                break
            line = proc.stdout.readline()
            if not line:
                code = proc.wait()
                if in_flight is not None:
                    yield _lost(in_flight, backend_name, "crash", f"worker exited with {code}")
                    pending = pending[pending.index(in_flight) + 1:]
                else:
                    pending = []
                break
            msg = json.loads(line)
            if "start" in msg:
                in_flight, started = msg["start"], time.monotonic()
                continue
            in_flight = None
            yield msg
        if not pending:
            proc.wait()


def _lost(seed: int, backend_name: str, kind: str, detail: str) -> dict[str, Any]:
    return {"seed": seed, "backend": backend_name, "status": "error", "kind": kind,
            "signature": f"error:{kind}", "detail": detail, "seconds": None}


def run(backends: list[str], seeds: list[int], *, jobs: int = 1, timeout: float = 300.0,
        out_dir: str | None = None, do_shrink: bool = False,
        progress: bool = True, resize: bool = False, train: bool = False) -> list[dict[str, Any]]:
    """Check every seed under every backend; the records, in no particular order."""
    records: list[dict[str, Any]] = []
    lock = threading.Lock()
    for backend_name in backends:
        parts = [seeds[k::jobs] for k in range(jobs)]
        done = Counter[str]()

        def drive(part: list[int], name: str = backend_name, done: Counter[str] = done) -> None:
            for rec in _worker_records(name, part, out_dir, do_shrink, timeout, resize, train):
                with lock:
                    records.append(rec)
                    done[rec["status"]] += 1
                    n = sum(done.values())
                    if progress and (n % 50 == 0 or rec["status"] in ("wrong", "error")):
                        extra = "" if rec["status"] == "ok" else (
                            f"  seed {rec['seed']}: {rec['signature']}: {rec['detail'][:160]}")
                        print(f"[fuzz] {name}: {n}/{len(seeds)} {dict(done)}{extra}",
                              file=sys.stderr, flush=True)

        threads = [threading.Thread(target=drive, args=(p,)) for p in parts if p]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return records


def summary_table(records: list[dict[str, Any]]) -> str:
    """Markdown: per backend, programs / ok / wrong / errors (rate) / invalid."""
    by: dict[str, Counter[str]] = {}
    for r in records:
        by.setdefault(r["backend"], Counter())[r["status"]] += 1
    caught: Counter[str] = Counter(r["backend"] for r in records if r.get("fallbacks"))
    lines = ["| backend | programs | ok | WRONG (silent) | errors | error rate | eager-invalid |"
             " ran a graph eagerly (caught, logged) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, c in by.items():
        n = sum(c.values())
        valid = n - c["invalid"]
        errors = c["error"] + c["fuzzer-error"]
        rate = f"{100.0 * errors / valid:.2f}%" if valid else "-"
        lines.append(f"| {name} | {n} | {c['ok']} | {c['wrong']} | {errors} | {rate} | "
                     f"{c['invalid']} | {caught[name]} |")
    return "\n".join(lines)


def classes_table(records: list[dict[str, Any]]) -> str:
    """Markdown: failure signatures per backend with one example seed each."""
    seen: dict[tuple[str, str], list[int]] = {}
    detail: dict[tuple[str, str], str] = {}
    for r in records:
        if r["status"] in ("ok", "invalid"):
            continue
        key = (r["backend"], r["signature"])
        seen.setdefault(key, []).append(r["seed"])
        detail.setdefault(key, r["detail"])
    lines = ["| backend | class | programs | example seed | detail |", "|---|---|---|---|---|"]
    for (b, sig), s in sorted(seen.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
        lines.append(f"| {b} | {sig} | {len(s)} | {min(s)} | {detail[(b, sig)][:120]} |")
    return "\n".join(lines)
