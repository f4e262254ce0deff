"""Running a distributed worker script (``*_worker.py``) from a test, on a free port.

Each worker takes its options, then ``PORT OUT.json``, then more options, spawns its gloo
processes and writes its results to ``OUT.json``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def run_worker(
    worker: Path, tmp_path: Path, head: Sequence[str], tail: Sequence[str] = (),
    out_name: str = "out.json", one_thread: bool = True,
) -> dict[str, Any]:
    """``python worker HEAD... PORT OUT TAIL...`` with its own cache directory; the JSON it
    wrote. A port another process took meanwhile is drawn again (three tries)."""
    out = tmp_path / out_name
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "cache"))
    if one_thread:
        env["OMP_NUM_THREADS"] = "1"
    for _attempt in range(3):
        port = random.randrange(20000, 40000)
        done = subprocess.run(
            [sys.executable, str(worker), *head, str(port), str(out), *tail],
            capture_output=True, text=True, timeout=540, env=env, check=False,
        )
        if done.returncode == 0 or "address already in use" not in done.stderr.lower():
            break
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result
