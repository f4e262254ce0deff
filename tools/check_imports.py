"""Enforce ember's import boundaries (docs/design.md, "Who may import whom").

Fails (exit 1, one line per problem) when code under ``packages/*/src``:

- imports torch's compiler stack (the modules ember re-implements);
- imports from another ember package anything outside its public surface: the names
  its ``__init__`` exports (``__all__``) and the submodules listed under
  ``[tool.ember] public-modules`` in its ``pyproject.toml`` (ADR 0066); a module
  named ``_foo`` is never public;
- imports an ember package, or a third-party distribution among the known
  optional ones, that its ``pyproject.toml`` does not declare (optional
  extras count as declared);
- imports that form a cycle between modules of one package: every ``import``
  counts, at module level or inside a function (a deferred import may only
  point down the package's import DAG); imports under ``if TYPE_CHECKING:``
  do not;
- or when a package ships ``src/ember/__init__.py`` (ember is a PEP 420 namespace).

And it keeps ``docs/architecture.md``'s layer table of ember.dynamo true: every module
of the package is in exactly one layer, every name in the table is a module, and no
module imports one in a layer above its own (``<`` inside a row orders its groups, as
rows do, bottom up).

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


def _init_exports(init: Path) -> set[str]:
    """The names a package's ``__init__`` exports: its ``__all__``, else its public names."""
    tree = ast.parse(init.read_text(), filename=str(init))
    bound: set[str] = set()
    for node in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets, value = [node.target], node.value
        for t in targets:
            if isinstance(t, ast.Name) and t.id == "__all__" and isinstance(value, (ast.List, ast.Tuple)):
                return {e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            bound.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return {n for n in bound if not n.startswith("_")}


class Surface:
    """What other packages may import from one ember package (ADR 0066)."""

    def __init__(self, pkg_dir: Path) -> None:
        self.name = pkg_dir.name
        self.pyproject = pkg_dir / "pyproject.toml"
        self.src = pkg_dir / "src" / "ember" / pkg_dir.name
        init = self.src / "__init__.py"
        #: None: the package has no ``__init__`` here, nothing to check names against
        self.exports: set[str] | None = _init_exports(init) if init.is_file() else None
        tool = tomllib.loads(self.pyproject.read_text()).get("tool", {}).get("ember", {})
        self.modules: set[str] = set(tool.get("public-modules", []))

    def missing_modules(self) -> list[str]:
        """Listed public modules that are no module of the package."""
        return sorted(
            m for m in self.modules
            if not (self.src / (m.replace(".", "/") + ".py")).is_file()
            and not (self.src / m.replace(".", "/") / "__init__.py").is_file()
        )

    def refuses(self, module: str, names: list[str] | None) -> str | None:
        """What is not public in ``from module import names`` (``import module``: None)."""
        rest = module.split(".")[2:]
        if rest:
            sub = ".".join(rest)
            return None if sub in self.modules else module
        if names is None or self.exports is None:
            return None
        bad = [n for n in names if n != "*" and n not in self.exports and n not in self.modules]
        return ", ".join(f"{module}.{n}" for n in bad) or None


def _ember_imports(tree: ast.AST) -> list[tuple[int, str, list[str] | None]]:
    """(line, module, imported names or None for ``import module``) of every ``ember.*`` import."""
    found: list[tuple[int, str, list[str] | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name, None) for a in node.names if a.name.startswith("ember."))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("ember."):
            found.append((node.lineno, node.module or "", [a.name for a in node.names]))
    return found


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


#: Packages whose layer table docs/architecture.md must have (a table after the marker).
LAYERED = ("dynamo",)
_LAYER_MARKER = re.compile(r"<!--\s*layers of ember\.(\w+)")
_TOKEN = re.compile(r"`([^`]+)`")


def _layer_table(doc: str, package: str) -> list[tuple[str, str]] | None:
    """(layer, modules cell) per row of the table after ``<!-- layers of ember.<package>``."""
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        m = _LAYER_MARKER.search(line)
        if not m or m.group(1) != package:
            continue
        rows: list[tuple[str, str]] = []
        for row in lines[i + 1:]:
            if not row.startswith("|"):
                if rows:
                    break
                continue
            cells = [c.strip() for c in row.strip().strip("|").split("|")]
            if len(cells) >= 2 and not set(cells[0]) <= set("-: "):
                rows.append((cells[0], "|".join(cells[1:])))
        return rows[1:]  # without the header row
    return None


def _layer_groups(rows: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """(layer, names) per group, bottom up: rows in order, split at ``<`` inside a row.

    A name ending in ``/`` (``variables/``) is a subpackage: the names after it in the
    row are its modules (``variables.base``); ``__init__`` is the package itself."""
    groups: list[tuple[str, list[str]]] = []
    for layer, cell in rows:
        prefix = ""
        for piece in re.sub(r"\([^()]*\)", "", cell).split("<"):  # (notes) are comments
            names: list[str] = []
            for token in _TOKEN.findall(piece):
                if token.endswith("/"):
                    prefix = token.rstrip("/").replace("/", ".") + "."
                    continue
                name = token.replace("/", ".")
                names.append("" if name == "__init__" else (name if "." in name else prefix + name))
            groups.append((layer, names))
    return groups


def layer_problems(root: Path, package: str) -> list[str]:
    """What makes docs/architecture.md's layer table of ``package`` untrue to its code."""
    doc_path = root / "docs" / "architecture.md"
    src = root / "packages" / package / "src"
    if not doc_path.is_file() or not src.is_dir():
        return []
    where = f"{doc_path.relative_to(root)}, layers of ember.{package}"
    rows = _layer_table(doc_path.read_text(), package)
    if rows is None:
        return [f"{where}: no table (a line '<!-- layers of ember.{package} -->' before it)"]
    files = sorted(src.rglob("*.py"))
    base = f"ember.{package}"

    def short(module: str) -> str:
        return module.removeprefix(base).lstrip(".")

    modules = {short(_module_name(src, f)) for f in files}
    rank: dict[str, tuple[int, str]] = {}
    problems = []
    for i, (layer, names) in enumerate(_layer_groups(rows)):
        for name in names:
            shown = name or "__init__"
            if name not in modules:
                problems.append(f"{where}: `{shown}` (layer {layer!r}) is no module of {base}")
            elif name in rank:
                problems.append(f"{where}: `{shown}` is in two layers ({rank[name][1]!r}, {layer!r})")
            else:
                rank[name] = (i, layer)
    for name in sorted(modules - set(rank)):
        problems.append(f"{where}: module `{name or '__init__'}` is in no layer; add it to the table")
    for mod, targets in sorted(_internal_edges(src, files).items()):
        a = rank.get(short(mod))
        for target in sorted(targets):
            b = rank.get(short(target))
            if a and b and b[0] > a[0]:
                problems.append(
                    f"{where}: {mod} (layer {a[1]!r}) imports {target} (layer {b[1]!r}), "
                    "which is above it; move one of them, or the import"
                )
    return problems


def _surface_problems(rel: Path, tree: ast.AST, own: str, surfaces: dict[str, Surface]) -> list[str]:
    problems = []
    for lineno, module, names in _ember_imports(tree):
        parts = module.split(".")
        other = surfaces.get(parts[1]) if len(parts) >= 2 and parts[1] != own else None
        if other is None or any(p.startswith("_") for p in parts[2:]):
            continue  # its own package, an unknown one, or reported as private above
        bad = other.refuses(module, names)
        if bad:
            problems.append(
                f"{rel}:{lineno}: imports {bad}, not public in ember-{other.name}: import what "
                f"ember.{other.name}'s __init__ exports, or list the module under [tool.ember] "
                f"public-modules in {other.pyproject.parent.name}/pyproject.toml (ADR 0066)"
            )
    return problems


def check(root: Path) -> list[str]:
    problems: list[str] = []
    pkg_dirs = [d for d in sorted((root / "packages").iterdir()) if (d / "pyproject.toml").is_file()]
    surfaces = {d.name: Surface(d) for d in pkg_dirs}
    for surface in surfaces.values():
        for m in surface.missing_modules():
            problems.append(f"{surface.pyproject.relative_to(root)}: public module {m!r} is no module of ember.{surface.name}")
    for pkg_dir in pkg_dirs:
        pyproject = pkg_dir / "pyproject.toml"
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
            problems.extend(_surface_problems(rel, tree, own, surfaces))
        for cycle in import_cycles(src, sorted(src.rglob("*.py"))):
            problems.append(f"{src.relative_to(root)}: import cycle: {cycle}")
    for package in LAYERED:
        problems.extend(layer_problems(root, package))
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
