"""Expression productions: each returns the source of one expression over live values.

Grouped as users write them: pointwise (with dtype promotion), reductions,
matmuls, views (slices with offsets, transpose/permute, expand, unfold,
as_strided, split/chunk/unbind, reshape), indexing (ints, lists, tensors,
bool masks), factories and joins. A production raises ``NoCandidate`` when no
live value suits it; one that builds an invalid expression is caught when the
generator runs it.
"""

from __future__ import annotations

from collections.abc import Callable

from .gen import (
    Gen,
    NoCandidate,
    both,
    broadcastable,
    is_bool,
    is_float,
    is_int,
    ndim_at_least,
    not_bool,
    shape_src,
)

Expr = Callable[[Gen], str]

UNARY_FLOAT = (
    "torch.sin({a})", "torch.cos({a})", "torch.tanh({a})", "torch.sigmoid({a})",
    "torch.relu({a})", "torch.exp({a}.clamp(max=6))", "torch.log({a}.abs() + 1)",
    "torch.sqrt({a}.abs())", "torch.rsqrt({a}.abs() + 1)", "F.gelu({a})", "F.silu({a})",
    "F.softplus({a})", "torch.erf({a})", "{a}.floor()", "{a}.round()", "torch.sign({a})",
    "F.leaky_relu({a}, 0.1)", "torch.atan({a})", "F.hardtanh({a})", "{a}.pow(2)", "{a} ** 3",
    "torch.clamp({a}, -0.5, 0.5)", "F.elu({a})", "torch.abs({a})", "{a}.log1p().nan_to_num()",
    "torch.reciprocal({a}.abs() + 1)", "F.dropout({a}, 0.0)", "{a}.sinh()", "{a}.trunc()",
)
UNARY_ANY = (
    "{a} * 2", "{a} + 1", "{a}.clone()", "{a}.to(torch.float32)", "{a}.double()", "{a}.long()",
    "{a}.bool()", "{a}.int()", "{a} / 2", "{a} == 0", "{a}.float() * 0.5", "{a} * True",
    "{a} * 2.5", "{a}.add(1, alpha=2)",
)
UNARY_NUMBER = ("-{a}", "{a}.abs()", "{a} // 2", "{a} % 3", "{a} - 1", "torch.square({a})")
UNARY_BOOL = ("~{a}", "{a}.logical_not()", "{a} + 1", "{a}.sum()", "{a}.long().cumsum(0)")
BINARY = (
    "{a} + {b}", "{a} - {b}", "{a} * {b}", "torch.maximum({a}, {b})", "torch.minimum({a}, {b})",
    "torch.where({a} > {b}, {a}, {b})", "{a} > {b}", "{a} <= {b}", "{a} == {b}",
    "torch.add({a}, {b}, alpha=2)",
)
BINARY_FLOAT = ("{a} / ({b}.abs() + 1)", "torch.atan2({a}, {b})", "torch.hypot({a}, {b})",
                "torch.lerp({a}, {b}.to({a}.dtype), 0.25)", "{a}.pow({b}.abs().clamp(max=2))",
                "torch.xlogy({a}.abs(), {b}.abs())", "torch.fmod({a}, {b}.abs() + 1)")
BINARY_BOOL = ("{a} & {b}", "{a} | {b}", "{a} ^ {b}")


def unary(g: Gen) -> str:
    a = g.pick()
    t = g.t(a)
    if t.is_floating_point() and g.rng.random() < 0.65:
        return g.choose(*UNARY_FLOAT).format(a=a)
    if is_bool(t) and g.rng.random() < 0.5:
        return g.choose(*UNARY_BOOL).format(a=a)
    if not is_bool(t) and g.rng.random() < 0.3:
        return g.choose(*UNARY_NUMBER).format(a=a)
    return g.choose(*UNARY_ANY).format(a=a)


def binary(g: Gen) -> str:
    a = g.pick()
    if g.rng.random() < 0.2:
        return g.choose("{a} + {s}", "{a} * {s}", "{a} - {s}", "{s} * {a}").format(
            a=a, s=g.scalar(a))
    b = g.pick_with(a, broadcastable)
    ta, tb = g.t(a), g.t(b)
    if is_bool(ta) and is_bool(tb) and g.rng.random() < 0.5:
        return g.choose(*BINARY_BOOL).format(a=a, b=b)
    if is_float(ta) and is_float(tb) and g.rng.random() < 0.3:
        return g.choose(*BINARY_FLOAT).format(a=a, b=b)
    if g.rng.random() < 0.12:
        m = g.pick_with(a, lambda x, y: is_bool(y) and broadcastable(x, y))
        return g.choose("torch.where({m}, {a}, {b})", "{a}.masked_fill({m}, 0.5)",
                        "torch.where({m}, {a}, 0.0)").format(a=a, b=b, m=m)
    return g.choose(*BINARY).format(a=a, b=b)


