"""Seed 003, the archived TorchDynamo README (``003_2354640c273cb4bc.txt``).

Each runnable example as written, with ``import ember.dynamo as torchdynamo``
for ``import torchdynamo`` and ember's backend names for torch's (``aot_eager``
for ``aot_nop``/``aot_nvfuser``). The feature table is ``README.md`` here.
"""

from __future__ import annotations

import logging
import re
from typing import List  # noqa: UP035 - the README's own spelling

import pytest
import torch

import ember.dynamo as torchdynamo
from ember.dynamo.testing import CompileCounter, CompileCounterWithBackend


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


def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


# -- Existing Backends ---------------------------------------------------------


def test_list_backends_names_the_installed_backends() -> None:
    assert {"eager", "aot_eager", "inductor"} <= set(torchdynamo.list_backends())


def test_optimize_eager_runs_the_captured_graph_with_pytorch() -> None:
    a, b = torch.randn(10), torch.randn(10)
    torch.testing.assert_close(torchdynamo.optimize("eager")(toy_example)(a, b), toy_example(a, b))


@pytest.mark.parametrize("name", ["nvfuser", "ofi", "fx2trt", "aot_nvfuser"])
def test_backends_ember_does_not_ship_fail_clearly(name: str) -> None:
    # The README's TorchScript/TensorRT backends have no ember counterpart: asking for one
    # names it and lists what is installed, instead of failing somewhere later.
    with pytest.raises(torchdynamo.InvalidBackendError, match=rf"unknown ember backend '{name}'; installed backends: .*eager"):
        torchdynamo.optimize(name)


# -- Training and AotAutograd --------------------------------------------------


