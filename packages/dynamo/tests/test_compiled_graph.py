"""The backend resolved once and the wrappers around a compiled graph composed in one place.

``backends.resolve_backend`` turns ``compile``'s ``backend``/``mode``/``options`` into one
``Backend`` that the ``Runtime`` holds; ``compiled_graph.GraphCompiler`` (the runtime's
``compiler``) wraps every backend result in the same order, for functions, stored frames
and optimizer steps alike; ``graph_entry`` installs a frame's graphs for both producers.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import ember.dynamo
from ember.dynamo.api import STATE, make_runtime
from ember.dynamo.backends import Backend, CompileOptionsError, resolve_backend
from ember.dynamo.compiled_graph import GraphCompiler, graph_entry, rebound
from ember.dynamo.config import config
from ember.dynamo.eager_fallback import AliasChecked, EagerOnError, LeavingGradMode
from ember.dynamo.function_entry import Runtime


@pytest.fixture(autouse=True)
def _reset() -> Any:
    yield
    ember.dynamo.set_stance("default")
    ember.dynamo.reset()


def _gm(fn: Any, *args: Any) -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(fn)


class _Configurable:
    """A backend with a ``configure`` hook that records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[Any, Any]] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        return gm.forward

    def configure(self, mode: str | None, options: dict[str, Any]) -> Any:
        self.asked.append((mode, dict(options)))
        return self


def test_resolve_backend_is_one_object_with_name_compiler_mode_and_options() -> None:
    resolved = resolve_backend("eager")
    assert isinstance(resolved, Backend)
    assert resolved.name == "eager" and resolved.spec == "eager"
    assert resolved.compiler is ember.dynamo.eager
    assert resolved.mode is None and dict(resolved.options) == {}

    mine = _Configurable()
    resolved = resolve_backend(mine, "max-autotune")
    assert mine.asked == [("max-autotune", {})]  # configured once
    assert resolved.mode == "max-autotune" and resolved.spec is mine
    resolved = resolve_backend(mine, "default", {"k": 1})
    assert mine.asked[-1] == (None, {"k": 1})  # "default" configures no mode
    assert dict(resolved.options) == {"k": 1}
    with pytest.raises(CompileOptionsError, match="unknown options key"):
        resolve_backend("eager", None, {"nope": 1})


def test_runtime_holds_the_resolved_backend_and_one_graph_compiler() -> None:
    runtime = make_runtime("eager", options={"cache_size_limit": 3})
    assert isinstance(runtime.backend, Backend) and runtime.backend.name == "eager"
    assert isinstance(runtime.compiler, GraphCompiler)
    assert runtime.compiler.backend is runtime.backend
    # a bare backend function is taken as it is
    bare = Runtime(ember.dynamo.eager, config.to_options(), convert=lambda *a: None, state=STATE)
    assert bare.backend.compiler is ember.dynamo.eager and bare.backend.name == "eager"


def test_optimizer_steps_compile_through_the_runtimes_compiler() -> None:
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([p], lr=0.1)
    step = ember.dynamo.compile(opt.step, backend="eager", options={"cache_size_limit": 5})
    assert isinstance(step._compiler, GraphCompiler)
    assert step._compiler.backend.name == "eager"
    assert step._limit == 5 and step._state is STATE


def _compiler(strict: bool = False) -> GraphCompiler:
    options = config.to_options(strict=strict)
    return GraphCompiler(Backend.of(ember.dynamo.eager), options, STATE)


def test_layers_compose_in_order() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.call_function(torch._C._set_grad_enabled, (False,))
    graph.output(graph.call_function(torch.add, (x, 1)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)  # a graph that leaves grad mode off
    compiled = _compiler()(gm, [torch.ones(2)])
    # layer 4 outside layer 3
    assert type(compiled) is LeavingGradMode and type(compiled.compiled) is EagerOnError
    with torch.enable_grad():
        torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))
        assert not torch.is_grad_enabled()
    torch._C._set_grad_enabled(True)
    # strict: no eager fallback layer
    plain = _compiler(strict=True)(_gm(lambda x: x * 2), [torch.ones(2)])
    assert type(plain) is not EagerOnError


def test_a_failing_backend_leaves_the_fx_graph() -> None:
    def broken(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        raise RuntimeError("backend bug")

    gm = _gm(lambda x: x * 2)
    compiler = GraphCompiler(Backend.of(broken), config.to_options(strict=False), STATE)
    compiled = compiler(gm, [torch.ones(2)])
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))
    with pytest.raises(RuntimeError, match="backend bug"):
        GraphCompiler(Backend.of(broken), config.to_options(strict=True), STATE)(gm, [torch.ones(2)])


def test_rebound_reaches_through_the_eager_fallback() -> None:
    gm = _gm(lambda x: x * 2)
    compiled = _compiler()(gm, [torch.ones(2)])
    other = _gm(lambda x: x * 2)
    again = rebound(compiled, {}, other)
    assert type(again) is EagerOnError and again.gm is other


def test_graph_entry_checks_aliasing_unless_guarded_and_installs_a_global() -> None:
    def add_(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a.add_(b)

    f_globals: dict[str, Any] = {}
    gm = _gm(add_)
    made = graph_entry(gm, [torch.ones(2), torch.ones(2)], (0,), lambda: gm.forward, f_globals,
                       alias_guarded=False, sources=[None, None], attr_sources={})
    assert type(made.compiled) is AliasChecked and f_globals[made.name] is made.compiled
    assert made.mutated == (0,) and gm.meta["ember_mutated_inputs"] == (0,)
    guarded = graph_entry(gm, [torch.ones(2), torch.ones(2)], (0,), lambda: gm.forward, f_globals,
                          alias_guarded=True, sources=[None, None], attr_sources={})
    assert guarded.compiled == gm.forward and guarded.name != made.name
