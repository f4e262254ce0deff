"""aot_function / aot_module / aot_autograd: calling conventions, caching, grad mode."""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from ember.aotgrad import (
    AotOptions,
    DoubleBackwardError,
    aot_autograd,
    aot_eager,
    aot_function,
    aot_module,
    core_aten_decompositions,
    default_partition,
    nop_compiler,
)
from ember.aotgrad import logs as aot_logs


class Recorder:
    """A compiler that records the graphs it is given and runs them as is."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        self.graphs.append(gm)
        return gm


def small_fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h = F.layer_norm(x @ w + b, (w.shape[1],))
    return torch.softmax(F.gelu(h), dim=-1) * h.tanh()


@pytest.mark.parametrize("partition", [default_partition, None])
def test_gradcheck_float64(partition: Any) -> None:
    torch.manual_seed(0)
    kwargs = {} if partition is None else {"partition_fn": partition}
    compiled = aot_function(small_fn, nop_compiler, **kwargs)
    args = (torch.randn(3, 4, dtype=torch.float64, requires_grad=True),
            torch.randn(4, 5, dtype=torch.float64, requires_grad=True),
            torch.randn(5, dtype=torch.float64, requires_grad=True))
    assert torch.autograd.gradcheck(compiled, args)


def test_gradcheck_float64_with_core_aten_decompositions() -> None:
    torch.manual_seed(0)
    compiled = aot_function(small_fn, nop_compiler, decompositions=core_aten_decompositions())
    args = (torch.randn(2, 3, dtype=torch.float64, requires_grad=True),
            torch.randn(3, 4, dtype=torch.float64, requires_grad=True),
            torch.randn(4, dtype=torch.float64, requires_grad=True))
    assert torch.autograd.gradcheck(compiled, args)
    backward = compiled.last_partition.backward
    names = {n.target.overloadpacket.__name__ for n in backward.graph.nodes
             if n.op == "call_function" and hasattr(n.target, "overloadpacket")}
    # decomposed to core ops
    assert not names & {"native_layer_norm_backward", "gelu_backward", "tanh_backward"}
    assert "erf" in names


def test_mixed_requires_grad_inputs() -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    w = torch.randn(4, 5, requires_grad=True)
    b = torch.randn(5)
    compiled = aot_function(small_fn, nop_compiler)
    out = compiled(x, w, b)
    out.sum().backward()
    got = w.grad.clone()
    w.grad = None
    small_fn(x, w, b).sum().backward()
    torch.testing.assert_close(got, w.grad)
    assert compiled.last_traced.grad_inputs == (1,)


def test_inference_graph_skips_joint_and_partition() -> None:
    fw, bw = Recorder(), Recorder()
    compiled = aot_function(small_fn, fw, bw)
    args = (torch.randn(3, 4), torch.randn(4, 5, requires_grad=True), torch.randn(5))
    with torch.no_grad():
        out = compiled(*args)
    assert not out.requires_grad
    assert len(fw.graphs) == 1 and not bw.graphs
    assert not any(n.name.startswith("tangents") for n in fw.graphs[0].graph.nodes)
    torch.testing.assert_close(out, small_fn(*args).detach())
    compiled(*args)  # grad mode on now: a second, joint compile
    assert len(fw.graphs) == 2 and len(bw.graphs) == 1


def test_cache_hits_for_same_signature_and_recompiles_on_new_shape() -> None:
    fw, bw = Recorder(), Recorder()
    compiled = aot_function(lambda x: x.sin() * 2, fw, bw)
    compiled(torch.randn(3, requires_grad=True))
    compiled(torch.randn(3, requires_grad=True))
    assert len(fw.graphs) == 1 and len(bw.graphs) == 1
    compiled(torch.randn(4, requires_grad=True))
    assert len(fw.graphs) == 2 and len(bw.graphs) == 2


def test_non_tensor_arguments_and_outputs() -> None:
    def f(x: torch.Tensor, scale: float, opts: dict[str, Any]) -> tuple[Any, ...]:
        y = x * scale if opts["mul"] else x + scale
        return y, x.shape[0], None, {"z": y.cos()}

    compiled = aot_function(f, nop_compiler)
    x = torch.randn(3, requires_grad=True)
    got = compiled(x, 2.0, {"mul": True})
    want = f(x, 2.0, {"mul": True})
    torch.testing.assert_close(got[0], want[0])
    assert got[1:3] == (3, None)
    torch.testing.assert_close(got[3]["z"], want[3]["z"])
    torch.testing.assert_close(compiled(x, 2.0, {"mul": False})[0], x + 2.0)


def test_double_backward_is_a_clear_error() -> None:
    compiled = aot_function(lambda x: x.sin().sum(), nop_compiler)
    x = torch.randn(3, requires_grad=True)
    y = compiled(x)
    with pytest.raises(DoubleBackwardError, match="double backward through a function "
                       "compiled by ember.aotgrad is not supported"):
        torch.autograd.grad(y, x, create_graph=True)


def test_aot_graphs_log(caplog: pytest.LogCaptureFixture) -> None:
    aot_logs.configure_from_env({"EMBER_LOGS": "graph_breaks,aot_graphs"})
    try:
        with caplog.at_level(logging.INFO, logger="ember.aot_graphs"):
            aot_function(lambda x: x.cos(), nop_compiler)(torch.randn(2, requires_grad=True))
        text = caplog.text
        assert "joint graph" in text and "forward graph" in text and "backward graph" in text
        assert "aten.cos.default" in text and "tangents_1" in text
    finally:
        aot_logs.configure_from_env({"EMBER_LOGS": "-aot_graphs"})


def test_aot_module_sees_parameter_updates() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 2)
    compiled = aot_module(lin, nop_compiler)
    x = torch.randn(3, 4)
    before = compiled(x)
    with torch.no_grad():
        lin.weight.add_(1.0)
    torch.testing.assert_close(compiled(x), lin(x))
    assert not torch.allclose(before, compiled(x))


def test_aot_autograd_backend_on_symbolic_traced_graph() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    gm = torch.fx.symbolic_trace(model)
    fw, bw = Recorder(), Recorder()
    run = aot_autograd(fw_compiler=fw, bw_compiler=bw)(gm, [torch.randn(5, 4)])
    x = torch.randn(5, 4)
    run(x).sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad)
    assert len(fw.graphs) == 1 and len(bw.graphs) == 1


def test_backend_falls_back_to_eager_with_a_logged_reason(caplog: pytest.LogCaptureFixture) -> None:
    class Meta(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x * 1
            y.t_()
            return y

    gm = torch.fx.symbolic_trace(Meta())
    with caplog.at_level(logging.WARNING, logger="ember.aotgrad"):
        run = aot_eager(gm, [torch.randn(2, 3)])
        out = run(torch.ones(2, 3))
    assert out.shape == (3, 2)
    assert "running it eagerly" in caplog.text and "metadata mutations" in caplog.text


def test_aot_eager_is_registered_as_an_entry_point() -> None:
    eps = {ep.name: ep for ep in entry_points(group="ember.backends")}
    assert eps["aot_eager"].load() is aot_eager


def test_same_tensor_passed_twice_gets_its_gradient_once() -> None:
    x = torch.randn(3, requires_grad=True)
    y = aot_function(lambda a, b: a * b.sin(), nop_compiler)(x, x)
    (g,) = torch.autograd.grad(y.sum(), x)
    x2 = x.detach().clone().requires_grad_(True)
    (want,) = torch.autograd.grad((x2 * x2.sin()).sum(), x2)
    torch.testing.assert_close(g, want)


def test_tied_weights() -> None:
    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(10, 8)
            self.head = torch.nn.Linear(8, 10, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, i: torch.Tensor) -> torch.Tensor:
            return self.head(self.emb(i).tanh())

    torch.manual_seed(0)
    model = Tied()
    i = torch.randint(0, 10, (6,))
    aot_module(model, nop_compiler)(i).square().sum().backward()
    got = model.emb.weight.grad.clone()
    model.zero_grad()
    model(i).square().sum().backward()
    torch.testing.assert_close(got, model.emb.weight.grad)


def test_captured_tensor_requiring_grad_is_a_clear_error() -> None:
    from ember.aotgrad import TraceError

    w = torch.randn(3, requires_grad=True)
    with pytest.raises(TraceError, match="captures a tensor of shape \\(3,\\) that requires grad"):
        aot_function(lambda x: x * w, nop_compiler)(torch.randn(3, requires_grad=True))


def test_captured_constant_tensor_is_baked_in() -> None:
    c = torch.arange(3.0)
    compiled = aot_function(lambda x: x * c + torch.tensor([1.0, 2.0, 3.0]), nop_compiler)
    x = torch.randn(3, requires_grad=True)
    torch.testing.assert_close(compiled(x), x * c + torch.tensor([1.0, 2.0, 3.0]))


def test_autocast_is_part_of_the_cache_key() -> None:
    fw = Recorder()
    compiled = aot_function(lambda x: x @ x, fw)
    x = torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compiled(x).dtype == torch.bfloat16
    assert compiled(x).dtype == torch.float32
    assert len(fw.graphs) == 2


def test_gradcheck_float64_mutation_and_views() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x * y
        h[0].mul_(y[0])
        h.t()[1:].add_(x.t()[1:].sin())
        return h.exp(), h.view(-1)[::2]

    args = (torch.randn(3, 3, dtype=torch.float64, requires_grad=True),
            torch.randn(3, 3, dtype=torch.float64, requires_grad=True))
    assert torch.autograd.gradcheck(aot_function(f, nop_compiler), args)


def test_outputs_sharing_memory_get_correct_gradients() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x.sin()
        return y, y.view(-1), y.t()

    x = torch.randn(3, 4, requires_grad=True)
    grads = []
    for fn in (aot_function(f, nop_compiler), f):
        outs = fn(x)
        loss = sum((o * o).sum() * i for i, o in enumerate(outs, 1))
        grads.append(torch.autograd.grad(loss, x)[0])
    torch.testing.assert_close(grads[0], grads[1])


def test_data_dependent_shape_traces_forward_and_backward() -> None:
    """A boolean mask's result has an unbacked size (ADR 0046): traced once, it serves
    masks with any count of True values, with eager's values and gradients."""
    graphs: list[torch.fx.GraphModule] = []

    def record(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> torch.fx.GraphModule:
        graphs.append(gm)
        return gm

    def f(x: torch.Tensor) -> torch.Tensor:
        picked = x[x > 0]
        return picked.sum() * picked.shape[0]

    compiled = aot_function(f, record, record, options=AotOptions(fallback_to_eager=False))
    for values in ([1.0, -2.0, 3.0, 0.5, -1.0], [-1.0] * 5, [2.0] * 5):
        x = torch.tensor(values, requires_grad=True)
        got = compiled(x)
        (got_grad,) = torch.autograd.grad(got, x)
        want = f(x)
        (want_grad,) = torch.autograd.grad(want, x)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got_grad, want_grad)
    assert len(graphs) == 2


