"""What torch.compile's ``mode=`` values do in ember.inductor, per device (ADR 0011).

- ``"max-autotune"``, ``"max-autotune-no-cudagraphs"``: the Triton backend widens
  its autotuning space and tries a Triton matmul template against ATen's mm;
  the C++ backend has nothing to tune and says so.
- ``"reduce-overhead"`` (and the CUDA-graph half of ``"max-autotune"``): on CUDA
  tensors the compiled graph is replayed from CUDA graphs (``cudagraphs.py``,
  ADR 0039; a graph that cannot be recorded says why in a perf hint); on other
  devices ember.inductor says so, naming the mode and the device, and runs the
  graph without them.

Never a silent no-op: each unsupported part is a ``UserWarning`` (once per
message and process) and a ``perf_hints`` log line.
"""

from __future__ import annotations

import warnings

import torch

from .logs import perf_hints

#: modes that ask for CUDA graphs
CUDAGRAPH_MODES = ("reduce-overhead", "max-autotune")
#: modes that ask for wider autotuning and matmul templates
AUTOTUNE_MODES = ("max-autotune", "max-autotune-no-cudagraphs")


def mode_messages(mode: str, device: torch.device, backend: str) -> list[str]:
    """What ``mode`` cannot do for a graph on ``device`` compiled by ``backend`` (its label)."""
    out = []
    if mode in CUDAGRAPH_MODES and device.type != "cuda":
        out.append(
            f"mode={mode!r} asks for CUDA graphs; CUDA graphs need CUDA tensors: the graph on "
            f"{device} runs without them"
            + (" (mode='max-autotune-no-cudagraphs' does the rest)" if mode == "max-autotune" else "")
        )
    if mode in AUTOTUNE_MODES and backend != "Triton":
        out.append(
            f"mode={mode!r} tunes Triton kernels and matmul templates; the {backend} backend "
            f"compiling the graph on {device} has nothing to tune, so it compiles it as mode='default'"
        )
    return out


def warn_mode(mode: str, device: torch.device, backend: str) -> None:
    for text in mode_messages(mode, device, backend):
        perf_hints.info(text)
        warnings.warn(f"ember.inductor: {text}", UserWarning, stacklevel=3)
