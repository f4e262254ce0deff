"""A compiled training step holds no more memory than eager's (issue 29, ADR 0063).

Eager frees each saved activation once the autograd node that read it has run; the
compiled backward must free each saved value after its last use too (autograd's
references released, the values handed over to the compiled backward, dropped by its
wrapper), and a buffer whose memory another took must not stay bound. The peak is
measured with torch's profiler (every CPU allocation and free, in order: the bench's
``peak MB``), for eager and for ember in the same test; the bound is eager's own figure.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

import ember.dynamo
from ember.inductor.testing import peak_cpu_bytes


def _model() -> nn.Module:
    """Six tanh layers whose saved activations and weight gradients are the same size
    (256 x 256 float32 each): a backward that kept every saved value to its end would
    hold both sets at once, eager holds about one."""
    torch.manual_seed(0)
    return nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(256, 256), nn.Tanh())])


def _step(fn: Callable[[torch.Tensor], torch.Tensor], params: list[nn.Parameter],
          x: torch.Tensor) -> list[torch.Tensor]:
    for p in params:
        p.grad = None
    fn(x).square().mean().backward()
    return [p.grad for p in params if p.grad is not None]


def test_a_compiled_training_step_peaks_no_higher_than_eager() -> None:
    model = _model()
    twin = copy.deepcopy(model)
    compiled = ember.dynamo.compile(twin, backend="inductor")
    x = torch.randn(256, 256)
    eager_params, params = list(model.parameters()), list(twin.parameters())
    for _ in range(2):  # compiled; a backward passed at this size (ADR 0047's fallback)
        got = _step(compiled, params, x)
        want = _step(model, eager_params, x)
        assert len(got) == len(want) == len(params)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    eager = peak_cpu_bytes(lambda: _step(model, eager_params, x))
    ember_peak = peak_cpu_bytes(lambda: _step(compiled, params, x))
    layer = 256 * 256 * 4
    # eager's own figure (a sixteenth of a layer for small allocations): a saved value or a
    # tangent held to the backward's end, a second copy of the output saved for the
    # backward, or ``1 - tanh**2`` saved beside the output would each add a whole layer
    assert ember_peak <= eager + layer // 16, (ember_peak / layer, eager / layer)


def test_retain_graph_keeps_the_saved_values_for_a_second_backward() -> None:
    """The saved values are released only where autograd would release them: a backward
    with ``retain_graph=True`` leaves them for the next one, whose gradients add up."""
    model = _model()
    twin = copy.deepcopy(model)
    compiled = ember.dynamo.compile(twin, backend="inductor")
    x = torch.randn(256, 256)
    for fn, m in ((model, model), (compiled, twin)):
        for _ in range(3):  # the third call: a backward passed at this size before
            m.zero_grad(set_to_none=True)
            loss = fn(x).square().mean()
            loss.backward(retain_graph=True)
            loss.backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        assert p.grad is not None and q.grad is not None
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
