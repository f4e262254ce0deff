"""The original TorchDynamo README examples, unchanged apart from the import."""

from __future__ import annotations

from typing import Any, List  # noqa: UP035 - the README's own spelling

import pytest
import torch

import ember.dynamo as torchdynamo


@pytest.fixture(autouse=True)
def _reset() -> Any:
    yield
    torchdynamo.reset()


def tabular_rows(text: str) -> list[tuple[str, str]]:
    """(opcode, name) of each row of ``print_tabular`` output."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] in ("placeholder", "call_function", "call_method", "call_module", "output", "get_attr"):
            rows.append((parts[0], parts[1]))
    return rows


def test_readme_usage_example(capsys: pytest.CaptureFixture[str]) -> None:
    calls = []

    def my_compiler(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]):  # noqa: UP006
        calls.append(gm)
        print("my_compiler() called with FX graph:")
        gm.graph.print_tabular()
        return gm.forward  # return a python callable

    @torchdynamo.optimize(my_compiler)
    def fn(x, y):
        a = torch.cos(x)
        b = torch.sin(y)
        return a + b

    x, y = torch.randn(10), torch.randn(10)
    torch.testing.assert_close(fn(x, y), torch.cos(x) + torch.sin(y))
    out = capsys.readouterr().out
    assert out.count("my_compiler() called with FX graph:") == 1
    assert tabular_rows(out) == [
        ("placeholder", "x"),
        ("placeholder", "y"),
        ("call_function", "cos"),
        ("call_function", "sin"),
        ("call_function", "add"),
        ("output", "output"),
    ]
    fn(torch.randn(10), torch.randn(10))
    assert len(calls) == 1


def test_readme_module_example(capsys: pytest.CaptureFixture[str]) -> None:
    calls = []

    def my_compiler(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]):  # noqa: UP006
        calls.append(gm)
        print("my_compiler() called with FX graph:")
        gm.graph.print_tabular()
        return gm.forward  # return a python callable

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
    rows = tabular_rows(capsys.readouterr().out)
    assert [r[0] for r in rows] == ["placeholder", "call_function", "call_module", "output"]
    nodes = list(calls[0].graph.nodes)
    assert nodes[1].target is torch.cos
    assert isinstance(calls[0].get_submodule(nodes[2].target), torch.nn.ReLU)
    optimized_mod(torch.randn(10))
    assert len(calls) == 1


def test_readme_toy_example_graph_break(capsys: pytest.CaptureFixture[str]) -> None:
    graphs: list[torch.fx.GraphModule] = []

    def my_compiler(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]):  # noqa: UP006
        graphs.append(gm)
        print("my_compiler() called with FX graph:")
        gm.graph.print_tabular()
        return gm.forward  # return a python callable

    @torchdynamo.optimize(my_compiler)
    def toy_example(a, b):
        x = a / (torch.abs(a) + 1)
        if b.sum() < 0:
            b = b * -1
        return x * b

    def reference(a, b):
        x = a / (torch.abs(a) + 1)
        if b.sum() < 0:
            b = b * -1
        return x * b

    torch.manual_seed(0)
    for _ in range(100):
        a, b = torch.randn(10), torch.randn(10)
        torch.testing.assert_close(toy_example(a, b), reference(a, b))
    assert len(graphs) == 3
    first = [n.target.__name__ if callable(n.target) else n.target for n in graphs[0].graph.nodes if n.op in ("call_function", "call_method")]
    assert first == ["abs", "add", "truediv", "sum", "lt"]
