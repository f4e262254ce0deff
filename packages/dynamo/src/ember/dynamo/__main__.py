"""``python -m ember.dynamo report DIR [-o report.html]``: the compile report of a run
made with ``EMBER_COMPILE_DEBUG=1`` (``report.py``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .report import ReportError, write_report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ember.dynamo", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("report", help="one self-contained HTML page for a debug run")
    r.add_argument("dir", help="a run folder (run_<stamp>_<pid>) or the folder holding them "
                               "(default of EMBER_COMPILE_DEBUG_DIR: ./ember_debug)")
    r.add_argument("-o", "--output", help="the HTML file (default: <run>/report.html)")
    args = ap.parse_args(argv)
    try:
        out = write_report(Path(args.dir), Path(args.output) if args.output else None)
    except ReportError as e:
        print(f"ember.dynamo report: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
