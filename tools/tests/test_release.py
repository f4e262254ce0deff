"""tools/release.py: the release rules hold in the tree, a cut records a release, ranges
that exclude a bumped dependency are refused, and the built wheels carry the versions."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import release  # noqa: E402


def test_the_tree_keeps_the_release_rules() -> None:
    assert release.check() == []


def _copy(tmp: Path) -> Path:
    root = tmp / "repo"
    for p in release.PACKAGES:
        d = root / "packages" / p
        d.mkdir(parents=True)
        for name in ("pyproject.toml", "CHANGELOG.md", "README.md"):
            shutil.copy(ROOT / "packages" / p / name, d / name)
    return root


def _with_unreleased_entry(root: Path, package: str, entry: str) -> None:
    log = root / "packages" / package / "CHANGELOG.md"
    lines = log.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("## "))
    if not release._UNRELEASED.match(lines[at].rstrip("\n")):
        lines[at:at] = ["## Unreleased\n", "\n"]
    lines.insert(at + 1, f"\n- {entry}\n")
    log.write_text("".join(lines))


def test_cut_closes_unreleased_and_sets_the_version(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    old = release.version("minifier", root)
    major, minor, patch = map(int, old.split("."))
    new = f"{major}.{minor}.{patch + 1}"
    _with_unreleased_entry(root, "minifier", "a fix")
    changed = release.cut({"minifier": new}, "2031-01-02", root)
    assert {f.name for f in changed} == {"CHANGELOG.md", "pyproject.toml"}
    assert release.version("minifier", root) == new
    headings = release.changelog_sections("minifier", root)
    assert headings[:2] == ["## Unreleased", f"## {new} (2031-01-02)"]
    assert [r.version for r in release.releases("minifier", root)][0] == new
    assert release.check(root) == []
    # nothing new under Unreleased: no second release of the same changes
    with pytest.raises(release.ReleaseError, match="lists no change"):
        release.cut({"minifier": f"{major}.{minor}.{patch + 2}"}, "2031-01-03", root)
    with pytest.raises(release.ReleaseError, match="not newer"):
        _with_unreleased_entry(root, "minifier", "another")
        release.cut({"minifier": new}, "2031-01-03", root)


def test_a_bump_outside_the_dependants_ranges_is_refused(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    major, minor, _ = map(int, release.version("ir", root).split("."))
    _with_unreleased_entry(root, "ir", "a format break")
    with pytest.raises(release.ReleaseError) as e:
        release.cut({"ir": f"{major}.{minor + 1}.0"}, "2031-01-02", root)
    # every package that depends on ember-ir is named, with the range that refuses it
    for dependant in ("guards", "dynamo", "aotgrad", "inductor", "minifier"):
        assert f"ember-{dependant} (dependencies): ember-ir" in str(e.value)


def test_check_names_a_changelog_that_does_not_match(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    log = root / "packages" / "guards" / "CHANGELOG.md"
    log.write_text(log.read_text().replace("## ", "## 9.9.9 (2030-01-01)\n\n## ", 1))
    problems = release.check(root)
    assert any("ember-guards: CHANGELOG.md starts with '## 9.9.9 (2030-01-01)'" in p for p in problems)
    assert any("ember-guards: version" in p and "older than its last release 9.9.9" in p for p in problems)


def test_build_makes_checked_wheels_with_the_versions(tmp_path: Path) -> None:
    pytest.importorskip("build")
    pytest.importorskip("twine")
    made = release.build(["ir", "guards"], tmp_path / "dist")
    wheels = {f.name.split("-")[0]: f for f in made if f.suffix == ".whl"}
    assert set(wheels) == {"ember_ir", "ember_guards"} and sum(f.name.endswith(".tar.gz") for f in made) == 2
    with zipfile.ZipFile(wheels["ember_guards"]) as z:
        meta = z.read(f"ember_guards-{release.version('guards')}.dist-info/METADATA").decode()
        names = z.namelist()
    assert f"Version: {release.version('guards')}" in meta
    assert any(line.startswith("Requires-Dist: ember-ir") for line in meta.splitlines())
    assert "ember/guards/__init__.py" in names and not any("/tests/" in n for n in names)
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "release.py"), "check"], capture_output=True, text=True)
    assert out.returncode == 0 and "release rules: ok" in out.stdout


def test_a_released_section_edited_later_is_named(tmp_path: Path) -> None:
    # a branch that wrote under the old Unreleased heading, merged after the cut, lands its
    # entries in the released section: check() names it
    root = _copy(tmp_path)

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "root")
    _with_unreleased_entry(root, "guards", "a change")
    major, minor, patch = map(int, release.version("guards", root).split("."))
    new = f"{major}.{minor}.{patch + 1}"
    release.cut({"guards": new}, "2031-01-02", root)
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "release")
    assert release.releases("guards", root)[0].commit is not None
    assert release.check(root) == []
    log = root / "packages" / "guards" / "CHANGELOG.md"
    log.write_text(log.read_text().replace(f"## {new} (2031-01-02)\n", f"## {new} (2031-01-02)\n\n- merged late\n"))
    assert any(f"the {new} section of CHANGELOG.md was edited after its release" in p for p in release.check(root))