class TwoInputLoss(torch.nn.Module):
    """The README's ``model``: two tensors in, a scalar loss out."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(10, 10)

    def forward(self, a, b):
        return ((self.lin(a) - b) ** 2).mean()


def _train(iteration, model, optimizer, steps: int) -> None:
    torch.manual_seed(0)
    for _ in range(steps):
        iteration(model, optimizer)


def test_training_iteration_forward_and_backward_are_compiled() -> None:
    # "aot_nvfuser" in the README; aot_eager is ember's AotAutograd backend without a
    # code generator (the README's "aot_nop").
    torch.manual_seed(0)
    model = TwoInputLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    reference = TwoInputLoss()
    reference.load_state_dict(model.state_dict())
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.01)
    counter = CompileCounterWithBackend("aot_eager")

    def training_iteration(model, optimizer):
        # forward graphs are captured, and AotAutograd generates corresponding backward graphs
        # both forward and backward graphs are compiled at this time
        loss = model(torch.randn(10), torch.randn(10))
        # no further compilation happens here, but eager autograd executes compiled backwards graphs from above
        loss.backward()
        # dynamo won't compile this, currently
        optimizer.step()

    _train(torchdynamo.optimize(counter)(training_iteration), model, optimizer, 100)
    _train(training_iteration, reference, ref_optimizer, 100)
    assert counter.frame_count == 1
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want)


def test_training_iteration_with_zero_grad_first_still_captures_the_forward() -> None:
    torch.manual_seed(0)
    model = TwoInputLoss()
    optimizer = torch.optim.Adam(model.parameters())
    counter = CompileCounterWithBackend("aot_eager")

    @torchdynamo.optimize(counter)
    def training_iteration(model, optimizer):
        optimizer.zero_grad()
        loss = model(torch.randn(10), torch.randn(10))
        loss.backward()
        optimizer.step()

    reference = TwoInputLoss()
    reference.load_state_dict(model.state_dict())
    ref_optimizer = torch.optim.Adam(reference.parameters())
    _train(training_iteration, model, optimizer, 3)
    _train(training_iteration.__wrapped__, reference, ref_optimizer, 3)
    # the optimizer calls run outside the graph; the forward is one graph, compiled once
    assert counter.frame_count == 1
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got, want)
    reasons = [b.reason for b in torchdynamo.explain(training_iteration.__wrapped__)(
        model, optimizer).break_reasons]
    assert "`Adam` object cannot be traced (`.zero_grad` is run outside the graph)" in reasons


# -- Adding Backends -----------------------------------------------------------


def test_optimize_for_inference_compiler() -> None:
    compiled = []

    def my_compiler(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]):  # noqa: UP006
        scripted = torch.jit.trace(gm, example_inputs)
        compiled.append(scripted)
        return torch.jit.optimize_for_inference(scripted)

    fn = torchdynamo.optimize(my_compiler)(toy_example)
    torch.manual_seed(0)
    for _ in range(10):
        a, b = torch.randn(10), torch.randn(10)
        torch.testing.assert_close(fn(a, b), toy_example(a, b))
    assert len(compiled) == 3


def test_combining_backends_through_the_backends_table() -> None:
    from ember.dynamo.backends import BACKENDS

    def my_compiler(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]):  # noqa: UP006
        inductor_compiled = BACKENDS["inductor"](gm, example_inputs)
        if inductor_compiled is not None:
            return inductor_compiled
        # first backend failed, try something else...
        eager_compiled = BACKENDS["eager"](gm, example_inputs)
        if eager_compiled is not None:
            return eager_compiled
        return gm.forward

    a, b = torch.randn(10), torch.randn(10)
    torch.testing.assert_close(torchdynamo.optimize(my_compiler)(toy_example)(a, b), toy_example(a, b))


# -- Guards --------------------------------------------------------------------


def test_first_graph_guards(caplog: pytest.LogCaptureFixture) -> None:
    # GUARDS: - local 'a' TENSOR_MATCH - local 'b' TENSOR_MATCH - global 'torch' FUNCTION_MATCH
    torchdynamo.set_logs(guards=True)
    try:
        with caplog.at_level(logging.INFO, logger="ember.guards"):
            torchdynamo.optimize("eager")(toy_example)(torch.randn(10), torch.randn(10))
    finally:
        torchdynamo.set_logs(guards=False)
    first = next(r.getMessage() for r in caplog.records if r.name == "ember.guards")
    assert "GUARDS:" in first
    assert "- local 'a' TENSOR_MATCH" in first
    assert "- local 'b' TENSOR_MATCH" in first
    assert "- global 'torch' ID_MATCH" in first  # ember guards the module by identity


def _tensor_match_variants() -> dict[str, torch.Tensor]:
    base = torch.randn(4, 6)

    class MyTensor(torch.Tensor):
        pass

    return {
        "python class": base.as_subclass(MyTensor),
        "dtype": base.double(),
        "requires_grad": base.clone().requires_grad_(),
        "ndim": base.reshape(4, 6, 1),
        "sizes": torch.randn(5, 6),
        "strides": base.t().contiguous().t(),
    }


@pytest.mark.parametrize("prop", [
    "python class", "dtype", "requires_grad", "ndim", "sizes", "strides",
])
def test_tensor_match_recaptures_when_a_property_changes(prop: str) -> None:
    # "If any of those guards fail, the graph will be recaptured and recompiled."
    counter = CompileCounter()
    fn = torchdynamo.optimize(counter)(lambda x: x * 2 + 1)
    base = torch.randn(4, 6)
    fn(base)
    fn(torch.randn(4, 6))
    assert counter.frame_count == 1
    changed = _tensor_match_variants()[prop]
    torch.testing.assert_close(fn(changed), changed * 2 + 1)
    assert counter.frame_count == 2


def test_tensor_match_recaptures_on_a_dispatch_key_change() -> None:
    counter = CompileCounter()
    fn = torchdynamo.optimize(counter)(lambda x: x * 2 + 1)
    fn(torch.randn(4))
    with torch.inference_mode():
        inference = torch.randn(4)
    torch.testing.assert_close(fn(inference), inference * 2 + 1)
    assert counter.frame_count == 2


def test_dynamic_shapes_config_is_dynamic() -> None:
    torchdynamo.config.dynamic_shapes = True
    assert torchdynamo.config.dynamic is True and torchdynamo.config.dynamic_shapes is True


def test_dynamic_shapes_config_turns_off_size_specialization() -> None:
    torchdynamo.config.dynamic_shapes = True
    counter = CompileCounter()
    fn = torchdynamo.optimize(counter)(lambda x: x * 2)
    for n in (4, 5, 6):
        fn(torch.randn(n))
    assert counter.frame_count == 1


# -- Run Mode / Quiescence Guarantee ---------------------------------------------


def test_run_mode_uses_prior_graphs_and_compiles_nothing_new() -> None:
    counter = CompileCounter()
    fn = torchdynamo.optimize(counter)(toy_example)
    torch.manual_seed(0)
    fn(torch.randn(10), torch.ones(10))
    fn(torch.randn(10), -torch.ones(10))
    compiled = counter.frame_count
    with torchdynamo.run():
        for _ in range(5):
            a, b = torch.randn(10), torch.randn(10)
            torch.testing.assert_close(fn(a, b), toy_example(a, b))
        a, b = torch.randn(7), torch.randn(7)  # a new shape: no guard passes, runs eagerly
        torch.testing.assert_close(fn(a, b), toy_example(a, b))
    assert counter.frame_count == compiled


# -- Single Whole-Program Graph Mode ---------------------------------------------


def test_nopython_turns_the_graph_break_into_an_error() -> None:
    def my_compiler(gm: torch.fx.GraphModule, example_inputs: List[torch.Tensor]):  # noqa: UP006
        return gm.forward

    @torchdynamo.optimize(my_compiler, nopython=True)
    def toy_example(a, b):
        x = a / (torch.abs(a) + 1)
        if b.sum() < 0:
            b = b * -1
        return x * b

    with pytest.raises(torchdynamo.Unsupported) as info:
        toy_example(torch.randn(10), torch.randn(10))
    # torchdynamo.exc.Unsupported: generic_jump TensorVariable() ... line 7, in toy_example
    # if b.sum() < 0:
    assert "data-dependent control flow" in info.value.reason
    assert "`if b.sum() < 0:`" in str(info.value)
    assert info.value.user_stack[-1].name == "toy_example"


# -- Deeper Dive -----------------------------------------------------------------


def test_config_debug_prints_graph_bytecode_and_guards(caplog: pytest.LogCaptureFixture) -> None:
    torchdynamo.config.debug = True
    with caplog.at_level(logging.INFO, logger="ember"):
        torchdynamo.optimize("eager")(toy_example)(torch.randn(10), torch.ones(10))
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert re.search(r"__compiled_fn_\d+", text)
    assert "placeholder" in text and "call_function" in text
    assert "ORIGINAL BYTECODE" in text and "MODIFIED BYTECODE" in text
    assert "__resume_at_" in text
    assert "- local 'a' TENSOR_MATCH" in text


def test_resume_functions_continue_after_the_break() -> None:
    # __resume_at_30_1 and __resume_at_38_2: one continuation per side of the branch
    fn = torchdynamo.optimize("eager")(toy_example)
    fn(torch.randn(10), torch.ones(10))
    fn(torch.randn(10), -torch.ones(10))
    resumes = sorted(n for n in toy_example.__globals__ if n.startswith("__resume_at_"))
    assert len(resumes) >= 2, resumes
