"""Statement productions: assignments, in-place writes, control flow, graph breaks.

Each returns a :class:`Stmt` (its source lines and the names it defines); the
generator computes what it uses and keeps it only if eager runs it. In-place
statements write to inputs, intermediates, and views of either (``x[1:].mul_(2)``,
``x.t().add_(y)``, ``x[mask] = 0``), which is where aliasing bugs live.
"""

from __future__ import annotations

from collections.abc import Callable

from . import exprs
from .gen import Gen, NoCandidate, broadcastable, is_bool, is_float, ndim_at_least
from .program import Stmt

Production = Callable[[Gen], Stmt]


def expression(g: Gen) -> str:
    weights = [w for w, _ in exprs.EXPRESSIONS]
    for _ in range(8):
        prod = g.rng.choices([p for _, p in exprs.EXPRESSIONS], weights=weights)[0]
        try:
            return prod(g)
        except NoCandidate:
            continue
    raise NoCandidate


def assign(g: Gen) -> Stmt:
    expr = expression(g)
    v = g.fresh()
    return Stmt((f"{v} = {expr}",), (v,))


def unpack(g: Gen) -> Stmt:
    a = g.pick(ndim_at_least(1))
    d = g.dim(a)
    n = g.size(a, d)
    v, w = g.fresh(), g.fresh()
    if n >= 2 and g.rng.random() < 0.5:
        k = g.rng.randint(1, n - 1)
        rhs = g.choose(f"{a}.split([{k}, {n - k}], {d})", f"torch.split({a}, [{k}, {n - k}], {d})")
    elif n == 2:
        rhs = g.choose(f"{a}.unbind({d})", f"{a}.chunk(2, {d})")
    else:
        rhs = g.choose(f"{a}.max({d})", f"torch.sort({a}, {d})", f"{a}.topk(1, {d})",
                       f"torch.var_mean({a}, {d})", f"torch.std_mean({a}, {d})")
    return Stmt((f"{v}, {w} = {rhs}",), (v, w))


INPLACE_SELF = (
    "{a}.mul_({s})", "{a}.clamp_(min=0)", "{a}.relu_()", "{a}.zero_()", "{a}.fill_({s})",
    "{a}.neg_()", "{a}.abs_()", "{a}.sigmoid_()", "{a}.div_(2)", "{a}.masked_fill_({a} > 0, {s})",
    "{a}.exp_()", "{a} *= 2", "{a}.add_(1)", "{a}.sub_({s}, alpha=2)", "{a}.clamp_(-1, 1)",
    "{a}.tanh_()", "{a}.sqrt_()", "{a}.floor_()",
)
INPLACE_OTHER = (
    "{a}.add_({b})", "{a}.sub_({b})", "{a}.copy_({b})", "{a}.mul_({b})", "{a} += {b}",
    "{a}.addcmul_({b}, {b}, value=0.5)", "{a}.lerp_({b}, 0.5)", "{a}.masked_fill_({b} > 0, 1)",
    "{a}.maximum({b}).sub_(1)", "{a}.copy_({b}.detach())",
)


def _target(g: Gen) -> tuple[str, str]:
    """(an in-place target, its base): a live value, or a view of one (``x[1:]``, ``x.t()``)."""
    a = g.pick()
    if g.rng.random() < 0.45:
        return exprs.view_of(g, a), a
    return a, a


def inplace(g: Gen) -> Stmt:
    target, base = _target(g)
    if g.rng.random() < 0.45:
        return Stmt((g.choose(*INPLACE_SELF).format(a=target, s=g.scalar(base)),), kind="inplace")
    b = g.pick_with(base, broadcastable)
    return Stmt((g.choose(*INPLACE_OTHER).format(a=target, b=b),), kind="inplace")


def inplace_indexed(g: Gen) -> Stmt:
    """In-place ops taking indices: index_put_, index_add_, index_fill_, scatter_add_."""
    a = g.pick(ndim_at_least(1))
    t = g.t(a)
    n = int(t.shape[0])
    if n == 0:
        raise NoCandidate
    k = g.rng.randint(1, 3)
    idx = "[" + ", ".join(str(g.rng.randrange(n)) for _ in range(k)) + "]"
    rest = tuple(int(s) for s in t.shape[1:])
    vals = f"torch.ones({', '.join(map(str, (k, *rest)))}, dtype={a}.dtype)"
    line = g.choose(
        f"{a}.index_put_((torch.tensor({idx}),), {vals}, accumulate=True)",
        f"{a}.index_add_(0, torch.tensor({idx}), {vals})",
        f"{a}.index_fill_(0, torch.tensor({idx}), {g.scalar(a)})",
        f"{a}.scatter_add_(0, torch.tensor({idx}).view({k}, *[1] * {len(rest)})"
        f".expand({', '.join(map(str, (k, *rest)))}), {vals})",
    )
    return Stmt((line,), kind="inplace")


