"""Corpus part 2: the Python around the tensors (calls, closures, loops,
containers, control flow on Python values, strings, globals, side effects)."""

from __future__ import annotations

import dataclasses
import os
import sys

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from capture_harness import Case, check_case


def r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


SCALE = 0.5
ACTS = {"relu": F.relu, "gelu": F.gelu, "tanh": torch.tanh}
COUNTER = {"calls": 0}
STATS: dict[str, object] = {"last": None, "steps": 3}
LOG: list[str] = []


@dataclasses.dataclass
class Config:
    hidden: int = 8
    act: str = "gelu"
    dropout: float = 0.0
    use_bias: bool = True
    eps: float = 1e-5


CFG = Config()


def helper_add(x, y, alpha=1.0):
    return x + alpha * y


def helper_varargs(*xs, scale=1.0, **kw):
    total = xs[0]
    for t in xs[1:]:
        total = total + t
    if kw.get("negate", False):
        total = -total
    return total * scale


def make_scaler(s):
    def scaler(x):
        return x * s

    return scaler


SCALE3 = make_scaler(3.0)


def call_helper(x, y):
    return helper_add(x, y), helper_add(x, y, alpha=2.0), helper_add(x, y=y, alpha=0.5)


def call_varargs(x, y, z):
    return helper_varargs(x, y, z, scale=2.0, negate=True), helper_varargs(x)


def star_call(x, y):
    args = (x, y)
    kwargs = {"alpha": 3.0}
    return helper_add(*args, **kwargs)


def closure_global(x):
    return SCALE3(x)


def nested_closure(x):
    factor = x.shape[0] * 0.5

    def inner(t):
        return t * factor

    return inner(x) + inner(x * 2)


def lambda_map(x):
    f = lambda t: t.relu() + 1  # noqa: E731
    return [f(t) for t in x.unbind(0)]


def nonlocal_counter(x):
    count = 0

    def bump(t):
        nonlocal count
        count += 1
        return t + count

    y = bump(x)
    y = bump(y)
    return y, count


def loop_range(x):
    for i in range(3):
        x = x * 0.5 + i
    return x


def loop_list(x, ws):
    for w in ws:
        x = x @ w
    return x


def loop_enumerate(xs):
    out = []
    for i, t in enumerate(xs):
        out.append(t * (i + 1))
    return torch.stack(out)


def loop_zip(xs, ys):
    return [a + b for a, b in zip(xs, ys)]


def loop_dict(d):
    total = 0
    for k, v in d.items():
        total = total + v.sum() * len(k)
    return total


def loop_dict_keys(d):
    return {k: d[k] * 2 for k in d}


def while_python(x):
    i = 0
    while i < 4:
        x = x + i
        i += 2
    return x


def if_on_shape(x):
    if x.shape[0] > 4:
        return x.sum(0)
    elif x.dim() == 2:
        return x.mean(0)
    return x


def if_on_none(x, bias=None):
    if bias is not None:
        x = x + bias
    return x * 2


def if_on_flag(x, training=False):
    if training:
        x = F.dropout(x, 0.5)
    return x + 1


def isinstance_dispatch(x):
    if isinstance(x, (list, tuple)):
        return torch.stack(list(x))
    if isinstance(x, torch.Tensor):
        return x * 2
    return x


def isinstance_list(xs):
    return isinstance_dispatch(xs), isinstance_dispatch(xs[0])


def len_and_getattr(xs):
    n = len(xs)
    dim = getattr(xs[0], "ndim")  # noqa: B009 - getattr is what is traced
    return sum(xs) / n + dim, hasattr(xs[0], "shape"), hasattr(CFG, "missing")


def min_max_abs(x):
    k = min(3, x.shape[0])
    m = max(x.shape)
    a = abs(-2)
    s = sum([1, 2, 3])
    return x[:k] * m + a + s, round(2.567, 1)


def fstrings(x):
    name = f"layer_{x.shape[0]}"
    key = "{}_{}".format(name, x.dim())  # noqa: UP032 - str.format is what is traced
    label = "%s-%d" % ("x", 3)  # noqa: UP031 - %-format is what is traced
    return x + len(name) + len(key) + len(label), name.upper(), key.split("_"), f"{1.5:.2f}"


def assert_const(x):
    assert x.dim() == 2, "expected a matrix"
    assert isinstance(x, torch.Tensor)
    return x.t()


