"""Dynamic shapes end to end: ember.dynamo -> ember.aotgrad -> ember.inductor, against eager.

A transformer block, an MLP and a CNN are called at six batch sizes and
sequence lengths (training: outputs and every gradient compared with eager).
Under the default ``dynamic=None`` each compiles at most two graphs (the
first call static, then a symbolic one); with ``dynamic=True`` or
``mark_dynamic`` exactly one; ``dynamic=False`` compiles one per shape.
The symbolic graphs' C++ kernels take the sizes as arguments.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable

import pytest
import torch
from torch import nn

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounterWithBackend


class Block(nn.Module):
    """A pre-norm GPT block: causal attention and an MLP."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.LayerNorm(64), nn.Linear(64, 8))


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(16, 10),
    )


BATCHES = [2, 3, 5, 7, 4, 9]
LENGTHS = [5, 8, 3, 11, 6, 9]

CASES: dict[str, tuple[Callable[[], nn.Module], Callable[[int], torch.Tensor], list[int]]] = {
    "block": (Block, lambda i: torch.randn(BATCHES[i], LENGTHS[i], 32), [0, 1]),
    "mlp": (mlp, lambda i: torch.randn(BATCHES[i], 16), [0]),
    "cnn": (cnn, lambda i: torch.randn(BATCHES[i], 3, 8 + 2 * i, 8 + 2 * i), [0, 2, 3]),
}


