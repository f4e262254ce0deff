"""The compilers under test: any ``torch.compile``-style backend behind ember.dynamo or
TorchDynamo, by name (``ember-inductor``, ``torch-aot_eager``, ...) or as a callable.

``ember-<name>`` is ``ember.dynamo.compile(fn, backend=<name>)``;
``torch-<name>`` is ``torch.compile(fn, backend=<name>)``. A backend callable
``backend(gm, example_inputs)`` can be put behind either frontend
(:func:`ember_with`, :func:`torch_with`), which is how the fuzzer's own tests
plant bugs, and how ember's inductor is measured behind TorchDynamo
(``torch-ember-inductor``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Fn = Callable[..., Any]


@dataclass(frozen=True)
class Backend:
    name: str
    compile: Callable[[Fn], Fn]
    reset: Callable[[], None]


def _ember_reset() -> None:
    import ember.dynamo

    ember.dynamo.reset()


def _torch_reset() -> None:
    import torch._dynamo

    torch._dynamo.reset()


def ember_with(backend: Any, name: str | None = None) -> Backend:
    """ember.dynamo in front of ``backend`` (a name ember knows, or a callable)."""

    def compile_fn(fn: Fn) -> Fn:
        import ember.dynamo

        compiled: Fn = ember.dynamo.compile(fn, backend=backend)
        return compiled

    label = name or f"ember-{backend if isinstance(backend, str) else backend.__name__}"
    return Backend(label, compile_fn, _ember_reset)


def torch_with(backend: Any, name: str | None = None) -> Backend:
    """TorchDynamo (``torch.compile``) in front of ``backend``."""

    def compile_fn(fn: Fn) -> Fn:
        import torch

        return torch.compile(fn, backend=backend)

    label = name or f"torch-{backend if isinstance(backend, str) else backend.__name__}"
    return Backend(label, compile_fn, _torch_reset)


NAMES = ("ember-eager", "ember-aot_eager", "ember-inductor", "torch-eager", "torch-aot_eager",
         "torch-inductor", "torch-ember-inductor")


def get_backend(name: str) -> Backend:
    """A backend by name: ``ember-<ember backend>``, ``torch-<torch backend>``, or
    ``torch-ember-inductor`` (TorchDynamo in front of ember.inductor)."""
    if name == "torch-ember-inductor":
        import ember.inductor

        return torch_with(ember.inductor.backend, name)
    frontend, _, inner = name.partition("-")
    if frontend == "ember" and inner:
        return ember_with(inner, name)
    if frontend == "torch" and inner:
        return torch_with(inner, name)
    raise ValueError(f"unknown backend {name!r}: use ember-<name> or torch-<name> "
                     f"(e.g. {', '.join(NAMES)})")
