"""tools/size_report.py: the counts it prints are the files' own."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import size_report  # noqa: E402


def test_counts_match_the_source_tree() -> None:
    text = size_report.report(top=3)
    guards = sorted((ROOT / "packages" / "guards" / "src").rglob("*.py"))
    lines = sum(1 for f in guards for line in f.read_text().splitlines() if line.strip())
    row = next(r for r in text.splitlines() if r.strip().startswith("guards "))
    assert f"{lines} source lines in {len(guards):>3} modules" in row
    modules = text.split("[size] largest modules")[1].split("[size] largest functions")[0]
    assert len(modules.strip().splitlines()) == 1 + 3  # the heading's rest and three modules
    biggest = max((sum(1 for line in f.read_text().splitlines() if line.strip()), f)
                  for f in (ROOT / "packages").rglob("src/**/*.py"))
    assert str(biggest[1].relative_to(ROOT)) in modules
