"""Warm start through the whole pipeline: ember.dynamo's stored frame, ember.aotgrad's plan,
ember.inductor's traced ATen graph, compiled graph and kernels, in a second process.

The second process cannot capture (``ember.dynamo.convert_frame`` is None in
``sys.modules``: importing the bytecode interpreter raises), must not import TorchDynamo
(no fake tensor made on the way), sympy (0.3 s of CPU: the graphs have static sizes) or
ember.inductor's lowering stack, and must give eager's results for an inference call
and a training step (gradients included).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    import ember.dynamo

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(16, 32)
            self.fc2 = torch.nn.Linear(32, 8)

        def forward(self, x):
            return self.fc2(torch.nn.functional.gelu(self.fc1(x))).sum(-1)

    warm = sys.argv[1] == "warm"
    if warm:
        sys.modules["ember.dynamo.convert_frame"] = None
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(4, 16)
    compiled = ember.dynamo.compile(model, backend="inductor")
    with torch.no_grad():
        infer = compiled(x)
    loss = compiled(x).sum()
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    with torch.no_grad():
        want = model(x)
    print(json.dumps({
        "inference": bool(torch.allclose(infer, want, atol=1e-5)),
        "grads": all(torch.allclose(g, p.grad, atol=1e-5) for g, p in zip(grads, model.parameters())),
        "torch._dynamo": "torch._dynamo" in sys.modules,
        "interpreter": "ember.dynamo.symbolic_convert" in sys.modules,
        "sympy": "sympy" in sys.modules,
        "lowering": "ember.inductor.lowering" in sys.modules,
    }))
    """
)


def _run(tmp_path: Path, phase: str) -> dict[str, bool]:
    script = tmp_path / "warm_start_model.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_COMPILE_DEBUG", "EMBER_LOGS"))}
    env.update(EMBER_CACHE_DIR=str(tmp_path / "cache"), EMBER_FRAME_CACHE="1")
    proc = subprocess.run(
        [sys.executable, str(script), phase], capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, bool] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_second_process_runs_inductor_graphs_without_capture_or_torchdynamo(tmp_path: Path) -> None:
    cold = _run(tmp_path, "cold")
    assert cold["inference"] and cold["grads"]
    warm = _run(tmp_path, "warm")
    assert warm == {"inference": True, "grads": True, "torch._dynamo": False, "interpreter": False,
                    "sympy": False, "lowering": False}
