"""0-d integer tensors made from Python ints, read back as ints (``known_scalars``).

The programs are the shapes of transformers' DeBERTa (``compute_attention_span``:
``torch.tensor(min(max(q.size(-2), k.size(-2)), max_pos))`` used as slice bounds and as
``torch.clamp``'s bound); each compiled call is compared with eager, graph counts and
recompiles asserted.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import ember.dynamo as ed
from ember.dynamo.testing import CompileCounter


@pytest.fixture(autouse=True)
def _reset() -> None:
    ed.reset()


def span_bias(x: torch.Tensor, table: torch.Tensor) -> tuple[torch.Tensor, ...]:
    span = torch.tensor(min(max(x.size(-2), x.size(-1)), 8))
    rel = table[16 - span : 16 + span, :]
    pos = torch.clamp(x.long() + span, 0, span * 2 - 1)
    return rel * 2, pos, x.clamp(max=span)


def halves(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    n = torch.tensor(x.size(0))
    return x[: n // 2 + 1], x[-n + 1 :], x[: int(n) - 1] * n.item()


def _calls(fn: Callable[..., object], sizes: list[int], backend: object, **kw: object) -> None:
    table = torch.randn(32, 4)
    compiled = ed.compile(fn, backend=backend, **kw)
    for n in sizes:
        x = torch.randn(n, n + 1)
        args = (x, table) if fn is span_bias else (x,)
        want, got = fn(*args), compiled(*args)
        for g, w in zip(got, want, strict=True):  # type: ignore[call-overload]
            assert g.shape == w.shape and torch.equal(g, w)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_deberta_span_captures_whole_and_matches_eager(backend: str) -> None:
    _calls(span_bias, [3, 5], backend, fullgraph=True)


def test_a_new_length_does_not_recompile() -> None:
    """``torch.tensor(n)`` of a symbolic size stays symbolic (``torch.scalar_tensor``):
    after the automatic-dynamic recompile, new lengths reuse the graph."""
    cnt = CompileCounter()
    _calls(halves, [3, 4, 5, 6, 9, 11], cnt, fullgraph=True)
    assert cnt.frame_count == 2


def test_span_bound_recompiles_only_where_min_changes() -> None:
    cnt = CompileCounter()
    _calls(span_bias, [3, 4, 5, 6, 7, 9, 11, 12], cnt, fullgraph=True)
    # static; symbolic, guarded on size(-1) <= 8; symbolic with the span 8 past that
    assert cnt.frame_count == 3


def written_then_sliced(x: torch.Tensor) -> torch.Tensor:
    n = torch.tensor(3)
    n.add_(1)
    return x[:n] * 2


def written_through_a_view(x: torch.Tensor) -> torch.Tensor:
    n = torch.tensor(3)
    v = n.view(())
    v += 2
    return x[:n] + 1


def wrapped(x: torch.Tensor) -> torch.Tensor:
    n = torch.tensor(2**62) * 4  # 2**64 wraps to 0 in int64
    return x[: n + 1] * 3


def floor_of_negative(x: torch.Tensor) -> torch.Tensor:
    n = -torch.tensor(7) // 2  # -4, floor division as Python's
    return x[:n] * 2


@pytest.mark.parametrize("fn", [written_then_sliced, written_through_a_view, wrapped, floor_of_negative])
def test_values_are_what_eager_reads(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """A tensor written after it was made, or whose int64 arithmetic wrapped, has no known
    value: its data is read at run time (a graph break), never the stale value."""
    x = torch.arange(10.0)
    compiled = ed.compile(fn, backend="eager")
    assert torch.equal(compiled(x), fn(x))


def test_written_tensor_is_not_read_while_tracing() -> None:
    with pytest.raises(ed.Unsupported, match="slice bounds"):
        ed.compile(written_then_sliced, backend="eager", fullgraph=True)(torch.arange(10.0))
