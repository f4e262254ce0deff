"""Failure kinds: error signatures, accuracy against a float64 reference, predicates."""

from __future__ import annotations

import minifier_planted as planted
import torch
from minifier_planted import small_graph
from torch.fx.experimental.proxy_tensor import make_fx

from ember.minifier import BackendError, Inaccuracy, Predicate, State, compare_outputs
from ember.minifier.failure import normalize_message


def _state() -> State:
    gm, inputs = small_graph()
    return State(gm, tuple(inputs))


def test_error_signature_fixes_type_phase_and_message() -> None:
    verdict = BackendError(planted.raises_on_sigmoid).check(_state())
    assert verdict.failed and verdict.signature is not None
    assert verdict.signature.phase == "compile"
    assert verdict.signature.exc_type == "builtins.NotImplementedError"
    assert "aten.sigmoid" in verdict.signature.message
    # a different bug does not count once the signature is fixed
    other = BackendError(planted.two_bugs, verdict.signature).check(_state())
    assert not other.failed and "a different error" in other.detail


def test_run_time_errors_are_their_own_phase() -> None:
    gm, inputs = planted.cnn_graph()
    verdict = BackendError(planted.fails_on_add_relu).check(State(gm, tuple(inputs)))
    assert verdict.failed and verdict.signature is not None and verdict.signature.phase == "run"


def test_message_normalization_masks_numbers_and_addresses() -> None:
    assert normalize_message("bad node add_12 at 0x7f00ab\nmore") == "bad node add_# at <addr>"


def test_inaccurate_mul_is_caught() -> None:
    x, y = torch.randn(16, 16), torch.randn(16, 16)
    gm = make_fx(lambda x, y: (x * y).sin())(x, y)
    verdict = Inaccuracy(planted.inaccurate_mul).check(State(gm, (x, y)))
    assert verdict.failed, verdict.detail
    assert "relative RMS error" in verdict.detail


def test_float32_noise_is_not_blamed_on_the_backend() -> None:
    # a backend computing in float64 differs from float32 eager, but is closer to the truth
    gm, inputs = planted.cnn_graph()
    state = State(gm, tuple(inputs))
    assert not torch.equal(planted.accurate_float64(gm, inputs)(*inputs), gm(*inputs))
    assert not Inaccuracy(planted.accurate_float64).check(state).failed
    assert not Inaccuracy(planted.healthy).check(state).failed


def test_compare_outputs_reports_shape_and_nan_problems() -> None:
    a = torch.ones(3)
    assert "got torch.float32 (2,)" in (compare_outputs(torch.ones(2), a, a.double(), 1e-5, 2.0) or "")
    nan = torch.tensor([1.0, float("nan"), 1.0])
    assert "NaN" in (compare_outputs(nan, a, a.double(), 1e-5, 2.0) or "")
    assert compare_outputs(a.clone(), a, a.double(), 1e-5, 2.0) is None


def test_predicate() -> None:
    def has_sigmoid(gm: torch.fx.GraphModule, inputs: list[object]) -> bool:
        return any(n.target is torch.ops.aten.sigmoid.default for n in gm.graph.nodes)

    assert Predicate(has_sigmoid).check(_state()).failed


def test_graphs_that_mutate_their_inputs_are_not_misjudged() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        x.add_(1.0)
        return x * 2

    x = torch.randn(8)
    gm = make_fx(f)(x.clone())
    assert any(n.target is torch.ops.aten.add_.Tensor for n in gm.graph.nodes)
    original = x.clone()
    state = State(gm, (x,))
    # each run gets its own copy of the inputs, so the backend's mutation cannot skew eager's
    assert not Inaccuracy(planted.healthy).check(state).failed
    assert not BackendError(planted.healthy).check(state).failed
    assert torch.equal(state.inputs[0], original)
