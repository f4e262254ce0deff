"""``python -m ember.minifier``: minify a dumped graph, or run a repro.

    python -m ember.minifier minify <graph_dir> --backend inductor [--accuracy] [--out DIR]
    python -m ember.minifier run <repro_dir>

``minify`` exits 0 after writing a repro, 1 when no failure reproduced (nothing
written), 2 on bad input. ``run`` exits like ``repro.py``: 1 reproduced,
3 failed differently, 0 no failure.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ember.minifier.artifacts import failure_from_json, read_dump, write_repro
from ember.minifier.driver import minify
from ember.minifier.errors import MinifierError, NoFailureReproduced
from ember.minifier.failure import BackendError, Failure, Inaccuracy


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ember.minifier", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("minify", help="shrink a dumped graph on which a backend fails")
    m.add_argument("graph_dir", type=Path)
    m.add_argument("--backend", help="ember.backends name or module:attr "
                   "(default: the one recorded in failure.json)")
    m.add_argument("--accuracy", action="store_true",
                   help="minify an accuracy failure (vs float64 eager) instead of an error")
    m.add_argument("--tol", type=float, default=1e-5, help="accuracy tolerance (relative RMS)")
    m.add_argument("--out", type=Path, help="repro directory (default: <graph_dir>/minified)")
    m.add_argument("--time-budget", type=float, default=300.0, help="seconds (default 300)")
    m.add_argument("--isolate", action="store_true",
                   help="run every check in a subprocess (backends that crash the process)")
    m.add_argument("--quiet", action="store_true", help="no progress lines")
    r = sub.add_parser("run", help="run a repro directory's repro.py in a fresh process")
    r.add_argument("repro_dir", type=Path)
    return p


def _failure(args: argparse.Namespace, record: dict[str, Any], graph_dir: Path) -> Failure:
    if args.accuracy:
        backend = args.backend or (record.get("backend") or {}).get("name")
        if not backend:
            raise SystemExit("error: no backend recorded in failure.json; pass --backend NAME")
        return Inaccuracy(backend, tol=args.tol)
    if args.backend:
        return BackendError(args.backend)
    return failure_from_json(graph_dir, record)


def cmd_minify(args: argparse.Namespace) -> int:
    dump = read_dump(args.graph_dir)
    failure = _failure(args, dump.record, args.graph_dir)
    try:
        result = minify(dump.gm, dump.inputs, failure, time_budget=args.time_budget,
                        progress=not args.quiet, isolate=args.isolate)
    except NoFailureReproduced as exc:
        print(f"no failure reproduced: {exc}")
        return 1
    out = args.out or args.graph_dir / "minified"
    path = write_repro(result, out)
    print(result.summary())
    print(f"wrote {path}" + ("; run `python -m ember.minifier run " + str(path) + "`"
                            if (path / "repro.py").exists() else " (no repro.py: backend has no name)"))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    script = args.repro_dir / "repro.py"
    if not script.exists():
        print(f"error: {script} does not exist; is {args.repro_dir} a repro directory?")
        return 2
    return subprocess.run([sys.executable, str(script)], check=False).returncode


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "minify":
            return cmd_minify(args)
        return cmd_run(args)
    except MinifierError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
