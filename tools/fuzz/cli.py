"""Command line: ``run``, ``show``, ``replay``, ``shrink`` (and the internal ``worker``).

    python tools/fuzz.py run --backends ember-inductor,torch-inductor --seeds 0:2000 --jobs 2 \\
        --json fuzz.json --out-dir fuzz_failures --shrink
    python tools/fuzz.py show 17                     # the program of seed 17
    python tools/fuzz.py replay fuzz_failures/ember-inductor/seed17.json
    python tools/fuzz.py shrink 17 --backend ember-inductor -o repro.py
    python tools/fuzz.py run --backends ember-inductor --seeds 0:500 --resize   # + grown inputs
    python tools/fuzz.py run --backends ember-inductor,torch-inductor --seeds 0:500 --train
    python tools/fuzz.py show 17 --train             # a training program (train_gen.py)
    python tools/fuzz.py recompiles --backends ember-eager,torch-eager --seeds 0:200
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from .backends import NAMES, get_backend
from .generate import generate
from .oracle import check
from .program import Program
from .recompiles import run_stability, stability_table
from .repro import reproducer
from .runner import classes_table, run, summary_table, worker_main
from .shrink import shrink
from .train_gen import TrainProgram, generate_train
from .train_oracle import check_train


def parse_seeds(text: str) -> list[int]:
    """``0:100`` (a range), ``3,17,42`` (a list) or ``7`` (one)."""
    if ":" in text:
        a, b = text.split(":", 1)
        return list(range(int(a), int(b)))
    return [int(s) for s in text.split(",") if s.strip()]


def _load(path: str) -> tuple[Program, str, bool]:
    """A saved failure: its program, its backend and whether it was found on grown inputs."""
    data = json.loads(Path(path).read_text())
    return Program.from_json(data["program"]), data["backend"], bool(data.get("resize", False))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fuzz.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="check many programs under one or more backends")
    r.add_argument("--backends", default="ember-eager,ember-aot_eager,ember-inductor",
                   help=f"comma-separated, from {', '.join(NAMES)}")
    r.add_argument("--seeds", default="0:100")
    r.add_argument("--jobs", type=int, default=1, help="worker processes per backend")
    r.add_argument("--timeout", type=float, default=300.0, help="seconds per program")
    r.add_argument("--json", help="write every record here")
    r.add_argument("--out-dir", help="write failing programs (and reproducers) here")
    r.add_argument("--shrink", action="store_true", help="shrink failures into reproducers")
    r.add_argument("--resize", action="store_true",
                   help="two more calls per program, on inputs whose sizes above 1 grew by 2 "
                        "and by 3 (recompiles, symbolic sizes)")
    r.add_argument("--train", action="store_true",
                   help="training programs: a random module trained (forward, backward, SGD "
                        "step) at three growing lengths, gradients compared (train_gen.py)")
    s = sub.add_parser("show", help="print the program of a seed")
    s.add_argument("seed", type=int)
    s.add_argument("--train", action="store_true", help="the training program of the seed")
    p = sub.add_parser("replay", help="check a saved failing program again")
    p.add_argument("file")
    p.add_argument("--backend", help="another backend than the one saved")
    k = sub.add_parser("shrink", help="shrink a seed or a saved program into a reproducer")
    k.add_argument("what", help="a seed, or a saved program's JSON file")
    k.add_argument("--backend", default=None)
    k.add_argument("--resize", action="store_true", help="check on grown inputs too (as run --resize)")
    k.add_argument("-o", "--output", help="write the reproducer here (default: stdout)")
    c = sub.add_parser("recompiles", help="count graphs compiled as sizes keep growing")
    c.add_argument("--backends", default="ember-eager,torch-eager")
    c.add_argument("--seeds", default="0:100")
    c.add_argument("--json", help="write every record here")
    w = sub.add_parser("worker", help=argparse.SUPPRESS)
    w.add_argument("--backend", required=True)
    w.add_argument("--out-dir")
    w.add_argument("--shrink", action="store_true")
    w.add_argument("--resize", action="store_true")
    w.add_argument("--train", action="store_true")
    args = ap.parse_args(argv)

    if args.cmd == "worker":
        return worker_main(args.backend, args.out_dir, args.shrink, args.resize, args.train)
    previous = logging.root.manager.disable
    try:
        return _command(args)
    finally:
        logging.disable(previous)  # main() may run inside another program (tests)


def _command(args: argparse.Namespace) -> int:
    if args.cmd == "run":
        records = run(args.backends.split(","), parse_seeds(args.seeds), jobs=args.jobs,
                      timeout=args.timeout, out_dir=args.out_dir, do_shrink=args.shrink,
                      resize=args.resize, train=args.train)
        if args.json:
            Path(args.json).write_text(json.dumps(records, indent=0))
        print(summary_table(records))
        print()
        print(classes_table(records))
        return 0
    if args.cmd == "recompiles":
        logging.getLogger("torch").setLevel(logging.CRITICAL)  # fake-tensor tracebacks
        results = run_stability(args.backends.split(","), parse_seeds(args.seeds))
        if args.json:
            Path(args.json).write_text(json.dumps(
                {b: [vars(r) for r in rows] for b, rows in results.items()}, indent=0))
        print(stability_table(results))
        return 0
    if args.cmd == "show":
        print(generate_train(args.seed).source() if args.train else generate(args.seed).source())
        return 0
    if args.cmd == "replay":
        data = json.loads(Path(args.file).read_text())
        if data["program"].get("train"):
            backend_name = args.backend or data["backend"]
            logging.disable(logging.CRITICAL)
            outcome, _ = check_train(TrainProgram.from_json(data["program"]),
                                     get_backend(backend_name))
            print(f"{backend_name}: {outcome.signature} {outcome.detail}")
            return 0 if outcome.status == "ok" else 1
        program, backend_name, resize = _load(args.file)
        backend_name = args.backend or backend_name
        logging.disable(logging.CRITICAL)
        outcome = check(program, get_backend(backend_name), resize=resize)
        print(f"{backend_name}: {outcome.signature} {outcome.detail}")
        return 0 if outcome.status == "ok" else 1
    # shrink
    resize = args.resize
    if args.what.isdigit():
        program, backend_name = generate(int(args.what)), args.backend or "ember-inductor"
    else:
        program, saved, saved_resize = _load(args.what)
        backend_name = args.backend or saved
        resize = resize or saved_resize
    backend = get_backend(backend_name)
    logging.disable(logging.CRITICAL)
    outcome = check(program, backend, resize=resize)
    backend.reset()
    if outcome.status == "ok":
        print(f"{backend_name}: the program passes; nothing to shrink", file=sys.stderr)
        return 1
    small = shrink(program, backend, outcome, resize=resize)
    text = reproducer(small, backend_name, outcome, resize)
    if args.output:
        Path(args.output).write_text(text)
        print(f"{outcome.signature}: {len(program.body)} -> {len(small.body)} statements, "
              f"written to {args.output}", file=sys.stderr)
    else:
        print(text)
    return 0
