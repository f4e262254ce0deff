"""The README's usage example runs and its gradient matches eager."""

from __future__ import annotations

import re
from pathlib import Path

import torch


def test_readme_example_runs(capsys) -> None:
    text = (Path(__file__).parents[1] / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)
    assert code is not None
    scope: dict[str, object] = {}
    exec(compile(code.group(1), "README.md", "exec"), scope)
    assert "aten.mm.default" in capsys.readouterr().out
    x, w = scope["x"], scope["w"]
    assert isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor)
    w2 = w.detach().clone().requires_grad_(True)
    torch.nn.functional.gelu(x @ w2).sum().backward()
    torch.testing.assert_close(w.grad, w2.grad)
