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


def _make_ir_with_surface(root: Path) -> None:
    """An ember-ir whose public surface is its __init__'s __all__ plus one listed module."""
    _make_pkg(root, "ir", ["torch"], "x = 1\n")
    src = root / "packages" / "ir" / "src" / "ember" / "ir"
    _write(src, {
        "__init__.py": "from ember.ir import shapes\nfrom ember.ir.graph import GraphIR\n__all__ = ['GraphIR', 'shapes']\n",
        "graph.py": "class GraphIR: ...\n",
        "cache_entry.py": "def store_entry(): ...\n",
        "shapes/__init__.py": "from ember.ir.shapes.shape_env import ShapeEnv\n__all__ = ['ShapeEnv']\n",
        "shapes/shape_env.py": "class ShapeEnv: ...\n",
    })
    with open(root / "packages" / "ir" / "pyproject.toml", "a") as f:
        f.write('\n[tool.ember]\npublic-modules = ["shapes"]\n')


@pytest.mark.parametrize(
    "source, refused",
    [
        ("from ember.ir.shapes.shape_env import ShapeEnv\n", "ember.ir.shapes.shape_env"),
        ("from ember.ir.cache_entry import store_entry\n", "ember.ir.cache_entry"),
        ("import ember.ir.cache_entry\n", "ember.ir.cache_entry"),
        ("from ember.ir.graph import GraphIR\n", "ember.ir.graph"),
        ("from ember.ir import graph\n", "ember.ir.graph"),
        ("from ember.ir import GraphIR, store_entry\n", "ember.ir.store_entry"),
    ],
)
def test_import_outside_the_public_surface_is_rejected(tmp_path: Path, source: str, refused: str) -> None:
    _make_ir_with_surface(tmp_path)
    _make_pkg(tmp_path, "inductor", ["ember-ir"], source)
    problems = check_imports.check(tmp_path)
    assert len(problems) == 1, problems
    assert f"imports {refused}, not public in ember-ir" in problems[0]
    assert "packages/inductor/src/ember/inductor/mod.py:1" in problems[0]


def test_imports_through_the_public_surface_pass(tmp_path: Path) -> None:
    _make_ir_with_surface(tmp_path)
    source = (
        "import ember.ir\nimport ember.ir.shapes\nfrom ember.ir import GraphIR, shapes\n"
        "from ember.ir.shapes import ShapeEnv\n"
    )
    _make_pkg(tmp_path, "inductor", ["ember-ir"], source)
    assert check_imports.check(tmp_path) == []
    # inside its own package every module may be imported
    _write(tmp_path / "packages" / "ir" / "src" / "ember" / "ir", {"user.py": "from ember.ir.cache_entry import store_entry\n"})
    assert check_imports.check(tmp_path) == []


def test_listed_public_module_must_exist(tmp_path: Path) -> None:
    _make_ir_with_surface(tmp_path)
    text = (tmp_path / "packages" / "ir" / "pyproject.toml").read_text().replace('["shapes"]', '["shapes", "gone"]')
    (tmp_path / "packages" / "ir" / "pyproject.toml").write_text(text)
    assert check_imports.check(tmp_path) == ["packages/ir/pyproject.toml: public module 'gone' is no module of ember.ir"]


def _copy_repo(tmp_path: Path) -> Path:
    import shutil

    root = Path(__file__).resolve().parents[2]
    skip = shutil.ignore_patterns("__pycache__", "tests", "*.so", "*.c", "*.cpp", "*.md", "*.typed")
    shutil.copytree(root / "packages", tmp_path / "packages", ignore=skip)
    shutil.copytree(root / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("*.png", "decisions"))
    return tmp_path


def test_a_private_import_added_to_the_repository_fails(tmp_path: Path) -> None:
    root = _copy_repo(tmp_path)
    assert check_imports.check(root) == []
    target = root / "packages" / "dynamo" / "src" / "ember" / "dynamo" / "shapes.py"
    target.write_text(target.read_text() + "\nfrom ember.ir.shapes.shape_env import ShapeEnv as _Env  # noqa\n")
    problems = check_imports.check(root)
    assert len(problems) == 1, problems
    assert problems[0].startswith("packages/dynamo/src/ember/dynamo/shapes.py:")
    assert "imports ember.ir.shapes.shape_env, not public in ember-ir" in problems[0]


_DOC = """# architecture

<!-- layers of ember.dynamo: tools/check_imports.py reads this table -->

| layer | modules |
|---|---|
| leaves | `errors`, `config` (notes like `this` are comments) |
| capture | `sub/`: `a` < `b` |
| public API | `api` < `__init__` |
"""


def _layered_pkg(tmp_path: Path, doc: str, files: dict[str, str]) -> Path:
    mod = _make_pkg(tmp_path, "dynamo", ["torch"], "x = 1\n")
    mod.unlink()
    _write(mod.parent, {"__init__.py": "from .api import f\n", "api.py": "def f(): ...\n",
                        "errors.py": "", "config.py": "from . import errors\n",
                        "sub/a.py": "", "sub/b.py": "from . import a\n", **files})
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "architecture.md").write_text(doc)
    return tmp_path


def test_layer_table_true_to_the_code_passes(tmp_path: Path) -> None:
    assert check_imports.check(_layered_pkg(tmp_path, _DOC, {})) == []


def test_module_in_no_layer_fails(tmp_path: Path) -> None:
    problems = check_imports.check(_layered_pkg(tmp_path, _DOC, {"newcomer.py": ""}))
    assert problems == [
        "docs/architecture.md, layers of ember.dynamo: module `newcomer` is in no layer; add it to the table"
    ]


def test_layer_naming_no_module_and_upward_imports_fail(tmp_path: Path) -> None:
    doc = _DOC.replace("`errors`, `config`", "`errors`, `config`, `gone`")
    problems = check_imports.check(_layered_pkg(tmp_path, doc, {"sub/a.py": "from . import b\n", "sub/b.py": ""}))
    assert len(problems) == 2, problems
    assert "`gone` (layer 'leaves') is no module of ember.dynamo" in problems[0]
    assert "ember.dynamo.sub.a (layer 'capture') imports ember.dynamo.sub.b (layer 'capture'), which is above it" in problems[1]
    # a deferred import up the table counts too
    problems = check_imports.check(_layered_pkg(tmp_path / "2", _DOC, {"errors.py": "def f():\n    from . import api\n"}))
    assert problems and "imports ember.dynamo.api (layer 'public API')" in problems[0]


def test_missing_layer_table_fails(tmp_path: Path) -> None:
    problems = check_imports.check(_layered_pkg(tmp_path, "# architecture\n", {}))
    assert problems == ["docs/architecture.md, layers of ember.dynamo: no table (a line '<!-- layers of ember.dynamo -->' before it)"]


def test_repository_layer_table_catches_a_new_module(tmp_path: Path) -> None:
    root = _copy_repo(tmp_path)
    (root / "packages" / "dynamo" / "src" / "ember" / "dynamo" / "newcomer.py").write_text("")
    assert check_imports.check(root) == [
        "docs/architecture.md, layers of ember.dynamo: module `newcomer` is in no layer; add it to the table"
    ]