def train_step(
    model: nn.Module, x: torch.Tensor, dims: list[int] | None = None
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    x = x.clone().requires_grad_(True)
    if dims is not None:  # the mark belongs to the tensor object the model receives
        ed.mark_dynamic(x, dims)
    out = model(x)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    assert x.grad is not None
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return out.detach(), x.grad, grads


class _Fallbacks(logging.Handler):
    """Collects ember's warnings: a graph that silently ran eagerly would pass the
    value checks, so every test also asserts that nothing fell back."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def check(name: str, mode: str) -> CompileCounterWithBackend:
    handler = _Fallbacks()
    logging.getLogger("ember").addHandler(handler)
    try:
        cnt = _check(name, mode)
    finally:
        logging.getLogger("ember").removeHandler(handler)
    assert not handler.messages, handler.messages
    return cnt


def _check(name: str, mode: str) -> CompileCounterWithBackend:
    make_model, make_input, dims = CASES[name]
    torch.manual_seed(0)
    eager = make_model().train()
    model = copy.deepcopy(eager)
    cnt = CompileCounterWithBackend("inductor")
    compiled = ed.compile(model, backend=cnt, dynamic={"none": None, "true": True, "false": False,
                                                       "mark": None}[mode])
    for i in range(len(BATCHES)):
        torch.manual_seed(i)
        x = make_input(i)
        got = train_step(compiled, x, dims if mode == "mark" else None)
        want = train_step(eager, x)
        torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-4)
        for g, w in zip(got[2], want[2], strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    return cnt


@pytest.mark.parametrize("name", list(CASES))
def test_default_compiles_at_most_two_graphs(name: str) -> None:
    ed.reset()
    cnt = check(name, "none")
    assert cnt.frame_count <= 2


@pytest.mark.parametrize("name", list(CASES))
def test_mark_dynamic_compiles_one_graph(name: str) -> None:
    ed.reset()
    assert check(name, "mark").frame_count == 1


def test_dynamic_true_compiles_one_graph_and_symbolic_kernels() -> None:
    ed.reset()
    cnt = check("block", "true")
    assert cnt.frame_count == 1
    placeholders = [n for n in cnt.graphs[0].graph.nodes if n.op == "placeholder"]
    # every dim is symbolic; the block's weights pin the model dim (a guard: s2 == 32)
    assert [str(s) for s in placeholders[0].meta["example_value"].shape] == ["s0", "s1", "s2"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_dynamic_true_other_models(name: str) -> None:
    ed.reset()
    assert check(name, "true").frame_count == 1


@pytest.mark.slow
def test_dynamic_false_keeps_specializing() -> None:
    ed.reset()
    assert check("mlp", "false").frame_count == len(BATCHES)


@pytest.mark.parametrize("name", list(CASES))
def test_inference_under_no_grad_serves_every_size(name: str) -> None:
    # no gradients: ember.inductor's own ATen trace is static, so symbolic graphs go
    # through ember.aotgrad (a static trace here returned the second call's shape)
    ed.reset()
    make_model, make_input, _ = CASES[name]
    torch.manual_seed(0)
    model = make_model().eval()
    cnt = CompileCounterWithBackend("inductor")
    compiled = ed.compile(model, backend=cnt)
    with torch.no_grad():
        for i in range(len(BATCHES)):
            x = make_input(i)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert cnt.frame_count <= 2


def test_symbolic_inference_graph_is_called_without_a_wrapper() -> None:
    # no gradients: the symbolic graph is traced with its weights as constants and called
    # directly, as a static one is (before, aotgrad's module wrapper ran on every call)
    from ember.inductor import backend as inductor
    from ember.inductor.compile_fx import CompiledGraph

    made: list[Callable[..., object]] = []

    def record(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Callable[..., object]:
        made.append(inductor(gm, inputs))
        return made[-1]

    ed.reset()
    torch.manual_seed(0)
    model = mlp().eval()
    compiled = ed.compile(model, backend=record, dynamic=True)
    with torch.no_grad():
        for n in (3, 5, 9):
            x = torch.randn(n, 16)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert len(made) == 1 and isinstance(made[0], CompiledGraph), made
    assert made[0].report.kernels >= 1 and made[0].report.eager_reason is None


def _view_outputs(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x * 2
    return x.view(x.shape[0], -1, 2), x.t(), x[1:], y, y.view(x.shape[0], x.shape[1] // 2, 2)


@pytest.mark.parametrize("grad", [False, True])
def test_views_of_symbolic_inputs_compile(grad: bool) -> None:
    # outputs that are views (of an input, or of an intermediate another output also
    # returns) are replayed at run time with this call's sizes; before, such a graph ran
    # eagerly under dynamic shapes
    ed.reset()
    cnt = CompileCounterWithBackend("inductor")
    compiled = ed.compile(_view_outputs, backend=cnt, dynamic=True)
    handler = _Fallbacks()
    logging.getLogger("ember").addHandler(handler)
    try:
        for n in (4, 6, 10):
            x = torch.randn(n, 8, requires_grad=grad)
            got, want = compiled(x), _view_outputs(x)
            for a, b in zip(got, want, strict=True):
                torch.testing.assert_close(a, b)
                assert (a.stride(), a.storage_offset()) == (b.stride(), b.storage_offset())
                assert a._is_view() == b._is_view()
            for a in got[:3]:  # views of x share its memory, as eager's do
                assert a.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
            assert got[4].untyped_storage().data_ptr() == got[3].untyped_storage().data_ptr()
            if grad:
                (gx,) = torch.autograd.grad(sum(t.sum() for t in got), x)
                (wx,) = torch.autograd.grad(sum(t.sum() for t in want), x)
                torch.testing.assert_close(gx, wx)
    finally:
        logging.getLogger("ember").removeHandler(handler)
    assert not handler.messages, handler.messages
    assert cnt.frame_count == 1


class WindowPad(nn.Module):
    """Swin's window padding: pad H and W up to a multiple of the window, then a conv."""

    def __init__(self, window: int = 4) -> None:
        super().__init__()
        self.window = window
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        x = nn.functional.pad(x, (0, (-w) % self.window, 1, (-h) % self.window + 1))
        return self.conv(x).relu()


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_padding_does_not_specialize_the_sizes(backend: str) -> None:
    """``F.pad``'s C++ kernel reads sizes as ints: traced without torch's Python
    dispatcher (which runs its meta kernel instead), every padded size was specialized,
    so every new size recompiled (fuzz: ``tools/fuzz.py recompiles``)."""
    torch.manual_seed(0)
    model = WindowPad()
    cnt = CompileCounterWithBackend(backend)
    compiled = ed.compile(model, backend=cnt)
    for n in (5, 6, 9, 10, 13, 17):
        x = torch.randn(2, 3, n, n + 2)
        torch.testing.assert_close(compiled(x), model(x))
    assert cnt.frame_count == 2


class WindowPartition(nn.Module):
    """torchvision's Swin ``shifted_window_attention`` layout steps: pad H and W to a multiple
    of the window with ``(w - W % w) % w``, view the padded map as windows, permute them to
    rows, and back. The padded size is ``W + Mod(6*W, 7)`` and the window count
    ``floor((W + Mod(6*W, 7)) / 7)``: the view's element counts are equal only once
    ``Mod(W + Mod(6*W, 7), 7)`` is known to be 0 (issue 29: "cannot view size")."""

    def __init__(self, window: int = 7) -> None:
        super().__init__()
        self.window = window
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        ws = self.window
        x = nn.functional.pad(x, (0, 0, 0, (ws - w % ws) % ws, 0, (ws - h % ws) % ws))
        _, ph, pw, _ = x.shape
        x = x.view(b, ph // ws, ws, pw // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
        x = self.proj(x.reshape(-1, ws * ws, c)).relu()
        x = x.view(b, ph // ws, pw // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(b, ph, pw, c)[:, :h, :w, :].contiguous()


@pytest.mark.parametrize("grad", [False, True])
def test_window_partition_of_a_padded_map_compiles_symbolically(grad: bool) -> None:
    torch.manual_seed(0)
    model = WindowPartition()
    cnt = CompileCounterWithBackend("inductor")
    compiled = ed.compile(model, backend=cnt, dynamic=True)
    handler = _Fallbacks()
    logging.getLogger("ember").addHandler(handler)
    try:
        for n in (9, 12, 16):
            x = torch.randn(2, n, n, 8, requires_grad=grad)
            with torch.set_grad_enabled(grad):
                got, want = compiled(x), model(x)
            torch.testing.assert_close(got, want)
            if grad:
                (gx,) = torch.autograd.grad(got.pow(2).sum(), x)
                (wx,) = torch.autograd.grad(want.pow(2).sum(), x)
                torch.testing.assert_close(gx, wx)
    finally:
        logging.getLogger("ember").removeHandler(handler)
    assert not handler.messages, handler.messages
    assert cnt.frame_count == 1


def columns_of_a_larger_tensor(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (x * 2 + y.sum(-1, keepdim=True)).relu(), x.t() @ y


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_slices_of_a_growing_tensor_do_not_recompile(backend: str) -> None:
    """Inputs that are slices of larger tensors (``base[:, :3]``, ``b[:, ::2]``) have
    strides their sizes do not give; they were ints in the graph, so a base that grows
    recompiled on every call (fuzz seeds 137, 185, 216 under ``tools/fuzz.py
    recompiles``). Such strides get symbols of their own, never duck-sized with an equal
    size (``x``'s row stride equals its row count at 6 and 9, not at 7 and 12)."""
    cnt = CompileCounterWithBackend(backend)
    compiled = ed.compile(columns_of_a_larger_tensor, backend=cnt)
    for n, width in ((4, 7), (4, 7), (6, 6), (7, 10), (9, 9), (12, 15)):
        x = torch.randn(n, width)[:, :3]
        y = torch.randn(n, 2 * n)[:, ::2]
        for got, want in zip(compiled(x, y), columns_of_a_larger_tensor(x, y), strict=True):
            torch.testing.assert_close(got, want)
    assert cnt.frame_count == 2


def test_buffer_of_a_rounded_up_half_length_at_odd_and_even_sizes() -> None:
    # the user program behind fuzz seed 843 (a pair-pooling with index_add, then
    # repeat_interleave back): a zero buffer of (T + 1) // 2 rows, at T odd and even
    def pool_pairs(h: torch.Tensor) -> torch.Tensor:
        pairs = torch.arange(h.shape[1], device=h.device) // 2
        z = h.new_zeros(h.shape[0], (h.shape[1] + 1) // 2, h.shape[2]).index_add(1, pairs, h)
        return h + z.repeat_interleave(2, 1)[:, : h.shape[1]]

    compiled = ed.compile(pool_pairs, backend="inductor")
    for length in (6, 9, 12, 7, 13, 16):
        x = torch.randn(2, length, 8)
        torch.testing.assert_close(compiled(x), pool_pairs(x))
