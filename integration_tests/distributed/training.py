"""What the distributed workers share: a training loop, a model's full parameters, the end
of a rank (rank 0 writes the results).

Imported by the worker scripts (their folder is the first entry of ``sys.path`` when they
run as scripts).
"""

from __future__ import annotations

import json
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


def train(forward: Any, opt: torch.optim.Optimizer, data: list[tuple[torch.Tensor, torch.Tensor]]) -> list[float]:
    losses = []
    for x, y in data:
        loss = ((forward(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def full_params(net: nn.Module) -> list[torch.Tensor]:
    return [p.full_tensor().detach() if hasattr(p, "full_tensor") else p.detach() for p in net.parameters()]


def finish(rank: int, out: str, result: dict[str, Any]) -> None:
    """Rank 0 writes ``result`` to ``out`` (JSON); every rank leaves its process group."""
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()
