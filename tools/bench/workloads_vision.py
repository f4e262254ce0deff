"""The vision-and-diffusion zoo (``integration_tests/models/vision_zoo.py``) as benchmark rows.

One row per zoo model, named ``vision_<model>`` (``--workloads vision`` selects them
all): timm, torchvision and diffusers models built small, random weights, no downloads.
They are extra rows, not part of the default suite; each needs its library (timm,
torchvision or diffusers: ``tools/setup_vision.sh`` makes an environment with all
three). The zoo module is imported from the repository, so the tests and the benchmark
run the very same models and inputs.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from bench.registry import Case, Workload, register_workload
from bench.workloads_zoo import case_of

ROOT = Path(__file__).resolve().parents[2]
ZOO_FILE = ROOT / "integration_tests" / "models" / "vision_zoo.py"
PREFIX = "vision_"
#: the library a model's name starts with -> the module its row needs
_LIBRARIES = {"timm": "timm", "tv": "torchvision", "diffusers": "diffusers"}


def load_vision_zoo() -> ModuleType:
    """``integration_tests.models.vision_zoo`` (it imports its package's ``zoo`` module)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("integration_tests.models.vision_zoo")


def vision_names() -> list[tuple[str, bool]]:
    """(name, is a training case) of every zoo model, read from the file (nothing imported)."""
    text = ZOO_FILE.read_text()
    start = text.index("ZOO: list[ZooModel] = [")
    body = text[start : text.index("\n]\n", start)]
    names = [line.split('"')[1] for line in body.splitlines() if "ZooModel(" in line]
    return [(n, n.endswith("_train")) for n in names]


def _builder(name: str) -> Callable[[str], Case]:
    def build(device: str) -> Case:
        return case_of(load_vision_zoo().build(name), device)

    return build


for _name, _training in vision_names():
    register_workload(
        Workload(
            PREFIX + _name,
            f"vision zoo: {_name} (integration_tests/models/vision_zoo.py)",
            _builder(_name),
            training=_training,
            quick=False,
            suite=False,
            requires=(_LIBRARIES[_name.split("_", 1)[0]],),
            rtol=1e-3,
            atol=1e-3,
        )
    )
