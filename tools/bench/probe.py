"""Which compilers and workloads can run here, checked in a throwaway process.

Importing an unfinished ember package may fail in any way, even crash; doing it
in a child keeps the runner alive and lets it mark those columns
``unavailable`` without starting a worker per cell.
Run as ``python -m bench.probe DEVICE COMPILER,... [PLUGIN ...]``; prints JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from bench.registry import COMPILERS, WORKLOADS, load_builtins, load_plugins
from bench.worker import first_line, unavailable_reason


def probe(device: str, names: Sequence[str] | None = None) -> dict[str, Any]:
    """{"compilers": {name: reason or None}, "workloads": {name: reason or None}}.

    Only the compilers in ``names`` are checked (default: all); importing
    a compiler stack is what takes the time.
    """
    eager = COMPILERS["eager"]
    compilers = {}
    for name, c in COMPILERS.items():
        if names is not None and name not in names:
            continue
        try:
            compilers[name] = c.available()
        except Exception as exc:
            compilers[name] = f"availability check failed: {first_line(exc)}"
    workloads = {name: unavailable_reason(w, eager, device) for name, w in WORKLOADS.items()}
    return {"compilers": compilers, "workloads": workloads}


def main(argv: list[str]) -> int:
    load_builtins()
    load_plugins(argv[2:])
    print(json.dumps(probe(argv[0], argv[1].split(","))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
