"""Enforce ember's import boundaries (DESIGN.md, "Who may import whom").

Fails (exit 1, one line per problem) when code under ``packages/*/src``:

- imports torch's compiler stack (the modules ember re-implements);
- imports another ember package's private modules (``ember.X._foo``);
- imports an ember package, or a third-party distribution among the known
  optional ones, that its ``pyproject.toml`` does not declare (optional
  extras count as declared);
- imports that form a cycle between modules of one package: every ``import``
  counts, at module level or inside a function (a deferred import may only
  point down the package's import DAG); imports under ``if TYPE_CHECKING:``
  do not;
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


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement outside ``if TYPE_CHECKING:`` blocks, at any depth."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            pending.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
            continue
        pending.extend(ast.iter_child_nodes(node))
    return found


def _module_name(src: Path, path: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _internal_edges(src: Path, files: list[Path]) -> dict[str, set[str]]:
    """module -> modules of the same package it imports (at run time)."""
    modules = {_module_name(src, f): f for f in files}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        try:
            tree = ast.parse(path.read_text(), filename=str(path))
        except SyntaxError:
            continue
        for node in _runtime_imports(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    targets.append(sub if sub in modules else module)
            edges[name].update(t for t in targets if t in modules and t != name)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _cycle_path(edges: dict[str, set[str]], group: list[str]) -> list[str]:
    """One concrete loop through ``group`` (``a -> b -> a``), for the message."""
    members = set(group)
    start = group[0]
    path = [start]
    seen = {start}
    while True:
        nxt = sorted(w for w in edges[path[-1]] if w in members)
        back = [w for w in nxt if w == start]
        if back and len(path) > 1:
            return [*path, start]
        fresh = [w for w in nxt if w not in seen]
        if not fresh:
            return [*path, *back] if back else path
        path.append(fresh[0])
        seen.add(fresh[0])


def import_cycles(src: Path, files: list[Path]) -> list[str]:
    """One line per import cycle among ``files`` (a package's modules under ``src``)."""
    edges = _internal_edges(src, files)
    problems = []
    for group in _cycles(edges):
        loop = " -> ".join(_cycle_path(edges, group))
        problems.append(
            f"{len(group)} modules import each other ({', '.join(group)}): {loop}; "
            "move what both need into a module below them"
        )
    return problems


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
        for cycle in import_cycles(src, sorted(src.rglob("*.py"))):
            problems.append(f"{src.relative_to(root)}: import cycle: {cycle}")
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
