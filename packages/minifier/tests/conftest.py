"""Put this directory on sys.path so `minifier_planted` (backends with planted bugs) is
importable here and in the fresh processes that run written repros."""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