def setitem(g: Gen) -> Stmt:
    a, n = exprs.rows(g)
    t = g.t(a)
    r = g.rng.random()
    if r < 0.3:
        idx = str(g.rng.randrange(n))
    elif r < 0.55:
        idx = f"{g.rng.randrange(n)}:"
    elif r < 0.7:
        idx = "[" + ", ".join(sorted({str(g.rng.randrange(n)) for _ in range(2)})) + "]"
    elif r < 0.85:
        idx = g.choose(f"{a} > 0", "..., 0", f"{a} != {a}")
    else:
        idx = ":, 0" if t.dim() >= 2 else "..."
    if g.rng.random() < 0.5:
        rhs = g.scalar(a)
    else:
        rhs = g.pick()
    op = g.choose("=", "=", "+=", "*=")
    return Stmt((f"{a}[{idx}] {op} {rhs}",), kind="inplace")


def foreach(g: Gen) -> Stmt:
    a = g.pick(is_float)
    b = g.pick(is_float, exclude=(a,))
    c = g.pick_with(a, broadcastable)
    d = g.pick_with(b, broadcastable)
    line = g.choose(
        f"torch._foreach_add_([{a}, {b}], [{c}, {d}])",
        f"torch._foreach_mul_([{a}, {b}], 0.5)",
        f"torch._foreach_add_([{a}, {b}], [{c}, {d}], alpha=-0.1)",
        f"torch._foreach_sub_([{a}], [{c}])",
    )
    if g.rng.random() < 0.5:
        return Stmt(("with torch.no_grad():", "    " + line), kind="inplace")
    return Stmt((line,), kind="inplace")


def _two_exprs(g: Gen) -> tuple[str, str]:
    return expression(g), expression(g)


def if_shape(g: Gen) -> Stmt:
    a = g.pick(ndim_at_least(1))
    d = g.dim(a)
    cond = g.choose(f"{a}.shape[{d}] > {g.rng.randint(1, 4)}", f"{a}.dim() == 2",
                    f"{a}.numel() > 8", f"{a}.is_contiguous()", f"{a}.dtype == torch.float32")
    return _branch(g, cond)


def _branch(g: Gen, cond: str) -> Stmt:
    """``if cond: v = e1 else: v = e2`` with two random expressions."""
    e1, e2 = _two_exprs(g)
    v = g.fresh()
    return Stmt((f"if {cond}:", f"    {v} = {e1}", "else:", f"    {v} = {e2}"), (v,),
                kind="branch")


def if_data(g: Gen) -> Stmt:
    a = g.pick()
    cond = g.choose(f"{a}.sum() > 0", f"({a} > 0).any()", f"{a}.float().mean() < 0.5",
                    f"{a}.max() > 1" if g.t(a).numel() else f"{a}.numel() == 0")
    return _branch(g, cond)


def loop(g: Gen) -> Stmt:
    a = g.pick()
    v = g.fresh()
    if g.t(a).dim() >= 1 and g.t(a).shape[0] <= 4 and g.rng.random() < 0.4:
        return Stmt((f"{v} = torch.zeros_like({a}[0])", f"for _row in {a}:",
                     f"    {v} = {v} + _row * 2"), (v,), kind="branch")
    body = g.choose(*exprs.UNARY_FLOAT) if is_float(g.t(a)) else "{a} * 2"
    n = g.rng.randint(1, 3)
    return Stmt((f"{v} = {a}", f"for _i in range({n}):",
                 f"    {v} = " + body.format(a=v) + " + _i"), (v,), kind="branch")


def no_grad(g: Gen) -> Stmt:
    if g.rng.random() < 0.5:
        expr = expression(g)
        v = g.fresh()
        return Stmt(("with torch.no_grad():", f"    {v} = {expr}"), (v,), kind="branch")
    inner = inplace(g)
    return Stmt(("with torch.no_grad():", *("    " + ln for ln in inner.lines)), kind="inplace")


def graph_break(g: Gen) -> Stmt:
    """A Python value read from tensor data (``.item()``, ``float(t)``): both compilers break."""
    a = g.pick(lambda t: t.numel() > 0)
    b = g.pick()
    s = f"_s{g.next_var}"
    v = g.fresh()
    read = g.choose(f"{a}.sum().item()", f"float({a}.float().max())", f"int({a}.argmax())",
                    f"len({a}.tolist())", f"bool(({a} > 0).all())")
    use = g.choose(f"{b} * {s}", f"{b} + {s}", f"{b}.float() * ({s} + 1)")
    return Stmt((f"{s} = {read}", f"{v} = {use}"), (v,), kind="assign")


def side_effect(g: Gen) -> Stmt:
    a = g.pick()
    line = g.choose(f"_trace.append({a}.shape)", f"_trace.append({a}.sum())",
                    f"_trace.append({a}.dtype)")
    return Stmt((line,), kind="effect")


def is_bool_any(g: Gen) -> Stmt:
    """A bool intermediate that later masks can use."""
    a = g.pick(lambda t: not is_bool(t))
    v = g.fresh()
    return Stmt((f"{v} = {a} > {g.choose('0', '0.5', '-1')}",), (v,))


STATEMENTS: tuple[tuple[float, Production], ...] = (
    (46, assign), (4, unpack), (11, inplace), (4, inplace_indexed), (6, setitem), (2, foreach),
    (3, if_shape), (2, if_data), (2, loop), (4, no_grad), (3, graph_break), (1, side_effect),
    (2, is_bool_any),
)
