"""Run a seed example in a fresh interpreter: for examples that set environment
variables ember reads once (``EMBER_LOGS`` at import, ``EMBER_COMPILE_DEBUG`` /
``EMBER_REPRO_*`` / ``EMBER_DEBUG_FUNCTION`` when a callable is compiled).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def run_example(source: str, tmp_path: Path, env: dict[str, str] | None = None,
                timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """Run a seed example as a script in a fresh interpreter, in ``tmp_path``.

    ``env`` is added to a copy of this process's environment (with ``EMBER_*``
    log/debug/repro variables removed first, so the example sees only its own).
    Returns the finished process; a non-zero exit fails the test with its output.
    """
    script = tmp_path / "example.py"
    script.write_text(textwrap.dedent(source))
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("EMBER_LOGS", "EMBER_COMPILE_DEBUG", "EMBER_REPRO",
                                 "EMBER_DEBUG_FUNCTION"))}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, env={**base, **(env or {})}, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc
