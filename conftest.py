"""Repository-wide pytest setup: ember's tests run with ``EMBER_STRICT=1``.

Outside tests an internal error inside ember (capture, aotgrad, inductor, or
compiled code raising what eager would not) is logged and the frame or graph
runs eagerly. Here it is raised, so a bug cannot hide behind the fallback. Tests
of the fallback itself turn strict off explicitly (``strict=False`` options, or
``monkeypatch.delenv("EMBER_STRICT")``).
"""

from __future__ import annotations

import os

os.environ.setdefault("EMBER_STRICT", "1")
# Triton kernels on CPU tensors (``cpu_backend="triton"``) run in Triton's interpreter, which
# works only if this is set before triton is first imported (torch may import it early);
# the GPU checks run their CUDA tests with TRITON_INTERPRET=0 (tools/gpu_check.sh).
os.environ.setdefault("TRITON_INTERPRET", "1")
