"""``EagerLayoutFakeMode``: fake results laid out as eager's CPU kernels lay them out."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

import pytest
import torch

from ember.ir.shapes import EagerLayoutFakeMode, index_strides


def _strided(rng: random.Random, shape: list[int]) -> torch.Tensor:
    """``arange`` values of ``shape`` in a random layout: permuted dims, some with gaps."""
    perm = list(range(len(shape)))
    rng.shuffle(perm)
    steps = [rng.choice([1, 1, 2]) for _ in perm]
    big = [shape[p] * s for p, s in zip(perm, steps)]
    t = torch.arange(max(1, int(torch.tensor(big).prod()) if big else 1)).view(big)
    t = t[tuple(slice(None, None, s) for s in steps)]
    return t.permute([perm.index(i) for i in range(len(shape))])


def _significant(shape: torch.Size, stride: tuple[int, ...] | list[int]) -> list[int]:
    return [st for n, st in zip(shape, stride) if n > 1]


def test_index_strides_match_eager_on_random_layouts() -> None:
    rng = random.Random(0)
    checked = 0
    for _ in range(600):
        shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 4))]
        x = _strided(rng, shape).float()
        positions = sorted(rng.sample(range(len(shape)), rng.randint(1, len(shape))))
        index_shape = [rng.randint(1, 3) for _ in range(rng.randint(0, 3))]
        indices: list[torch.Tensor | None] = [None] * (positions[-1] + 1)
        for p in positions:
            own = list(index_shape)
            if own and rng.random() < 0.3:
                own[rng.randrange(len(own))] = 1  # broadcast against the others
            indices[p] = _strided(rng, own).remainder(shape[p])
        out = torch.ops.aten.index.Tensor(x, indices)
        if out.numel() == 0:
            continue
        got = index_strides(x, indices)
        assert got is not None
        assert _significant(out.shape, got) == _significant(out.shape, out.stride()), (
            x.shape, x.stride(), [None if i is None else (i.shape, i.stride()) for i in indices])
        checked += 1
    assert checked > 400


def test_fake_index_of_a_transposed_input_has_eager_strides() -> None:
    x = torch.arange(9).view(3, 3).t()
    want = x[x.clamp(0, 2)].stride()
    assert want == (3, 9, 1)
    with EagerLayoutFakeMode(allow_non_fake_inputs=True) as mode:
        fx = mode.from_tensor(x)
        assert fx[fx.clamp(0, 2)].stride() == want
        assert (fx[fx.clamp(0, 2)] > 0).sort(1).values.stride() == want


def _raises(fn: Callable[[], object]) -> bool:
    try:
        fn()
    except RuntimeError:
        return True
    return False


@pytest.mark.parametrize("op", ["index_put_", "index_add_"])
def test_checks_eager_makes_and_meta_kernels_skip(op: str) -> None:
    # on fake tensors the op raises exactly when eager's kernel does, for value/source
    # shapes that fit and that do not (torch's meta kernels accept them all)
    mode = EagerLayoutFakeMode(allow_non_fake_inputs=True)
    idx = torch.tensor([1, 2])
    shapes = [(1, 2, 5), (5,), (2, 1), (), (1,), (2, 5), (3, 5), (2, 2, 5), (1, 5), (2, 4), (2, 5, 1)]
    for shape in shapes:
        def run(x: torch.Tensor, shape: tuple[int, ...] = shape) -> None:
            if op == "index_put_":
                x.index_put_((idx,), torch.ones(shape), accumulate=True)
            else:
                x.index_add_(0, idx, torch.ones(shape) if shape else torch.ones(()).expand(2))

        fake = mode.from_tensor(torch.zeros(4, 5))
        with mode:
            faked = _raises(functools.partial(run, fake))
        assert faked == _raises(functools.partial(run, torch.zeros(4, 5))), (op, shape)


def test_foreach_writes_count_in_version_counters_as_in_eager() -> None:
    # capture finds written inputs by their versions; torch's fake tensors leave them
    # unchanged for the in-place foreach ops (fuzz seed 3 on grown inputs)
    mode = EagerLayoutFakeMode(allow_non_fake_inputs=True)
    ops: list[Callable[[list[torch.Tensor], list[torch.Tensor]], object]] = [
        lambda a, b: torch._foreach_add_(a, b),
        lambda a, b: torch._foreach_mul_(a, 2.0),
        lambda a, b: torch._foreach_zero_(a),
        lambda a, b: torch._foreach_copy_(a, b),
    ]
    for op in ops:
        real = [torch.randn(3), torch.randn(3)]
        fake = [mode.from_tensor(t) for t in real]
        other = torch.randn(3)
        before = [t._version for t in (*real, *fake)]
        op([real[0]], [other])
        with mode:
            op([fake[0]], [mode.from_tensor(other)])
        after = [t._version for t in (*real, *fake)]
        bumped = [a != b for a, b in zip(after, before)]
        assert bumped == [True, False, True, False], op
    with mode:
        x = mode.from_tensor(torch.randn(3))
        v = x._version
        torch._foreach_add([x], [x])  # not in place: nothing written
        assert x._version == v
