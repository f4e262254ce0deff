"""Source size per package, the largest modules and the largest functions: printed by the
test command (``tools/test.sh``) so growth shows in every CI run.

    python tools/size_report.py [--top N]

Lines are non-blank source lines of ``packages/<name>/src`` (tests apart); a function's
size is its span in lines (nested functions counted in their parent too).
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _lines(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def _functions(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            span = (node.end_lineno or node.lineno) - node.lineno + 1
            out.append((span, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"))
    return out


def report(top: int = 8) -> str:
    rows, modules, functions = [], [], []
    total = 0
    for pkg in sorted((ROOT / "packages").iterdir()):
        src = pkg / "src"
        if not src.is_dir():
            continue
        files = sorted(src.rglob("*.py"))
        n = sum(_lines(f) for f in files)
        tests = sum(_lines(f) for f in (pkg / "tests").rglob("*.py")) if (pkg / "tests").is_dir() else 0
        total += n
        rows.append(f"  {pkg.name:<10} {n:>7} source lines in {len(files):>3} modules   ({tests} test lines)")
        modules += [(_lines(f), str(f.relative_to(ROOT))) for f in files]
        for f in files:
            functions += _functions(f)
    out = ["[size] source lines per package (non-blank):", *rows, f"  {'total':<10} {total:>7}"]
    out.append("[size] largest modules (non-blank lines; the rule of thumb is <= 800):")
    out += [f"  {n:>6}  {name}" for n, name in sorted(modules, reverse=True)[:top]]
    out.append("[size] largest functions (lines):")
    out += [f"  {n:>6}  {name}" for n, name in sorted(functions, reverse=True)[:top]]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--top", type=int, default=8)
    print(report(ap.parse_args().top))


if __name__ == "__main__":
    main()
