"""The feature table in README.md stays true: its count matches its rows, and every
test a row names exists in the seed test files."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
STATUSES = ("works", "partial", "absent", "n/a")
ROW = re.compile(r"^\| (\d{3})\.\d+ \| .*? \| (works|partial|absent|n/a) \| (.*) \|$")


def _rows() -> list[tuple[str, str, str]]:
    lines = (HERE / "README.md").read_text().splitlines()
    return [m.groups() for m in map(ROW.match, lines) if m]  # type: ignore[misc]


def test_count_matches_the_rows() -> None:
    tally: dict[str, Counter[str]] = {}
    for seed, status, _ in _rows():
        tally.setdefault(seed, Counter())[status] += 1
    text = (HERE / "README.md").read_text()
    for seed, counts in tally.items():
        want = [counts[s] for s in STATUSES]
        row = f"| {seed} | " + " | ".join(map(str, want)) + f" | {sum(want)} |"
        assert row in text, (row, "count table out of date")
    total = sum(tally.values(), Counter())
    want = [total[s] for s in STATUSES]
    assert "| all | " + " | ".join(map(str, want)) + f" | {sum(want)} |" in text


def test_every_named_test_exists() -> None:
    source = "\n".join(p.read_text() for p in HERE.glob("test_*.py"))
    defined = set(re.findall(r"^def (test_\w+)", source, re.M))
    for seed, _, where in _rows():
        for name in re.findall(r"`(test_\w+)`", where):
            assert name in defined, f"{seed}: README names {name}, which no seed test defines"
