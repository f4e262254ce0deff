"""The public API end to end: compile/optimize on functions, methods and modules,
compared against eager, with counted graphs."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import ember.dynamo
from ember.dynamo import CompileOptionsError, InvalidBackendError, OptimizedModule
from ember.dynamo.testing import CompileCounter, CompileCounterWithBackend


@pytest.fixture(autouse=True)
def _reset() -> Any:
    yield
    ember.dynamo.reset()


def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = torch.cos(x)
    b = torch.sin(y)
    return a + b


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 2)
        self.scale = 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x))) * self.scale


def test_compile_function_matches_eager_and_caches() -> None:
    cnt = CompileCounter()
    cfn = ember.dynamo.compile(fn, backend=cnt)
    for _ in range(3):
        x, y = torch.randn(10), torch.randn(10)
        torch.testing.assert_close(cfn(x, y), fn(x, y))
    assert cnt.frame_count == 1
    assert cnt.op_count == 3
    cfn(torch.randn(3), torch.randn(3))
    assert cnt.frame_count == 2
    assert cfn.__name__ == "fn" and cfn.__wrapped__ is fn


def test_compile_as_decorator_with_and_without_arguments() -> None:
    cnt = CompileCounter()

    @ember.dynamo.compile(backend=cnt)
    def g(x: torch.Tensor) -> torch.Tensor:
        return x.relu() + 1

    x = torch.randn(5)
    torch.testing.assert_close(g(x), x.relu() + 1)
    assert cnt.frame_count == 1

    @ember.dynamo.compile
    def h(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    assert isinstance(h, ember.dynamo.CompiledFunction)


def test_eager_backend_by_name() -> None:
    cfn = ember.dynamo.compile(fn, backend="eager")
    x, y = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(cfn(x, y), fn(x, y))


def test_compile_module_shares_state() -> None:
    torch.manual_seed(0)
    mod = MLP()
    cnt = CompileCounter()
    opt = ember.dynamo.compile(mod, backend=cnt)
    assert isinstance(opt, OptimizedModule)
    x = torch.randn(3, 4)
    torch.testing.assert_close(opt(x), mod(x))
    torch.testing.assert_close(opt(x), mod(x))
    assert cnt.frame_count == 1
    assert list(opt.state_dict()) == list(mod.state_dict())
    assert [p is q for p, q in zip(opt.parameters(), mod.parameters())] == [True] * 4
    assert opt.fc1 is mod.fc1 and opt.scale == 2.0
    opt.scale = 3.0
    assert mod.scale == 3.0
    torch.testing.assert_close(opt(x), mod(x))  # the attribute change recompiled or was read live
    with torch.no_grad():
        mod.fc1.weight.zero_()
    torch.testing.assert_close(opt(x), mod(x))
    opt.eval()
    assert mod.training is False and opt.training is False
    opt.training = True
    assert mod.training is True
    opt.extra = torch.nn.Linear(1, 1)
    assert mod.extra is opt.extra
    opt.eval()
    sd = {k: torch.zeros_like(v) for k, v in mod.state_dict().items()}
    opt.load_state_dict(sd)
    assert float(mod.fc2.bias.detach().abs().sum()) == 0.0


def test_compile_bound_method_and_method_decorator() -> None:
    cnt = CompileCounter()
    mod = MLP()
    fwd = ember.dynamo.compile(mod.forward, backend=cnt)
    x = torch.randn(2, 4)
    torch.testing.assert_close(fwd(x), mod(x))

    class Scaler:
        def __init__(self, k: float) -> None:
            self.k = k

        @ember.dynamo.optimize(cnt)
        def apply(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.k

    s = Scaler(3.0)
    torch.testing.assert_close(s.apply(x), x * 3.0)


def test_optimize_decorator_and_nopython() -> None:
    cnt = CompileCounter()

    @ember.dynamo.optimize(cnt, nopython=True)
    def g(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.cos(a) + torch.sin(b)

    a, b = torch.randn(10), torch.randn(10)
    torch.testing.assert_close(g(a, b), torch.cos(a) + torch.sin(b))
    assert cnt.frame_count == 1
    assert ember.dynamo.api.options_of(g).fullgraph is True


def test_optimize_disable_leaves_function() -> None:
    assert ember.dynamo.optimize("eager", disable=True)(fn) is fn
    assert ember.dynamo.compile(fn, disable=True) is fn


def test_unknown_backend_lists_installed_ones() -> None:
    with pytest.raises(InvalidBackendError) as info:
        ember.dynamo.compile(fn, backend="inductr")
    message = str(info.value)
    assert message.startswith("unknown ember backend 'inductr'; installed backends: ")
    assert "eager" in message


def test_unknown_options_and_mode_are_named() -> None:
    with pytest.raises(CompileOptionsError, match="unknown options key\\(s\\) 'max_autotun'"):
        ember.dynamo.compile(fn, backend="eager", options={"max_autotun": True})
    with pytest.raises(CompileOptionsError, match="unknown mode 'fastest'"):
        ember.dynamo.compile(fn, backend="eager", mode="fastest")
    with pytest.raises(CompileOptionsError, match="either mode or options"):
        ember.dynamo.compile(fn, backend="eager", mode="default", options={"x": 1})


def test_options_naming_dynamo_settings_apply() -> None:
    cfn = ember.dynamo.compile(fn, backend="eager", options={"cache_size_limit": 3})
    assert ember.dynamo.api.options_of(cfn).cache_size_limit == 3


def test_backend_configure_hook_receives_mode_and_options() -> None:
    seen: list[Any] = []

    class Configurable:
        def __call__(self, gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Any:
            return gm.forward

        def configure(self, mode: str | None, options: dict[str, Any]) -> Any:
            seen.append((mode, options))
            return self

    ember.dynamo.compile(fn, backend=Configurable(), mode="max-autotune")
    ember.dynamo.compile(fn, backend=Configurable(), options={"trace": True})
    assert seen == [("max-autotune", {}), (None, {"trace": True})]


def test_config_snapshot_at_compile_time() -> None:
    old = ember.dynamo.config.cache_size_limit
    ember.dynamo.config.cache_size_limit = 1
    try:
        cfn = ember.dynamo.compile(fn, backend="eager")
    finally:
        ember.dynamo.config.cache_size_limit = old
    assert ember.dynamo.api.options_of(cfn).cache_size_limit == 1
    with pytest.raises(AttributeError, match="has no setting 'cache_limit'"):
        ember.dynamo.config.cache_limit = 3


def test_compile_rejects_builtins() -> None:
    with pytest.raises(TypeError, match="builtins and C functions have no bytecode"):
        ember.dynamo.compile(torch.cos, backend="eager")


def test_disable_runs_eagerly_and_unwraps() -> None:
    cfn = ember.dynamo.compile(fn, backend=CompileCounter())
    plain = ember.dynamo.disable(cfn)
    x, y = torch.randn(2), torch.randn(2)
    torch.testing.assert_close(plain(x, y), fn(x, y))
    assert ember.dynamo.api.is_disabled(plain)
    assert ember.dynamo.compile(plain, backend="eager") is plain


def test_allow_and_disallow_registries() -> None:
    def helper(x: torch.Tensor) -> torch.Tensor:
        return x

    assert ember.dynamo.allow_in_graph(helper) is helper
    assert ember.dynamo.api.is_allowed_in_graph(helper)
    ember.dynamo.disallow_in_graph(helper)
    assert not ember.dynamo.api.is_allowed_in_graph(helper)
    assert ember.dynamo.api.is_disallowed_in_graph(helper)


def test_graph_break_and_is_compiling_are_noops_eagerly() -> None:
    assert ember.dynamo.graph_break() is None
    assert ember.dynamo.is_compiling() is False


def test_recompiles_on_changed_global() -> None:
    cnt = CompileCounter()
    cfn = ember.dynamo.compile(uses_global, backend=cnt)
    x = torch.randn(3)
    global SCALE
    torch.testing.assert_close(cfn(x), x * SCALE)
    SCALE = 5.0
    try:
        torch.testing.assert_close(cfn(x), x * 5.0)
    finally:
        SCALE = 2.0
    torch.testing.assert_close(cfn(x), x * 2.0)


SCALE = 2.0


def uses_global(x: torch.Tensor) -> torch.Tensor:
    return x * SCALE


def test_recompiles_on_grad_mode_dtype_requires_grad() -> None:
    cnt = CompileCounter()
    cfn = ember.dynamo.compile(fn, backend=cnt)
    x, y = torch.randn(4), torch.randn(4)
    cfn(x, y)
    with torch.no_grad():
        cfn(x, y)
    cfn(x.double(), y.double())
    xr = torch.randn(4, requires_grad=True)
    out = cfn(xr, y)
    out.sum().backward()
    assert xr.grad is not None
    torch.testing.assert_close(xr.grad, -torch.sin(xr.detach()))
    assert cnt.frame_count == 4


def _grad_mode_decorator(name: str) -> Any:
    """A grad-mode object to decorate with; ``set_grad_enabled(b)`` sets the mode when
    made, so it is made inside a block that restores the mode."""
    with torch.enable_grad():
        return {
            "no_grad": torch.no_grad,
            "enable_grad": torch.enable_grad,
            "set_grad_enabled": lambda: torch.set_grad_enabled(False),
        }[name]()


@pytest.mark.parametrize("name", ["no_grad", "enable_grad", "set_grad_enabled"])
def test_grad_mode_decorators_are_captured(name: str) -> None:
    @_grad_mode_decorator(name)
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.sin() + 1

    cnt = CompileCounter()
    x = torch.randn(4, requires_grad=True)
    for outer in (torch.no_grad, torch.enable_grad):
        with outer():
            got, want = ember.dynamo.compile(f, backend=cnt)(x), f(x)
        torch.testing.assert_close(got, want)
        assert got.requires_grad == want.requires_grad
    # torch's decorator wrapper is traced; grad mode is guarded, so each outer mode has its
    # graph. An enable_grad graph called under no_grad switches grad on: it runs as its FX
    # graph, not given to the backend (a backend compiling under no_grad would build no
    # backward for it; fuzz seed 4020, ADR 0029)
    assert cnt.frame_count == (1 if name == "enable_grad" else 2)
    assert torch.is_grad_enabled()


def test_set_grad_enabled_decorators_with_different_modes_do_not_share_a_graph() -> None:
    def g(x: torch.Tensor) -> torch.Tensor:
        return x.sin() + 1

    # both wrappers run torch's one `decorate_context` code, with the same inner function
    off = _grad_mode_decorator("set_grad_enabled")(g)
    with torch.enable_grad():
        on = torch.set_grad_enabled(True)(g)
    x = torch.randn(4, requires_grad=True)
    assert not ember.dynamo.compile(off, backend=CompileCounter())(x).requires_grad
    assert ember.dynamo.compile(on, backend=CompileCounter())(x).requires_grad
    assert torch.is_grad_enabled()


def test_inference_mode_decorator_is_captured_as_grad_mode_off() -> None:
    @torch.inference_mode()
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.sin() + 1

    x = torch.randn(4, requires_grad=True)
    cnt = CompileCounter()
    got, want = ember.dynamo.compile(f, backend=cnt)(x), f(x)
    torch.testing.assert_close(got, want)
    assert not got.requires_grad and cnt.frame_count == 1
    # the documented difference: a graph's outputs are not inference tensors
    assert want.is_inference() and not got.is_inference()
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_inference_mode_block_inside_a_graph(backend: str) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * w
        with torch.inference_mode():
            z = y.sin() + w
        return y * 2, z

    cnt = CompileCounterWithBackend(backend)
    x, w = torch.randn(5), torch.randn(5, requires_grad=True)
    (y, z), (ey, ez) = ember.dynamo.compile(f, backend=cnt, fullgraph=True)(x, w), f(x, w)
    torch.testing.assert_close((y, z), (ey, ez))
    assert (y.requires_grad, z.requires_grad) == (True, False)
    y.sum().backward()
    torch.testing.assert_close(w.grad, 2 * x)
    assert cnt.frame_count == 1 and torch.is_grad_enabled()


def test_optimized_module_runs_the_originals_hooks_and_moves_its_params() -> None:
    mod = MLP()
    seen: list[tuple[int, ...]] = []
    mod.register_forward_hook(lambda m, inp, out: seen.append(tuple(out.shape)))
    opt = ember.dynamo.compile(mod, backend=CompileCounter())
    x = torch.randn(5, 4)
    torch.testing.assert_close(opt(x), mod(x))
    assert seen == [(5, 2), (5, 2)]
    opt.to(torch.float64)
    assert mod.fc1.weight.dtype == torch.float64
    torch.testing.assert_close(opt(x.double()), mod(x.double()))
    assert "fc1" in dir(opt) and "OptimizedModule(MLP(" in repr(opt)


def test_options_not_implemented_are_a_clear_error() -> None:
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return x * n

    with pytest.raises(CompileOptionsError, match=r"specialize_int=False is not implemented"):
        ember.dynamo.compile(f, backend="eager", options={"specialize_int": False})
    old = ember.dynamo.config.specialize_int
    ember.dynamo.config.specialize_int = False
    try:
        with pytest.raises(CompileOptionsError, match=r"Leave specialize_int at True"):
            ember.dynamo.compile(f, backend="eager")
        with pytest.raises(CompileOptionsError, match=r"specialize_int=False"):
            ember.dynamo.optimize("eager")
    finally:
        ember.dynamo.config.specialize_int = old
    x = torch.ones(3)
    torch.testing.assert_close(ember.dynamo.compile(f, backend="eager")(x, 3), f(x, 3))


def test_mode_with_a_backend_without_configure_says_it_changes_nothing() -> None:
    with pytest.warns(UserWarning, match="mode='max-autotune' changes nothing with backend 'eager'"):
        ember.dynamo.compile(fn, backend="eager", mode="max-autotune")


def test_configure_value_errors_become_compile_options_errors() -> None:
    class Picky:
        def __call__(self, gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Any:
            return gm.forward

        def configure(self, mode: str | None, options: dict[str, Any]) -> Any:
            raise ValueError("unknown options key 'x'")

    with pytest.raises(CompileOptionsError, match="unknown options key 'x'"):
        ember.dynamo.compile(fn, backend=Picky(), options={"x": 1})


def test_backends_table() -> None:
    from ember.dynamo import BACKENDS

    assert {"eager", "aot_eager", "inductor"} <= set(BACKENDS)
    assert BACKENDS["eager"] is ember.dynamo.eager
    assert BACKENDS.get("nvfuser") is None
    with pytest.raises(KeyError, match="unknown ember backend 'nvfuser'"):
        BACKENDS["nvfuser"]


def test_explain_older_four_tuple_form() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        ember.dynamo.graph_break()
        return y.cos()

    explanation, out_guards, graphs, ops_per_graph = ember.dynamo.explain(f, torch.ones(3))
    assert explanation.startswith("ember.dynamo produced 2 graphs, with 1 graph break and 2 ops.")
    assert len(graphs) == 2 and ops_per_graph == [["<method sin>"], ["<method cos>"]]
    assert len(out_guards) == 2


def test_run_holds_for_resume_functions_too() -> None:
    counter = CompileCounter()

    def branchy(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        if y.sum() > 0:
            return y + 1
        return y - 1

    compiled = ember.dynamo.compile(branchy, backend=counter)
    compiled(torch.ones(3))
    seen = counter.frame_count
    frozen = ember.dynamo.run(compiled)
    torch.testing.assert_close(frozen(-torch.ones(3)), branchy(-torch.ones(3)))
    assert counter.frame_count == seen
    assert frozen.__name__ == "branchy"


def test_torch_compiler_disable_runs_eagerly_from_compiled_code() -> None:
    # torch.compiler.disable's function was traced into (its body reached the backend,
    # is_compiling() was True inside it); now it runs eagerly, and its recursive=False
    # form runs only its own frame eagerly, capturing what it calls
    seen: list[Any] = []

    def inner(t: torch.Tensor) -> torch.Tensor:
        seen.append(("inner", torch.compiler.is_compiling()))
        return t.cos()

    @torch.compiler.disable
    def helper(t: torch.Tensor) -> torch.Tensor:
        seen.append(("helper", torch.compiler.is_compiling()))
        return inner(t) * 2

    @torch.compiler.disable(recursive=False)
    def shallow(t: torch.Tensor) -> torch.Tensor:
        seen.append(("shallow", torch.compiler.is_compiling()))
        return inner(t) * 2

    x = torch.randn(3)
    for fn, want in ((helper, [("helper", False), ("inner", False)]),
                     (shallow, [("shallow", False), ("inner", True)])):
        seen.clear()
        cnt = CompileCounter()
        got = ember.dynamo.compile(lambda t, fn=fn: fn(t.sin()) + 1, backend=cnt)(x)
        assert seen == want
        torch.testing.assert_close(got, (x.sin().cos() * 2) + 1)
        assert cnt.op_count == 2 + (1 if fn is shallow else 0)  # sin; + 1; (cos inside shallow)
