"""Benchmark ember vs torch.compile vs eager: ``python tools/bench.py --help``.

A thin launcher for the ``tools/bench`` package (which a directory named like
this file shadows on import, so the package is what ``import bench`` finds).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
