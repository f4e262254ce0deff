"""ember's differential fuzzer: ``python tools/fuzz.py --help``.

A thin launcher for the ``tools/fuzz`` package (which a directory named like
this file shadows on import, so the package is what ``import fuzz`` finds).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz.cli import main

if __name__ == "__main__":
    sys.exit(main())
