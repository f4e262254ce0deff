"""The transformers model zoo (``integration_tests/models/zoo.py``) as benchmark rows.

One row per zoo model, named ``zoo_<model>`` (``--workloads zoo`` selects them
all). They are extra rows, not part of the default suite: each builds a real
transformers model from a small config (random weights, no downloads) and
needs ``transformers``. The zoo module is loaded from the repository by path,
so the tests and the benchmark run the very same models and inputs.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from bench.registry import Case, Workload, register_workload

ZOO_FILE = Path(__file__).resolve().parents[2] / "integration_tests" / "models" / "zoo.py"
PREFIX = "zoo_"


def load_zoo() -> ModuleType:
    name = "_ember_model_zoo"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ZOO_FILE)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load the model zoo from {ZOO_FILE}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def case_of(case: Any, device: str) -> Case:
    """A zoo entry (``ZooCase``: model, args, kwargs, mode, outputs) as a benchmark case on
    ``device``: inference under ``no_grad`` comparing the picked outputs; training a
    backward from the first output (the loss), comparing outputs and every gradient."""
    model = case.model.to(device)
    args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in case.args)
    kwargs = {
        k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in case.kwargs.items()
    }
    params = [p for p in model.parameters() if p.requires_grad]

    def step(fn: Callable[..., Any], call_args: tuple[Any, ...]) -> list[torch.Tensor]:
        if case.mode == "inference":
            with torch.no_grad():
                return [t.detach() for t in case.outputs(fn(*call_args, **kwargs))]
        for p in params:
            p.grad = None
        outs = case.outputs(fn(*call_args, **kwargs))
        outs[0].backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        return [t.detach() for t in outs] + grads

    return Case(model, [args], step, params=params, kwargs=kwargs)


def _builder(name: str) -> Callable[[str], Case]:
    def build(device: str) -> Case:
        return case_of(load_zoo().build(name), device)

    return build


def zoo_names() -> list[str]:
    """The zoo's model names (without loading transformers)."""
    text = ZOO_FILE.read_text()
    start = text.index("ZOO: tuple[ZooModel, ...] = (")
    body = text[start : text.index("\n)\n", start)]
    return [line.split('"')[1] for line in body.splitlines() if "ZooModel(" in line]


for _name in zoo_names():
    register_workload(
        Workload(
            PREFIX + _name,
            f"transformers zoo: {_name} (integration_tests/models/zoo.py)",
            _builder(_name),
            training=_name.endswith("_train"),
            quick=False,
            suite=False,
            requires=("transformers",),
            rtol=1e-3,
            atol=1e-3,
        )
    )
