"""What decides whether a graph is recorded into CUDA graphs, tested on CPU graphs.

The runner's bookkeeping (which recording a call replays, copies in and out, outputs the
caller holds) is tested here with a stand-in for ``CUDAGraph`` that re-runs the recorded
work on the same memory; the real recording and replaying need a GPU: ``test_cuda.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ember.inductor import CompiledGraph, InductorOptions, compile_graph
from ember.inductor.cudagraphs import CudaGraphCall, mutated_inputs, refusal


def test_mutated_inputs_follow_views_to_the_input() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        x[1:].mul_(2)  # through a view
        z.add_(1)
        return x + y

    gm = make_fx(fn)(torch.randn(4), torch.randn(4), torch.randn(4))
    assert mutated_inputs(gm) == {0, 2}


def test_a_pure_graph_mutates_nothing() -> None:
    gm = make_fx(lambda x, y: (x * y).sum())(torch.randn(3), torch.randn(3))
    assert mutated_inputs(gm) == set()


def test_refusal_names_the_reason() -> None:
    pure = make_fx(lambda x: x * 2)(torch.randn(3))
    assert refusal(pure, symbolic=False, index_checks=False) in (
        None,
        "Triton's interpreter runs its kernels on the host (TRITON_INTERPRET=1)",
    )
    assert "symbolic sizes" in str(refusal(pure, symbolic=True, index_checks=False))
    assert "check gathered indices on the host" in str(refusal(pure, symbolic=False, index_checks=True))



def test_masks_and_data_dependent_ops_are_host_syncs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    x = torch.randn(5)
    for fn in (
        lambda x: x[x > 0].sum(),  # a mask index
        lambda x: torch.nonzero(x),
    ):
        gm = make_fx(fn)(x)
        why = refusal(gm, symbolic=False, index_checks=False)
        assert why is not None and "reads values back to the host" in why, gm.code
    scalar = torch.fx.symbolic_trace(lambda x: x * torch.ops.aten._local_scalar_dense.default(x.sum()))
    assert "reads values back" in str(refusal(scalar, symbolic=False, index_checks=False))
    gathered = make_fx(lambda x: x[torch.tensor([0, 2])] * 2)(x)  # integer indices: no sync
    assert refusal(gathered, symbolic=False, index_checks=False) is None


# -- the runner's bookkeeping, on CPU: a recording re-runs the same work on the same memory --


class Replayed(CudaGraphCall):
    """What a CUDA graph promises, on CPU tensors: a replay does the recorded work again and
    leaves its results in the memory the recording's outputs occupy."""

    def _capture(
        self, run: Callable[[], list[Any]], inputs: Sequence[Any]
    ) -> tuple[Callable[[], Any], list[Any]]:
        # a CUDA graph's recording runs nothing: undo what running it here wrote
        saved = [(t, t.clone()) for t in inputs if isinstance(t, torch.Tensor)]
        outputs = run()
        with torch.no_grad():
            for t, before in saved:
                t.copy_(before)

        def replay() -> None:
            for o, n in zip(outputs, run()):
                if isinstance(o, torch.Tensor) and o is not n:
                    o.copy_(n)

        return replay, outputs


def _runner(fn: Callable[..., Any], inputs: list[torch.Tensor], tmp_path: Path) -> tuple[CompiledGraph, Replayed]:
    gm = make_fx(fn)(*[x.clone() for x in inputs])
    c = compile_graph(gm, inputs, InductorOptions(cache_dir=str(tmp_path), fallback_on_error=False))
    assert isinstance(c, CompiledGraph)
    mutated = mutated_inputs(gm)
    assert mutated is not None
    runner = Replayed(c._call, torch.device("cpu"), mutated, "test graph")
    c._call = runner
    return c, runner


def test_replays_match_eager_and_held_outputs_are_never_overwritten(tmp_path: Path) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        return [(x * 2 + y).relu(), (x - y).sum(0)]

    x, y = torch.randn(8, 5), torch.randn(8, 5)
    c, runner = _runner(fn, [x, y], tmp_path)
    kept = []
    for i in range(7):
        x, y = torch.randn(8, 5), torch.randn(8, 5)
        got = c(x, y)
        for g, e in zip(got, fn(x, y)):
            torch.testing.assert_close(g, e)
        if i % 2:
            kept.append((got, fn(x, y)))  # held: later calls must not write over it
    for got, want in kept:
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)
    assert runner.replays >= 3 and 1 <= runner.recordings <= 4


