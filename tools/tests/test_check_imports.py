"""The import-boundary checker catches each kind of violation it promises to."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "check_imports", Path(__file__).resolve().parents[1] / "check_imports.py"
)
assert _spec and _spec.loader
check_imports = importlib.util.module_from_spec(_spec)
sys.modules["check_imports"] = check_imports
_spec.loader.exec_module(check_imports)


def _make_pkg(root: Path, name: str, deps: list[str], source: str) -> Path:
    pkg = root / "packages" / name
    (pkg / "src" / "ember" / name).mkdir(parents=True)
    dep_list = ", ".join(f'"{d}"' for d in deps)
    (pkg / "pyproject.toml").write_text(
        f'[project]\nname = "ember-{name}"\nversion = "0.1.0"\ndependencies = [{dep_list}]\n'
    )
    mod = pkg / "src" / "ember" / name / "mod.py"
    mod.write_text(source)
    return mod


@pytest.mark.parametrize(
    "source",
    [
        "import torch._dynamo\n",
        "from torch._inductor import config\n",
        "from torch import _dynamo\n",
        "from torch.fx.experimental.proxy_tensor import make_fx\n",
        "import torch\nf = torch.compile\n",
        "import torch\nx = torch._C._dynamo.eval_frame\n",
    ],
)
def test_compiler_stack_is_rejected(tmp_path: Path, source: str) -> None:
    _make_pkg(tmp_path, "ir", ["torch"], source)
    problems = check_imports.check(tmp_path)
    assert len(problems) >= 1
    assert "compiler stack" in problems[0]


def test_undeclared_and_private_imports(tmp_path: Path) -> None:
    _make_pkg(tmp_path, "ir", ["torch"], "x = 1\n")
    _make_pkg(tmp_path, "minifier", ["ember-ir"], "from ember.ir._graph import X\nimport ember.dynamo\nimport networkx\n")
    problems = "\n".join(check_imports.check(tmp_path))
    assert "private module of ember-ir" in problems
    assert "does not declare ember-dynamo" in problems
    assert "does not declare networkx" in problems


def test_clean_package_and_namespace_rule(tmp_path: Path) -> None:
    _make_pkg(tmp_path, "guards", ["ember-ir>=0.1", "torch"], "import torch\nfrom ember.ir import GuardSet\n")
    assert check_imports.check(tmp_path) == []
    (tmp_path / "packages" / "guards" / "src" / "ember" / "__init__.py").write_text("")
    assert "PEP 420" in check_imports.check(tmp_path)[0]


def test_repository_itself_is_clean() -> None:
    root = Path(__file__).resolve().parents[2]
    assert check_imports.check(root) == []


def _write(pkg_src: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = pkg_src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_import_cycle_inside_a_package_is_rejected(tmp_path: Path) -> None:
    mod = _make_pkg(tmp_path, "dynamo", ["torch"], "x = 1\n")
    _write(mod.parent, {
        "__init__.py": "",
        "a.py": "from .b import g\n\ndef f():\n    return g()\n",
        # the import inside a function closes the loop: it still counts
        "b.py": "def g():\n    from .a import f\n    return f\n",
    })
    problems = check_imports.check(tmp_path)
    assert len(problems) == 1, problems
    assert "import cycle: 2 modules import each other (ember.dynamo.a, ember.dynamo.b)" in problems[0]
    assert "ember.dynamo.a -> ember.dynamo.b -> ember.dynamo.a" in problems[0]


def test_cycle_through_a_package_init_and_absolute_imports(tmp_path: Path) -> None:
    mod = _make_pkg(tmp_path, "inductor", ["torch"], "x = 1\n")
    _write(mod.parent, {
        "__init__.py": "",
        "lowering/__init__.py": "def load():\n    from . import views\n    return views\n",
        "lowering/views.py": "import ember.inductor.lowering as lowering\n",
    })
    problems = "\n".join(check_imports.check(tmp_path))
    assert "(ember.inductor.lowering, ember.inductor.lowering.views)" in problems


def test_type_checking_imports_and_downward_imports_are_no_cycle(tmp_path: Path) -> None:
    mod = _make_pkg(tmp_path, "aotgrad", ["torch"], "x = 1\n")
    _write(mod.parent, {
        "__init__.py": "from .high import h\n",
        "low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .high import h\n",
        "high.py": "from .low import TYPE_CHECKING\n\ndef h():\n    from . import low\n    return low\n",
    })
    assert check_imports.check(tmp_path) == []
