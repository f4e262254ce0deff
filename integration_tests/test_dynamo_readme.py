"""The original TorchDynamo README examples, unchanged apart from the import."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from typing import List  # noqa: UP035 - as the README writes it

import torch

import ember.dynamo as torchdynamo


def test_readme_my_compiler_example() -> None:
    torchdynamo.reset()
    calls: list[torch.fx.GraphModule] = []

    def my_compiler(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]):  # noqa: UP006
        print("my_compiler() called with FX graph:")
        gm.graph.print_tabular()
        calls.append(gm)
        return gm.forward  # return a python callable

    @torchdynamo.optimize(my_compiler)
    def fn(x, y):
        a = torch.cos(x)
        b = torch.sin(y)
        return a + b

    x, y = torch.randn(10), torch.randn(10)
    buf = io.StringIO()
    with redirect_stdout(buf):
        out = fn(x, y)
    torch.testing.assert_close(out, torch.cos(x) + torch.sin(y))
    assert len(calls) == 1
    nodes = [(n.op, n.name) for n in calls[0].graph.nodes]
    assert nodes == [
        ("placeholder", "x"),
        ("placeholder", "y"),
        ("call_function", "cos"),
        ("call_function", "sin"),
        ("call_function", "add"),
        ("output", "output"),
    ]
    text = buf.getvalue()
    assert "my_compiler() called with FX graph:" in text
    assert "<built-in function add>" in text and "(cos, sin)" in text
    fn(torch.randn(10), torch.randn(10))
    assert len(calls) == 1


def test_readme_mock_module_example() -> None:
    torchdynamo.reset()
    calls: list[torch.fx.GraphModule] = []

    def my_compiler(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]):  # noqa: UP006
        calls.append(gm)
        return gm.forward

    class MockModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.relu = torch.nn.ReLU()

        def forward(self, x):
            return self.relu(torch.cos(x))

    mod = MockModule()
    optimized_mod = torchdynamo.optimize(my_compiler)(mod)
    x = torch.randn(10)
    torch.testing.assert_close(optimized_mod(x), mod(x))
    assert len(calls) == 1
    ops = [(n.op, str(n.target)) for n in calls[0].graph.nodes if n.op not in ("placeholder", "output")]
    assert ops[0][0] == "call_function" and "cos" in ops[0][1]
    assert ops[1][0] == "call_module"
    assert isinstance(calls[0].get_submodule(ops[1][1]), torch.nn.ReLU)
