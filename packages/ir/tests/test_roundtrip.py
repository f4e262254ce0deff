"""Round trips over real models: to_fx(loads(dumps(from_fx(gm)))) and save/load give gm's outputs."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import torch.fx
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx  # tests only: builds ATen-level graphs

from ember.ir import GraphIR, TensorMeta, dumps, from_fx, load, loads, save, to_fx


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 4)
        self.drop = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(torch.nn.functional.gelu(self.fc1(x))))


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(8, 5, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        y = self.pool(y).flatten(1)
        return self.head(y) + self.head.weight.sum()


class Slicy(nn.Module):
    """Exercises slices, Ellipsis, None, dtype kwargs, list args, call_method and size()."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 6))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x[:, 1:5:2, ...] * self.scale[None, :2, None]
        b = torch.cat([a, x[:, :2, ..., None].squeeze(-1)], dim=1).to(torch.float64)
        c = b.view(x.size(0), -1).sum(dim=-1, keepdim=True)
        return c.float(), torch.where(x > 0, x, x * 0.1).max(dim=1).values


class Leafy(nn.Module):
    """torch.nn modules kept whole as call_module: an LSTM and a TransformerEncoderLayer."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True)
        self.enc = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.lstm(x)
        return self.enc(y)


def transformer() -> nn.Module:
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)


@pytest.fixture(autouse=True)
def _no_mha_fastpath() -> Iterator[None]:
    # The fast path branches on tensor properties, which symbolic tracing cannot follow.
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(before)


def _trace_torch(model: nn.Module) -> torch.fx.GraphModule:
    if isinstance(model, nn.TransformerEncoderLayer):
        concrete = {"src_mask": None, "src_key_padding_mask": None, "is_causal": False}
        return torch.fx.symbolic_trace(model, concrete_args=concrete)
    return torch.fx.symbolic_trace(model)


def _close(a: object, b: object) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    elif isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            _close(a[k], b[k])
    else:
        assert a == b


def _through_text(ir: GraphIR) -> torch.fx.GraphModule:
    text = dumps(ir)
    back = loads(text)
    assert back == ir
    assert dumps(back) == text, "dumps must be stable"
    json.loads(text)
    return to_fx(back.with_tensors(ir.tensors))


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "mlp": (MLP, lambda: (torch.randn(4, 8),)),
    "cnn": (CNN, lambda: (torch.randn(2, 3, 8, 8),)),
    "slicy": (Slicy, lambda: (torch.randn(3, 6, 4),)),
    "leafy": (Leafy, lambda: (torch.randn(2, 5, 6),)),
    "transformer": (transformer, lambda: (torch.randn(2, 5, 16),)),
}


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_torch_level_round_trip(name: str, training: bool, tmp_path: Path) -> None:
    build, inputs = MODELS[name]
    torch.manual_seed(0)
    model = build().train(training)
    ref = copy.deepcopy(model)
    args = inputs()
    gm = _trace_torch(model)
    before = copy.deepcopy(model.state_dict())
    ir = from_fx(gm, args)
    _close(before, dict(model.state_dict()))  # from_fx computes metadata without touching real weights
    assert ir.dialect == "torch"
    assert all(n.meta is not None for n in ir.nodes if n.op not in ("output",) and n.name not in _no_meta(gm))
    # In memory, through JSON text.
    _close(ref(*args), _through_text(ir)(*args))
    # Through a directory on disk: independent weights, so training-mode state updates can be compared.
    # (In memory the IR shares weights with ``gm``, so ``gm`` holds the state that is saved.)
    fresh = copy.deepcopy(gm)
    save(ir, tmp_path / "g")
    loaded = to_fx(load(tmp_path / "g"))
    _close(fresh(*args), loaded(*args))
    _close(dict(fresh.state_dict()), {k: v for k, v in loaded.state_dict().items()})


def _no_meta(gm: torch.fx.GraphModule) -> set[str]:
    # Placeholders specialised by concrete_args carry no tensor value.
    return {n.name for n in gm.graph.nodes if n.op == "placeholder" and n.args} | {
        n.name for n in gm.graph.nodes if n.op == "call_function" and "assert" in str(n.target)
    } | {n.name for n in gm.graph.nodes if n.op == "call_function" and n.target is __import__("operator").eq}


def _aten_graph(model: nn.Module, args: tuple[torch.Tensor, ...], mode: str) -> tuple[torch.fx.GraphModule, tuple[object, ...]]:
    """ATen graph with parameters as inputs (symbolic) or as get_attr constants (real)."""
    if mode == "params_as_inputs":
        params = dict(model.named_parameters())
        buffers = dict(model.named_buffers())

        def run(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor], *xs: torch.Tensor) -> object:
            return torch.func.functional_call(model, (p, b), xs)

        gm = make_fx(run, tracing_mode="symbolic")(params, buffers, *args)
        return gm, (params, buffers, *args)
    gm = make_fx(lambda *xs: model(*xs))(*args)
    return gm, args


@pytest.mark.parametrize("mode", ["params_as_inputs", "get_attr"])
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_aten_level_round_trip(name: str, training: bool, mode: str, tmp_path: Path) -> None:
    build, inputs = MODELS[name]
    torch.manual_seed(0)
    model = build().train(training)
    args = inputs()
    gm, call_args = _aten_graph(copy.deepcopy(model), args, mode)
    ir = from_fx(gm)
    assert ir.dialect == "aten"
    assert all(n.target.count("::") == 1 or n.target.startswith(("operator.", "torch.sym")) for n in ir.nodes if n.op == "call_function")
    if mode == "params_as_inputs":
        assert any(isinstance(d, str) for n in ir.nodes if isinstance(n.meta, TensorMeta) for d in n.meta.shape), "expected symbolic sizes"
    expected = gm(*call_args)
    _close(expected, _through_text(ir)(*call_args))
    save(ir, tmp_path / "g")
    _close(expected, to_fx(load(tmp_path / "g"))(*call_args))


def test_symbolic_graph_runs_at_other_sizes() -> None:
    model = MLP()
    gm, _ = _aten_graph(model, (torch.randn(4, 8),), "params_as_inputs")
    ir = loads(dumps(from_fx(gm)))
    placeholder_shapes = [n.meta.shape for n in ir.placeholders if isinstance(n.meta, TensorMeta)]
    assert any(isinstance(d, str) for shape in placeholder_shapes for d in shape)
    back = to_fx(ir)
    params, buffers = dict(model.named_parameters()), dict(model.named_buffers())
    x = torch.randn(7, 8)
    _close(model(x), back(params, buffers, x))


def test_meta_from_fake_propagation_matches_real_run() -> None:
    model = CNN().eval()
    x = torch.randn(2, 3, 8, 8)
    gm = torch.fx.symbolic_trace(model)
    ir = from_fx(gm, [x])
    # Record every node's real value with an eager run and compare with the fake-computed metadata.
    real: dict[str, object] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> object:
            real[n.name] = super().run_node(n)
            return real[n.name]

    Recorder(gm).run(x)
    checked = 0
    for node in ir.nodes[:-1]:
        value = real[node.name]
        assert isinstance(value, torch.Tensor)
        want = TensorMeta(value.dtype, tuple(value.shape), tuple(value.stride()), value.device, value.requires_grad)
        assert node.meta == want, node.name
        checked += 1
    assert checked == len(ir.nodes) - 1


def test_no_example_inputs_means_no_meta_not_wrong_meta() -> None:
    ir = from_fx(torch.fx.symbolic_trace(MLP()))
    assert all(n.meta is None for n in ir.nodes)
    _close(MLP()(torch.ones(1, 8)).shape, to_fx(ir)(torch.ones(1, 8)).shape)


def test_printer_shows_program_text() -> None:
    ir = from_fx(torch.fx.symbolic_trace(MLP()), [torch.randn(4, 8)])
    text = str(ir)
    assert text.splitlines()[0] == "graph(dialect='torch', version=1.1):"
    assert "  %x: f32[4, 8] = placeholder x" in text
    assert "  %fc1: f32[4, 32] = call_module fc1(%x)" in text
    assert "  %gelu: f32[4, 32] = torch.nn.functional.gelu(%fc1)" in text
    assert "  return %fc2" in text
    assert "  fc1: torch.nn.Linear(in_features=8, out_features=32) [train]" in text
    assert "  fc1.weight: f32[32, 8] requires_grad" in text


def test_fake_example_inputs_reuse_their_mode() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    model = CNN().eval()
    x = torch.randn(2, 3, 8, 8)
    gm = torch.fx.symbolic_trace(model)
    fake_x = FakeTensorMode().from_tensor(x)
    from_fake = from_fx(gm, [fake_x])
    from_real = from_fx(gm, [x])
    assert [n.meta for n in from_fake.nodes] == [n.meta for n in from_real.nodes]
    _close(model(x), to_fx(from_fake)(x))


def test_capturer_style_torch_graph() -> None:
    """The shape of graph a bytecode capturer emits: L_x_ placeholders, torch/operator calls, grad mode."""
    import operator

    g = torch.fx.Graph()
    x = g.placeholder("L_x_")
    y = g.placeholder("L_y_")
    n = g.placeholder("L_n_")
    g.call_function(torch._C._set_grad_enabled, (False,))
    a = g.call_function(torch.cos, (x,))
    b = g.call_function(operator.add, (a, y))
    c = g.call_method("sum", (b,), {"dim": 1})
    size = g.call_method("size", (x, 0))
    d = g.call_function(operator.mul, (c, g.call_function(operator.add, (size, n))))
    g.call_function(torch._C._set_grad_enabled, (True,))
    e = g.call_function(torch.nn.functional.layer_norm, (b, (4,)), {"eps": 1e-6})
    f = g.call_function(getattr, (e, "shape"))
    g.output((d, e, f))
    gm = torch.fx.GraphModule(nn.Module(), g)
    args = (torch.randn(3, 4), torch.randn(3, 4), 2)
    ir = from_fx(gm, list(args))
    assert ir.dialect == "torch"
    targets = [node.target for node in ir.nodes if node.op in ("call_function", "call_method")]
    assert targets == [
        "torch._C._set_grad_enabled", "torch.cos", "operator.add", "Tensor.sum", "Tensor.size",
        "operator.add", "operator.mul", "torch._C._set_grad_enabled", "torch.nn.functional.layer_norm", "getattr",
    ]  # fmt: skip
    assert ir.node("l_n_").meta is not None and ir.node("size").meta is not None
    _close(gm(*args), _through_text(ir)(*args))


def test_leaf_modules_with_functions_and_derived_state() -> None:
    model = Leafy().eval()
    x = torch.randn(2, 5, 6)
    ir = loads(dumps(from_fx(torch.fx.symbolic_trace(model), [x])))
    assert set(ir.modules) == {"lstm", "enc"}
    enc = ir.modules["enc"]
    assert enc.cls == "torch.nn.TransformerEncoderLayer"
    assert enc.function_attrs == {"activation": "torch.nn.functional.relu"}
    assert enc.children["self_attn"].cls == "torch.nn.MultiheadAttention"
    assert "_flat_weights" not in ir.modules["lstm"].attrs
    rebuilt = to_fx(ir.with_tensors(from_fx(torch.fx.symbolic_trace(model)).tensors))
    assert rebuilt.enc.activation is torch.nn.functional.relu
    _close(model(x), rebuilt(x))


def test_lazy_code_generates_python_on_first_call() -> None:
    """``to_fx(..., lazy_code=True)`` (a graph rebuilt from a cache entry) defers FX code
    generation to the first call, then runs like the eager module."""
    model = nn.Sequential(nn.Linear(6, 5), nn.GELU(), nn.LayerNorm(5))
    text = dumps(from_fx(torch.fx.symbolic_trace(model)))
    gm = to_fx(loads(text).with_tensors(dict(model.state_dict())), lazy_code=True)
    assert "_code" not in gm.__dict__  # nothing generated yet
    x = torch.randn(4, 6)
    torch.testing.assert_close(gm(x), model(x))
    assert "def forward" in gm.code