def test_a_dropped_output_lets_its_recording_be_reused(tmp_path: Path) -> None:
    c, runner = _runner(lambda x: [x.cos()], [torch.randn(6)], tmp_path)
    for _ in range(6):
        x = torch.randn(6)
        torch.testing.assert_close(c(x)[0], x.cos())  # the output is dropped at once
    assert runner.recordings == 1 and runner.replays == 5


def test_every_recording_held_runs_without_graphs(tmp_path: Path) -> None:
    c, runner = _runner(lambda x: [x + 1], [torch.randn(3)], tmp_path)
    xs = [torch.randn(3) for _ in range(8)]
    outs = [c(x)[0] for x in xs]
    for x, o in zip(xs, outs):
        torch.testing.assert_close(o, x + 1)
    assert runner.recordings == 4 and runner.replays == 4  # call 1 warms up, calls 6-8 run plainly


def test_an_input_written_in_place_reaches_the_callers_tensor(tmp_path: Path) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        x.mul_(2)
        return [x + y]

    c, runner = _runner(fn, [torch.randn(4), torch.randn(4)], tmp_path)
    for _ in range(4):
        x, y = torch.randn(4), torch.randn(4)
        expect_x = x * 2
        torch.testing.assert_close(c(x, y)[0], expect_x + y)
        torch.testing.assert_close(x, expect_x)
    assert runner.replays == 3


def test_parameters_are_read_in_place_and_a_moved_one_is_recorded_again(tmp_path: Path) -> None:
    w = torch.nn.Parameter(torch.randn(4, 4))
    c, runner = _runner(lambda w, x: [x @ w], [w.detach(), torch.randn(2, 4)], tmp_path)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 4)
            torch.testing.assert_close(c(w, x)[0], x @ w)
            w.add_(1.0)  # an optimizer's in-place update: the next replay sees it
        w2 = torch.nn.Parameter(torch.randn(4, 4))  # another parameter: another address
        x = torch.randn(2, 4)
        torch.testing.assert_close(c(w2, x)[0], x @ w2)
    assert runner.recordings == 2


def test_a_tensor_given_to_mark_static_address_is_read_in_place(tmp_path: Path) -> None:
    state = torch.randn(5)
    state._ember_static_address = True  # type: ignore[attr-defined]  # what ember.dynamo.mark_static_address sets
    c, runner = _runner(lambda s, g: [s * 0.9 + g], [state.clone(), torch.randn(5)], tmp_path)
    for _ in range(4):
        g = torch.randn(5)
        torch.testing.assert_close(c(state, g)[0], state * 0.9 + g)
        state.add_(1.0)
    assert runner.recordings == 1 and runner.replays == 3
    assert runner._records[0].buffers[0] is None  # not copied: the graph reads it where it is


def test_an_input_passed_again_at_the_same_address_is_read_in_place(tmp_path: Path) -> None:
    x, y = torch.randn(6), torch.randn(6)
    c, runner = _runner(lambda x, y: [x * y + 1], [x, y], tmp_path)
    for _ in range(5):
        torch.testing.assert_close(c(x, y)[0], x * y + 1)
        x.add_(1.0)  # new values at the same address: the next replay reads them
    assert runner.replays == 4
    assert all(b is None for rec in runner._records for b in rec.buffers)  # nothing copied


def test_feeding_an_output_back_as_the_next_input(tmp_path: Path) -> None:
    def step(x: torch.Tensor) -> list[torch.Tensor]:
        return [torch.tanh(x * 1.5 + 0.1)]

    x = torch.randn(16)
    c, runner = _runner(step, [x], tmp_path)
    want = x.clone()
    for _ in range(10):
        (x,) = c(x)
        (want,) = step(want)
        torch.testing.assert_close(x, want)
    assert runner.replays >= 5 and runner.recordings <= 4


def test_an_input_written_in_place_at_a_stable_address(tmp_path: Path) -> None:
    def fn(s: torch.Tensor, g: torch.Tensor) -> list[torch.Tensor]:
        s.mul_(0.5).add_(g)
        return [s.sum()]

    s, want = torch.randn(8), None
    want = s.clone()
    c, runner = _runner(fn, [s, torch.randn(8)], tmp_path)
    for _ in range(4):
        g = torch.randn(8)
        got = c(s, g)[0]
        (expect,) = fn(want, g)
        torch.testing.assert_close(s, want)  # the caller's tensor was written, as eager writes it
        torch.testing.assert_close(got, expect)
    assert runner.replays == 3 and runner._records[0].buffers[0] is None
