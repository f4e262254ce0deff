"""The generator's state: live values by name and the helpers productions pick with.

Generation is generate-and-test: the generator keeps the *concrete* value of
every variable (the program prefix executed eagerly on real inputs), so a
production can read shapes, dtypes and strides to build a plausible statement,
and a statement that eager rejects is simply not kept. No shape rules are
written twice.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

Pred = Callable[[torch.Tensor], bool]


class NoCandidate(Exception):
    """No live value satisfies what a production needs."""


def is_float(t: torch.Tensor) -> bool:
    return t.is_floating_point()


def is_int(t: torch.Tensor) -> bool:
    return t.dtype in (torch.int64, torch.int32)


def is_bool(t: torch.Tensor) -> bool:
    return t.dtype == torch.bool


def not_bool(t: torch.Tensor) -> bool:
    return t.dtype != torch.bool


def ndim_at_least(n: int) -> Pred:
    return lambda t: t.dim() >= n


def both(*preds: Pred) -> Pred:
    return lambda t: all(p(t) for p in preds)


def broadcastable(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        torch.broadcast_shapes(a.shape, b.shape)  # type: ignore[no-untyped-call]
    except RuntimeError:
        return False
    return True


class Gen:
    """Random choices over the live tensors ``env`` (name -> concrete value)."""

    def __init__(self, rng: random.Random, env: dict[str, torch.Tensor], next_var: int) -> None:
        self.rng = rng
        self.env = env
        self.next_var = next_var

    # -- names --------------------------------------------------------------------------
    def fresh(self) -> str:
        name = f"v{self.next_var}"
        self.next_var += 1
        return name

    def pick(self, pred: Pred | None = None, exclude: tuple[str, ...] = ()) -> str:
        """A live tensor satisfying ``pred``; recent values are likelier."""
        names = [n for n, t in self.env.items()
                 if isinstance(t, torch.Tensor) and n not in exclude and (pred is None or pred(t))]
        if not names:
            raise NoCandidate
        weights = [1.0 + 2.0 * i / len(names) for i in range(len(names))]
        return self.rng.choices(names, weights=weights)[0]

    def pick_with(self, a: str, pred: Callable[[torch.Tensor, torch.Tensor], bool]) -> str:
        """A live tensor ``b`` with ``pred(env[a], b)``; ``a`` itself allowed."""
        return self.pick(lambda t: pred(self.env[a], t))

    def t(self, name: str) -> torch.Tensor:
        return self.env[name]

    # -- small random values --------------------------------------------------------------
    def dim(self, name: str) -> int:
        """A valid dim of ``name`` (sometimes negative); NoCandidate for 0-d."""
        n = self.t(name).dim()
        if n == 0:
            raise NoCandidate
        d = self.rng.randrange(n)
        return d - n if self.rng.random() < 0.3 else d

    def size(self, name: str, d: int) -> int:
        return int(self.t(name).shape[d])

    def index(self, name: str, d: int) -> int:
        """A valid index into dim ``d`` (sometimes negative)."""
        n = self.size(name, d)
        if n == 0:
            raise NoCandidate
        i = self.rng.randrange(n)
        return i - n if self.rng.random() < 0.25 else i

    def scalar(self, name: str | None = None) -> str:
        """A Python literal of a type that suits ``name``'s dtype."""
        t = self.t(name) if name is not None else None
        if t is not None and t.dtype == torch.bool:
            return self.rng.choice(("True", "False"))
        if t is not None and not t.is_floating_point():
            return str(self.rng.randint(-3, 4))
        return self.rng.choice(("0.5", "2.0", "-1.5", "0.0", "3", "1e-3"))

    def choose(self, *options: str) -> str:
        return self.rng.choice(options)

    def shape_of(self, name: str) -> tuple[int, ...]:
        return tuple(int(s) for s in self.t(name).shape)

    def small_shape(self) -> tuple[int, ...]:
        nd = self.rng.choice((1, 1, 2, 2, 3))
        return tuple(self.rng.randint(1, 4) for _ in range(nd))


def shape_src(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"