REDUCE_DIM = (
    "{a}.sum({d})", "{a}.sum({d}, keepdim=True)", "{a}.mean({d})", "{a}.amax({d})",
    "{a}.amin({d})", "{a}.max({d}).values", "{a}.min({d})[1]", "{a}.argmax({d})",
    "{a}.prod({d})", "{a}.var({d})", "{a}.std({d}, keepdim=True)", "torch.softmax({a}, {d})",
    "torch.log_softmax({a}, {d})", "{a}.cumsum({d})", "torch.logsumexp({a}, {d})",
    "{a}.norm(dim={d})", "{a}.any({d})", "{a}.all({d})", "F.normalize({a}, dim={d})",
    "{a}.cummax({d}).values", "{a}.count_nonzero({d})", "{a}.nansum({d})",
    "{a}.sort({d}).values", "{a}.topk(1, {d}).indices", "{a}.median({d}).values",
)
REDUCE_ALL = ("{a}.sum()", "{a}.mean()", "{a}.amax()", "{a}.argmin()", "{a}.all()",
              "{a}.float().var()", "{a}.abs().max()", "{a}.norm()", "{a}.prod()")


def reduction(g: Gen) -> str:
    a = g.pick()
    t = g.t(a)
    if t.dim() == 0 or g.rng.random() < 0.2:
        return g.choose(*REDUCE_ALL).format(a=a)
    d = g.dim(a)
    if t.dim() >= 2 and g.rng.random() < 0.15:
        return g.choose("{a}.sum(({d}, {e}))", "{a}.mean(({d}, {e}), keepdim=True)",
                        "{a}.amax(({d}, {e}))").format(a=a, d=0, e=-1)
    if t.dim() >= 1 and g.rng.random() < 0.1:
        return g.choose("F.layer_norm({a}, {a}.shape[-1:])",
                        "F.softmax({a}, dim=-1) * {a}").format(a=a)
    return g.choose(*REDUCE_DIM).format(a=a, d=d)


def _matmul_ok(a: object, b: object) -> bool:
    import torch

    assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
    if a.dim() == 0 or b.dim() == 0 or a.dtype != b.dtype or not a.is_floating_point():
        return False
    k = b.shape[0] if b.dim() == 1 else b.shape[-2]
    return bool(a.shape[-1] == k)


def matmul(g: Gen) -> str:
    a = g.pick(is_float)
    t = g.t(a)
    r = g.rng.random()
    if r < 0.35:
        try:
            b = g.pick_with(a, _matmul_ok)
            return g.choose("{a} @ {b}", "torch.matmul({a}, {b})").format(a=a, b=b)
        except NoCandidate:
            pass
    if t.dim() >= 2 and r < 0.6:
        return g.choose("{a} @ {a}.transpose(-1, -2)", "{a}.mT @ {a}",
                        "torch.einsum('...ij,...kj->...ik', {a}, {a})").format(a=a)
    if t.dim() == 3 and r < 0.7:
        return f"torch.bmm({a}, {a}.transpose(1, 2))"
    if t.dim() >= 1:
        n = int(t.shape[-1])
        k = g.rng.randint(1, 4)
        w = f"torch.linspace(-1, 1, {n * k}, dtype={a}.dtype).view({k}, {n})"
        return g.choose(f"F.linear({a}, {w})", f"{a} @ {w}.t()",
                        f"F.linear({a}, {w}, torch.ones({k}, dtype={a}.dtype))").format(a=a)
    raise NoCandidate


def _slice(g: Gen, a: str) -> str:
    t = g.t(a)
    d = g.rng.randrange(t.dim())
    n = int(t.shape[d])
    s = g.rng.randint(0, max(0, n - 1))
    e = g.rng.randint(s, n)
    step = g.rng.choice((1, 1, 1, 2))
    idx = f"{s}:{e}" + (f":{step}" if step != 1 else "")
    if g.rng.random() < 0.25:
        idx = f"{s}:" if g.rng.random() < 0.5 else f"-{max(1, n - s)}:"
    return f"{a}[{', '.join([':'] * d + [idx])}]"


def view(g: Gen) -> str:
    return view_of(g, g.pick())