def no_grad_block(x, w):
    with torch.no_grad():
        y = x @ w
    z = x @ w
    return y, z


def enable_grad_block(x, w):
    with torch.no_grad():
        with torch.enable_grad():
            y = x @ w
        z = y * 2
    return y, z


def set_grad_block(x, w):
    with torch.set_grad_enabled(False):
        y = x @ w
    return y, x @ w


def list_comprehension(x):
    parts = [x[i] * i for i in range(4) if i % 2 == 0]
    return torch.cat(parts)


def nested_comprehension(x):
    return [[x[i, j] for j in range(2)] for i in range(2)]


def dict_build(x):
    d = {"a": x, "b": x * 2}
    d["c"] = d["a"] + d["b"]
    d.update(e=x.sum())
    return d, list(d.keys()), len(d)


def dict_unpack(x):
    base = {"alpha": 1.0, "beta": 2.0}
    merged = {**base, "beta": 3.0}
    return x * merged["alpha"] + merged["beta"], merged.get("gamma", 0.5)


def tuple_unpack(x):
    a, (b, c), *rest = x[0], (x[1], x[2]), x[3], x[3] * 2
    first, *mid, last = range(5)
    return a + b + c + rest[1], first + last + len(mid)


def star_unpack_build(x, y):
    items = [*x.unbind(0), *y.unbind(0)]
    t = (*items, x.sum())
    return len(t), torch.stack(items)


def list_methods(x):
    acc = [x]
    acc.append(x * 2)
    acc.extend([x * 3, x * 4])
    acc.insert(0, x * 0)
    last = acc.pop()
    acc.reverse()
    return torch.stack(acc).sum(0) + last, acc.index(acc[1]) if False else len(acc)


def global_read(x):
    return x * SCALE + CFG.eps


def global_dict_dispatch(x):
    return ACTS[CFG.act](x) + ACTS["relu"](x)


def global_write(x):
    global SCALE
    y = x * SCALE
    SCALE = 0.5
    return y


def mutate_global_dict(x):
    STATS["last"] = x.detach()
    return x * STATS["steps"]


def mutate_passed_list(x, out):
    out.append(x * 2)
    out.append(x.sum())
    return x


def mutate_passed_dict(x, cache):
    cache["y"] = x + 1
    cache.pop("old", None)
    return cache["y"] * 2


def config_object(x):
    h = x * CFG.hidden
    if CFG.use_bias:
        h = h + 1.0
    return F.dropout(h, CFG.dropout, training=False)


def ternary_chain(x):
    n = x.shape[-1]
    mode = "wide" if n > 4 else "narrow"
    k = 1 if 0 < n <= 4 else 2
    return x * k, mode, n if n and k else 0


def walrus(x):
    if (n := x.shape[0]) > 2:
        x = x[: n - 1]
    return x


def bool_logic(x, flag=True, other=None):
    use = flag and other is None
    alt = other or 3
    return x * alt if use else x, not flag


def try_finally(x):
    try:
        y = x + 1
    finally:
        y = y * 2
    return y


def try_except_ok(x):
    try:
        y = x.relu()
    except RuntimeError:
        y = x
    return y


def str_dispatch(x, act="relu"):
    if act == "relu":
        return F.relu(x)
    elif act.startswith("ge"):
        return F.gelu(x)
    return x


def range_attrs(x):
    rg = range(0, x.shape[0], 2)
    return x[list(rg)], len(rg), rg[-1], 2 in rg


def sorted_reversed(x):
    dims = sorted([2, 0, 1], reverse=True)
    order = list(reversed(range(x.dim())))
    return x.permute(*order), dims


def int_float_builtins(x):
    n = int(x.shape[0] / 2)
    f = float(n) + 0.5
    return x * f, bool(n), str(n), divmod(7, n if n else 1)


def any_all(x, flags):
    if any(flags) and not all(flags):
        return x * 2
    return x


def type_checks(x):
    t = type(x)
    return x * 2 if t is torch.Tensor else x, type(1.5) is float  # noqa: UP003


def kwonly_defaults(x, *, scale=2.0, shift=None):
    y = x * scale
    if shift is not None:
        y = y + shift
    return y


def call_kwonly(x):
    return kwonly_defaults(x), kwonly_defaults(x, scale=3.0, shift=1.0)


