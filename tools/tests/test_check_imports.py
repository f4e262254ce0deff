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