def view_of(g: Gen, a: str) -> str:
    """A view expression of ``a``: slice, select, transpose/permute, unsqueeze, expand,
    reshape, unfold, split/chunk/unbind, as_strided, diagonal, detach."""
    t = g.t(a)
    nd = t.dim()
    r = g.rng.random()
    if nd >= 1 and r < 0.22:
        return _slice(g, a)
    if nd >= 1 and r < 0.3:
        d = g.dim(a)
        i = g.index(a, d)
        if d in (0, -nd):
            return f"{a}[{i}]"
        if d in (-1, nd - 1):
            return f"{a}[..., {i}]"
        return f"{a}.select({d}, {i})"
    if nd >= 2 and r < 0.42:
        perm = list(range(nd))
        g.rng.shuffle(perm)
        return g.choose("{a}.transpose({d}, {e})", "{a}.permute({p})", "{a}.mT",
                        "{a}.movedim(0, -1)").format(a=a, d=g.dim(a), e=g.dim(a),
                                                     p=", ".join(map(str, perm)))
    if nd <= 2 and r < 0.46:
        return f"{a}.t()"
    if r < 0.55:
        return g.choose("{a}.unsqueeze({d})", "{a}[None]", "{a}[..., None]").format(
            a=a, d=g.rng.randint(-nd - 1, nd))
    if r < 0.63:
        shape = list(g.shape_of(a))
        new = [g.rng.randint(2, 3) if s == 1 and g.rng.random() < 0.7 else s for s in shape]
        if g.rng.random() < 0.4 or new == shape:
            new = [g.rng.randint(1, 3), *new]
        return f"{a}.expand({', '.join(map(str, new))})"
    if r < 0.72:
        n = t.numel()
        divs = [k for k in range(1, n + 1) if n % k == 0] or [1]
        k = g.rng.choice(divs)
        target = g.rng.choice(((n,), (k, n // k), (n // k, k, 1), (-1,)))
        return g.choose("{a}.view({s})", "{a}.reshape({s})", "{a}.flatten()",
                        "{a}.view(-1)").format(a=a, s=", ".join(map(str, target)))
    if nd >= 1 and r < 0.77:
        d = g.dim(a)
        n = g.size(a, d)
        size = g.rng.randint(1, max(1, n))
        return f"{a}.unfold({d}, {size}, {g.rng.randint(1, 2)})"
    if nd >= 1 and r < 0.87:
        d = g.dim(a)
        n = g.size(a, d)
        k = g.rng.randint(1, max(1, n))
        i = g.rng.randrange(max(1, -(-n // k)))
        return g.choose("{a}.split({k}, {d})[{i}]", "{a}.chunk({k}, {d})[-1]",
                        "{a}.unbind({d})[0]", "torch.split({a}, {k}, dim={d})[{i}]").format(
            a=a, k=k, d=d, i=i)
    if r < 0.93:
        return _as_strided(g, a)
    if nd >= 2 and r < 0.96:
        return g.choose("{a}.diagonal()", "{a}.diagonal(0, -2, -1)").format(a=a)
    return g.choose("{a}.detach()", "{a}.view_as({a})", "{a}.contiguous()", "{a}[...]",
                    "{a}.squeeze()", "{a}.expand_as({a})").format(a=a)


def _as_strided(g: Gen, a: str) -> str:
    t = g.t(a)
    storage = t.untyped_storage().nbytes() // max(1, t.element_size())
    if storage == 0:
        raise NoCandidate
    nd = g.rng.randint(1, 2)
    size = [g.rng.randint(1, 3) for _ in range(nd)]
    stride = sorted((g.rng.choice((0, 1, 2, 3)) for _ in range(nd)), reverse=True)
    extent = sum((s - 1) * st for s, st in zip(size, stride)) + 1
    if extent > storage:
        raise NoCandidate
    off = g.rng.randint(0, storage - extent)
    return f"{a}.as_strided({shape_src(tuple(size))}, {shape_src(tuple(stride))}, {off})"


def _int_list(g: Gen, n: int, k: int) -> str:
    return "[" + ", ".join(str(g.rng.randrange(n)) for _ in range(k)) + "]"


def rows(g: Gen) -> tuple[str, int]:
    """A value with at least one dim and at least one row, and its number of rows."""
    a = g.pick(ndim_at_least(1))
    n = int(g.t(a).shape[0])
    if n == 0:
        raise NoCandidate
    return a, n


def index(g: Gen) -> str:
    a, n0 = rows(g)
    t = g.t(a)
    r = g.rng.random()
    lst = _int_list(g, n0, g.rng.randint(1, 4))
    if r < 0.25:
        return g.choose("{a}[{l}]", "{a}[torch.tensor({l})]",
                        "{a}.index_select(0, torch.tensor({l}))").format(a=a, l=lst)
    if r < 0.4:
        try:
            i = g.pick(is_int)
            return g.choose("{a}[{i} % {n}]", "{a}[{i}.clamp(0, {n} - 1)]").format(a=a, i=i, n=n0)
        except NoCandidate:
            return f"{a}[torch.arange({n0}) % {max(1, n0 // 2)}]"
    if r < 0.52 and t.dim() >= 2:
        n1 = int(t.shape[1])
        if n1 == 0:
            raise NoCandidate
        k = g.rng.randint(1, 3)
        return g.choose("{a}[:, {l1}]", "{a}[{l0}, {l1}]").format(
            a=a, l1=_int_list(g, n1, k), l0=_int_list(g, n0, k))
    if r < 0.64:
        try:
            m = g.pick(lambda x: is_bool(x) and x.shape == t.shape)
            return f"{a}[{m}]"
        except NoCandidate:
            return g.choose("{a}[{a} > 0]", "{a}.masked_select({a} != 0)",
                            "{a}[torch.arange({n}) % 2 == 0]").format(a=a, n=n0)
    if r < 0.76:
        d = g.dim(a)
        n = g.size(a, d)
        if n == 0:
            raise NoCandidate
        shape = list(g.shape_of(a))
        shape[d] = g.rng.randint(1, 3)
        numel = 1
        for s in shape:
            numel *= s
        vals = _int_list(g, n, numel)
        return f"torch.gather({a}, {d}, torch.tensor({vals}).view({', '.join(map(str, shape))}))"
    if r < 0.84 and t.dim() == 2 and is_float(t):
        return f"F.embedding(torch.tensor({lst}), {a})"
    if r < 0.9 and t.numel() > 0:
        return f"{a}.take(torch.tensor({_int_list(g, t.numel(), 3)}))"
    return g.choose("torch.where({a} > 0)[0]", "{a}.nonzero()", "{a}[{a}.bool()]").format(a=a)


def factory(g: Gen) -> str:
    shape = g.small_shape()
    s = ", ".join(map(str, shape))
    n = g.rng.randint(1, 5)
    r = g.rng.random()
    if r < 0.4 and g.env:
        a = g.pick()
        return g.choose("torch.zeros_like({a})", "torch.ones_like({a})", "torch.full_like({a}, 3)",
                        "torch.empty_like({a}).fill_(2)", "{a}.new_zeros({s})",
                        "{a}.new_ones({a}.shape)", "torch.zeros({a}.shape, dtype={a}.dtype)",
                        "torch.arange({a}.numel()).view({a}.shape)",
                        "torch.ones({a}.shape[-1:])").format(a=a, s=s)
    vals = ", ".join(g.choose("1.0", "-2.0", "0.5", "3.0") for _ in range(n))
    ints = ", ".join(str(g.rng.randint(-2, 5)) for _ in range(n))
    return g.choose(
        f"torch.zeros({s})", f"torch.ones({s}, dtype=torch.int64)", f"torch.full(({s}), 1.5)",
        f"torch.arange({n})", f"torch.arange({n}, dtype=torch.float32)", f"torch.arange(0, {n}, 2)",
        f"torch.eye({n})", f"torch.tensor([{vals}])", f"torch.tensor([{ints}])",
        f"torch.linspace(-1, 1, {n})", f"torch.tensor({g.scalar()})", f"torch.empty({s}).fill_(2)",
        f"torch.tril(torch.ones({n}, {n}))", "torch.scalar_tensor(2.5)",
        f"torch.tensor([[{vals}], [{vals}]])",
    )


def join(g: Gen) -> str:
    a = g.pick(ndim_at_least(1))
    t = g.t(a)
    d = g.dim(a)
    r = g.rng.random()
    if r < 0.3:
        def same_but(x: object, y: object) -> bool:
            import torch

            assert isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
            return x.dim() == y.dim() and all(
                p == q for i, (p, q) in enumerate(zip(x.shape, y.shape)) if i != d % x.dim())

        b = g.pick_with(a, same_but)
        return g.choose("torch.cat([{a}, {b}], {d})", "torch.cat(({a}, {b}), dim={d})").format(
            a=a, b=b, d=d)
    if r < 0.5:
        return g.choose("torch.stack([{a}, {a} * 2], {d})", "torch.cat([{a}, {a}.double()], {d})",
                        "torch.stack([{a}, {a}.flip({d})])").format(a=a, d=d)
    if r < 0.75:
        return g.choose("{a}.flip({d})", "{a}.roll(1, {d})", "{a}.repeat({reps})",
                        "F.pad({a}, (1, 2))", "{a}.repeat_interleave(2, {d})").format(
            a=a, d=d, reps=", ".join(["2"] + ["1"] * (t.dim() - 1)))
    if t.dim() >= 2:
        return g.choose("{a}.tril()", "torch.triu({a}, 1)").format(a=a)
    b = g.pick(both(ndim_at_least(1), not_bool))
    return f"torch.outer({a}.flatten().float(), {b}.flatten().float())"


EXPRESSIONS: tuple[tuple[float, Expr], ...] = (
    (20, unary), (18, binary), (12, reduction), (7, matmul), (20, view), (9, index),
    (5, factory), (6, join),
)