def recursive_helper(x, depth):
    if depth == 0:
        return x
    return recursive_helper(x * 2, depth - 1) + 1


def call_recursive(x):
    return recursive_helper(x, 3)


def return_none_and_consts(x):
    y = x + 1
    return None, 1, "s", (2, 3.5), torch.float32, y


def nested_containers(x):
    d = {"layers": [x, x * 2], "meta": {"n": 2}}
    return d["layers"][1] + d["meta"]["n"], d


def slice_objects(x):
    s = slice(1, None)
    return x[s], x[::2], x[..., :1]


def tensor_iter(x):
    out = 0
    for row in x:
        out = out + row.max()
    return out


def zip_dict_comprehension(x):
    names = ["q", "k", "v"]
    parts = x.chunk(3, dim=-1)
    d = dict(zip(names, parts))
    return d["q"] @ d["k"].transpose(-1, -2) @ d["v"]


def math_module(x):
    import math

    return x * math.sqrt(2.0) + math.pi - math.floor(2.7) + math.log(math.e)


def enumerate_start(xs):
    return [t * i for i, t in enumerate(xs, start=1)]


def layer_list_python(x, weights, biases):
    for w, b in zip(weights, biases):
        x = F.linear(x, w, b).relu()
    return x


def autocast_block(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        z = F.relu(y)
    return z.float() + 1, z.dtype, (x @ w).dtype


def is_grad_enabled_branch(x):
    if torch.is_grad_enabled():
        return x * 2
    return x


def dict_fromkeys(x: torch.Tensor) -> tuple[torch.Tensor, bool, int]:
    # transformers' cache layers build their state dicts this way
    states = dict.fromkeys(range(3))
    flags = dict.fromkeys(["conv", "rec"], False)
    states[1] = x * 2
    flags["rec"] = True
    n = int.from_bytes(b"\x02", "big") + int(float.fromhex("0x1p0"))
    return states[1] + len(states) + n, states[0] is None and flags["rec"], sum(map(int, flags.values()))


CASES = [
    Case("call_helper", call_helper, lambda n: (r(n), r(n))),
    Case("call_varargs", call_varargs, lambda n: (r(n), r(n), r(n))),
    Case("star_call", star_call, lambda n: (r(n), r(n))),
    Case("closure_global", closure_global, lambda n: (r(n),), ops=1),
    Case("nested_closure", nested_closure, lambda n: (r(n),)),
    Case("lambda_map", lambda_map, lambda n: (r(3, n),)),
    Case("nonlocal_counter", nonlocal_counter, lambda n: (r(n),)),
    Case("loop_range", loop_range, lambda n: (r(n),), ops=6),
    Case("loop_list", loop_list, lambda n: (r(n, 4), [r(4, 4), r(4, 4)])),
    Case("loop_enumerate", loop_enumerate, lambda n: ([r(n), r(n), r(n)],)),
    Case("loop_zip", loop_zip, lambda n: ((r(n), r(n)), (r(n), r(n)))),
    Case("loop_dict", loop_dict, lambda n: ({"ab": r(n), "c": r(n)},)),
    Case("loop_dict_keys", loop_dict_keys, lambda n: ({"ab": r(n), "c": r(n)},)),
    Case("while_python", while_python, lambda n: (r(n),)),
    Case("if_on_shape", if_on_shape, lambda n: (r(n, 2),)),
    Case("if_on_none", if_on_none, lambda n: (r(n),)),
    Case("if_on_none_bias", lambda x, b: if_on_none(x, b), lambda n: (r(n), r(n))),
    Case("if_on_flag", if_on_flag, lambda n: (r(n),)),
    Case("isinstance_list", isinstance_list, lambda n: ([r(n), r(n)],)),
    Case("len_and_getattr", len_and_getattr, lambda n: ([r(n), r(n)],)),
    Case("min_max_abs", min_max_abs, lambda n: (r(n, 2),)),
    Case("fstrings", fstrings, lambda n: (r(n),)),
    Case("assert_const", assert_const, lambda n: (r(n, 2),)),
    Case("no_grad_block", no_grad_block, lambda n: (r(n, 3), r(3, 2).requires_grad_())),
    Case("enable_grad_block", enable_grad_block, lambda n: (r(n, 3), r(3, 2).requires_grad_())),
    Case("set_grad_block", set_grad_block, lambda n: (r(n, 3), r(3, 2).requires_grad_())),
    Case("list_comprehension", list_comprehension, lambda n: (r(n, 2),)),
    Case("nested_comprehension", nested_comprehension, lambda n: (r(n, 2),)),
    Case("dict_build", dict_build, lambda n: (r(n),)),
    Case("dict_unpack", dict_unpack, lambda n: (r(n),)),
    Case("tuple_unpack", tuple_unpack, lambda n: (r(n),)),
    Case("star_unpack_build", star_unpack_build, lambda n: (r(2, n), r(2, n))),
    Case("list_methods", list_methods, lambda n: (r(n),)),
    Case("global_read", global_read, lambda n: (r(n),)),
    Case("global_dict_dispatch", global_dict_dispatch, lambda n: (r(n),)),
    Case("global_write", global_write, lambda n: (r(n),)),
    Case("mutate_global_dict", mutate_global_dict, lambda n: (r(n),)),
    Case("mutate_passed_list", mutate_passed_list, lambda n: (r(n), [])),
    Case("mutate_passed_dict", mutate_passed_dict, lambda n: (r(n), {"old": 1})),
    Case("config_object", config_object, lambda n: (r(n),)),
    Case("ternary_chain", ternary_chain, lambda n: (r(n),)),
    Case("walrus", walrus, lambda n: (r(n),)),
    Case("bool_logic", bool_logic, lambda n: (r(n),)),
    Case("try_finally", try_finally, lambda n: (r(n),)),
    Case("try_except_ok", try_except_ok, lambda n: (r(n),)),
    Case("str_dispatch", str_dispatch, lambda n: (r(n),)),
    Case("str_dispatch_gelu", lambda x: str_dispatch(x, "gelu"), lambda n: (r(n),)),
    Case("range_attrs", range_attrs, lambda n: (r(n),)),
    Case("sorted_reversed", sorted_reversed, lambda n: (r(n, 2, 3),)),
    Case("int_float_builtins", int_float_builtins, lambda n: (r(n),)),
    Case("any_all", any_all, lambda n: (r(n), [True, False])),
    Case("type_checks", type_checks, lambda n: (r(n),)),
    Case("call_kwonly", call_kwonly, lambda n: (r(n),)),
    Case("call_recursive", call_recursive, lambda n: (r(n),)),
    Case("return_none_and_consts", return_none_and_consts, lambda n: (r(n),)),
    Case("nested_containers", nested_containers, lambda n: (r(n),)),
    Case("slice_objects", slice_objects, lambda n: (r(n),)),
    Case("tensor_iter", tensor_iter, lambda n: (r(3, n),)),
    Case("zip_dict_comprehension", zip_dict_comprehension, lambda n: (r(n, 6),)),
    Case("math_module", math_module, lambda n: (r(n),)),
    Case("enumerate_start", enumerate_start, lambda n: ([r(n), r(n)],)),
    Case("layer_list_python", layer_list_python, lambda n: (r(n, 4), [r(4, 4), r(4, 4)], [r(4), r(4)])),
    Case("is_grad_enabled_branch", is_grad_enabled_branch, lambda n: (r(n),)),
    Case("autocast_block", autocast_block, lambda n: (r(n, 4), r(4, 4)), atol=1e-2),
    Case("dict_fromkeys", dict_fromkeys, lambda n: (r(n),)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_python(case: Case) -> None:
    check_case(case)


def test_global_side_effects_replayed() -> None:
    import ember.dynamo as ed
    from ember.dynamo.testing import CompileCounter

    global SCALE
    ed.reset()
    SCALE = 2.0
    cnt = CompileCounter()
    fn = ed.compile(global_write, backend=cnt, fullgraph=True)
    x = r(3)
    torch.testing.assert_close(fn(x), x * 2.0)
    assert SCALE == 0.5
    torch.testing.assert_close(fn(x), x * 0.5)  # SCALE changed: guard fails, recompiles
    assert cnt.frame_count == 2
    LOG.clear()
    out: list[torch.Tensor] = []
    fn2 = ed.compile(mutate_passed_list, backend=cnt, fullgraph=True)
    fn2(x, out)
    assert len(out) == 2
    torch.testing.assert_close(out[0], x * 2)
