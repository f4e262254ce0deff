"""Enforce ember's import boundaries (DESIGN.md, "Who may import whom").

Fails (exit 1, one line per problem) when code under ``packages/*/src``:

- imports torch's compiler stack (the modules ember re-implements);
- imports another ember package's private modules (``ember.X._foo``);
- imports an ember package, or a third-party distribution among the known
  optional ones, that its ``pyproject.toml`` does not declare (optional
  extras count as declared);
- or when a package ships ``src/ember/__init__.py`` (ember is a PEP 420 namespace).

Usage: ``python tools/check_imports.py [repo_root]``.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

FORBIDDEN = (
    "torch._dynamo",
    "torch._inductor",
    "torch._functorch.aot_autograd",
    "torch._functorch.partitioners",
    "torch._functorch._aot_autograd",
    "torch.compile",
    "torch.export",
    "torch._export",
    "torch._guards",
    "torch._logging",
    "torch.fx.experimental.proxy_tensor",
    "torch.fx.experimental.symbolic_shapes",
    "torch._C._dynamo",
)

# Third-party imports whose distribution must be declared by the importing package.
TRACKED_THIRD_PARTY = {
    "networkx": "networkx",
    "sympy": "sympy",
    "safetensors": "safetensors",
    "bytecode": "bytecode",
    "triton": "triton",
    "numpy": "numpy",
}


def _forbidden(module: str) -> str | None:
    for bad in FORBIDDEN:
        if module == bad or module.startswith(bad + "."):
            return bad
    return None


def _declared(pyproject: Path) -> set[str]:
    data = tomllib.loads(pyproject.read_text())
    project = data.get("project", {})
    reqs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        reqs.extend(extra)
    names = set()
    for req in reqs:
        m = re.match(r"\s*([A-Za-z0-9_.\-]+)", req)
        if m:
            names.add(m.group(1).lower().replace("_", "-"))
    return names


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # `from torch import _dynamo` / `from ember.ir import _private`
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
        elif isinstance(node, ast.Attribute):
            # torch._dynamo.foo used as an attribute without importing it
            parts = []
            cur: ast.expr = node
            while isinstance(cur, ast.Attribute):
                parts.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id == "torch":
                dotted = ".".join(["torch", *reversed(parts)])
                if _forbidden(dotted):
                    found.append((node.lineno, dotted))
    return found


def check(root: Path) -> list[str]:
    problems: list[str] = []
    for pkg_dir in sorted((root / "packages").iterdir()):
        pyproject = pkg_dir / "pyproject.toml"
        if not pyproject.is_file():
            continue
        own = pkg_dir.name
        declared = _declared(pyproject)
        src = pkg_dir / "src"
        ns_init = src / "ember" / "__init__.py"
        if ns_init.exists():
            problems.append(f"{ns_init}: ember is a PEP 420 namespace package; remove this file")
        for path in sorted(src.rglob("*.py")):
            rel = path.relative_to(root)
            try:
                tree = ast.parse(path.read_text(), filename=str(path))
            except SyntaxError as exc:
                problems.append(f"{rel}:{exc.lineno}: syntax error: {exc.msg}")
                continue
            for lineno, module in _imports(tree):
                bad = _forbidden(module)
                if bad:
                    problems.append(
                        f"{rel}:{lineno}: imports {module!r} (torch's compiler stack, {bad}); "
                        "packages/ re-implement it and may not import it"
                    )
                    continue
                parts = module.split(".")
                if parts[0] == "ember" and len(parts) >= 2 and parts[1] != own:
                    other = parts[1]
                    if f"ember-{other}" not in declared:
                        problems.append(
                            f"{rel}:{lineno}: imports ember.{other} but ember-{own} does not "
                            f"declare ember-{other} in {pyproject.relative_to(root)}"
                        )
                    if any(p.startswith("_") for p in parts[2:]):
                        problems.append(
                            f"{rel}:{lineno}: imports {module!r}, a private module of "
                            f"ember-{other}; use its public API (ember.{other})"
                        )
                dist = TRACKED_THIRD_PARTY.get(parts[0])
                if dist and dist not in declared:
                    problems.append(
                        f"{rel}:{lineno}: imports {parts[0]} but ember-{own} does not declare "
                        f"{dist} in {pyproject.relative_to(root)}"
                    )
    return list(dict.fromkeys(problems))


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_imports: {len(problems)} problem(s)")
        return 1
    print("check_imports: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