def test_lstm_is_rejected_at_trace_time_and_backend_falls_back() -> None:
    from ember.aotgrad import TraceError

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(4, 8, batch_first=True)
    x = torch.randn(2, 3, 4)
    with pytest.raises(TraceError, match="mkldnn_rnn_layer.* is not supported"):
        aot_module(lstm, nop_compiler)(x)


    class Wrap(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = lstm

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lstm(x)[0].relu()

    gm = torch.fx.symbolic_trace(Wrap())  # nn.LSTM stays a leaf call_module
    run = aot_eager(gm, [x])
    out = run(x)
    torch.testing.assert_close(out, gm(x))
    out.sum().backward()  # the eager fallback trains
    assert lstm.weight_ih_l0.grad is not None


def _unfold_under_no_grad(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        v = x.unfold(0, 2, 2)
    return v * 0.5, (x * w).sin()


def test_view_under_no_grad_of_a_leaf_view_does_not_require_grad() -> None:
    # x is a leaf that requires grad and is a view of a tensor that does not (fuzz seed
    # 701): eager gives a view of x made under no_grad its root base's requires_grad
    # (False), where a view of an ordinary leaf keeps requiring grad
    results = []
    for fn in (_unfold_under_no_grad, aot_function(_unfold_under_no_grad, nop_compiler)):
        torch.manual_seed(0)
        base = torch.randn(20)
        x = base[::2].requires_grad_()
        w = torch.randn(10, requires_grad=True)
        v, y = fn(x, w)
        y.sum().backward()
        results.append((v.requires_grad, v.detach(), y.detach(), x.grad, w.grad))
    (eager_rg, *eager), (got_rg, *got) = results
    assert eager_rg is False and got_rg is False
    torch.testing.assert_close(got, eager)
    plain = torch.randn(10, requires_grad=True)
    v, _ = aot_function(_unfold_under_no_grad, nop_compiler)(plain, torch.randn(10))
    assert v.requires_grad == _unfold_under_no_grad(plain, torch.randn(10))[0].requires_grad
