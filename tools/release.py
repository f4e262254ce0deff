"""Releases of the six ember packages (ADR 0054).

Each package has its own version (``packages/NAME/pyproject.toml``) and its own record
of releases: a dated section ``## 0.1.0 (2026-11-28)`` in ``packages/NAME/CHANGELOG.md``.
The commit that added that heading is the release: ``tools/compat.py`` builds a package
as released from it. Work since the last release is listed under ``## Unreleased``.

    python tools/release.py status                 versions, releases, unreleased entries
    python tools/release.py check                  the rules below (also a test)
    python tools/release.py cut ir=0.2.0 dynamo=0.2.0 [--date D] [--commit]
                                                   close each Unreleased section into a
                                                   release and set the version
    python tools/release.py build [NAME ...] [--out dist]
                                                   sdist + wheel of each package into dist/,
                                                   metadata validated (twine check --strict)

Rules ``check`` enforces: a version is ``MAJOR.MINOR.PATCH``; every ember package a
package depends on (also in extras) is declared with a range that admits that package's
current version; the CHANGELOG's first section is ``## Unreleased`` or the dated
release of the current version; released versions only grow, and no two releases of a
package share a version.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
#: dependency order: a package comes after every ember package it needs
PACKAGES = ("ir", "guards", "dynamo", "aotgrad", "inductor", "minifier")
_RELEASE = re.compile(r"^## (\d+\.\d+\.\d+) \((\d{4}-\d{2}-\d{2})\)\s*$")
_UNRELEASED = re.compile(r"^## (?:Unreleased|\d+\.\d+\.\d+ \(unreleased\))\s*$", re.I)
_VERSION_LINE = re.compile(r'^version = "([^"]+)"$', re.M)


class ReleaseError(Exception):
    """A package's version, CHANGELOG or dependency ranges break a release rule."""


@dataclass(frozen=True)
class Release:
    package: str
    version: str
    date: str
    #: the commit that added the dated heading; None where git does not know it
    #: (a copy without history, or a heading not yet committed)
    commit: str | None


def dist_name(package: str) -> str:
    return f"ember-{package}"


def package_dir(package: str, root: Path = ROOT) -> Path:
    return root / "packages" / package


def pyproject(package: str, root: Path = ROOT) -> dict[str, object]:
    with open(package_dir(package, root) / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def version(package: str, root: Path = ROOT) -> str:
    project = pyproject(package, root)["project"]
    assert isinstance(project, dict)
    return str(project["version"])


def ember_requirements(package: str, root: Path = ROOT) -> list[tuple[str, Requirement]]:
    """(where, requirement) for each ember package NAME depends on; where is
    ``dependencies`` or ``extra NAME``."""
    project = pyproject(package, root)["project"]
    assert isinstance(project, dict)
    found: list[tuple[str, Requirement]] = []
    for spec in project.get("dependencies", []):
        req = Requirement(spec)
        if req.name.startswith("ember-"):
            found.append(("dependencies", req))
    for extra, specs in project.get("optional-dependencies", {}).items():
        for spec in specs:
            req = Requirement(spec)
            if req.name.startswith("ember-"):
                found.append((f"extra {extra}", req))
    return found


def _git(*args: str, root: Path = ROOT) -> str:
    out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else ""


def changelog_sections(package: str, root: Path = ROOT) -> list[str]:
    """The ``## `` headings of the package's CHANGELOG, in file order."""
    text = (package_dir(package, root) / "CHANGELOG.md").read_text()
    return [line for line in text.splitlines() if line.startswith("## ")]


def releases(package: str, root: Path = ROOT) -> list[Release]:
    """The package's releases, newest first, each with the commit that recorded it."""
    found = []
    rel = f"packages/{package}/CHANGELOG.md"
    for heading in changelog_sections(package, root):
        m = _RELEASE.match(heading)
        if not m:
            continue
        # the oldest commit whose diff adds or removes this exact heading: the release
        commits = _git("log", "--format=%H", "--reverse", "-S", heading, "--", rel, root=root).splitlines()
        found.append(Release(package, m.group(1), m.group(2), commits[0] if commits else None))
    return found


def check(root: Path = ROOT) -> list[str]:
    """Every broken rule, one line each (empty: all hold)."""
    problems: list[str] = []
    current = {p: version(p, root) for p in PACKAGES}
    for p in PACKAGES:
        v = current[p]
        if not re.fullmatch(r"\d+\.\d+\.\d+", v):
            problems.append(f"ember-{p}: version {v!r} is not MAJOR.MINOR.PATCH")
        for where, req in ember_requirements(p, root):
            dep = req.name.removeprefix("ember-")
            if dep not in current:
                problems.append(f"ember-{p} ({where}): {req.name} is not an ember package")
            elif not req.specifier.contains(current[dep], prereleases=True):
                problems.append(f"ember-{p} ({where}): {req} does not admit {req.name} {current[dep]},"
                                f" the version in packages/{dep}")
            elif not str(req.specifier):
                problems.append(f"ember-{p} ({where}): {req.name} has no version range")
        headings = changelog_sections(p, root)
        if not headings:
            problems.append(f"ember-{p}: CHANGELOG.md has no ## section")
            continue
        first = headings[0]
        m = _RELEASE.match(first)
        if not _UNRELEASED.match(first) and not (m and m.group(1) == v):
            problems.append(f"ember-{p}: CHANGELOG.md starts with {first!r}; expected '## Unreleased'"
                            f" or the release of the current version {v}")
        released = [Version(m2.group(1)) for h in headings if (m2 := _RELEASE.match(h))]
        if len(set(released)) != len(released):
            problems.append(f"ember-{p}: CHANGELOG.md records a version twice")
        if released != sorted(released, reverse=True):
            problems.append(f"ember-{p}: CHANGELOG.md releases are not newest first")
        if released and Version(v) < released[0]:
            problems.append(f"ember-{p}: version {v} is older than its last release {released[0]}")
        problems += _edited_releases(p, root)
    return problems


def _section(text: str, heading: str) -> str | None:
    """The lines under ``heading`` up to the next ``## `` heading (None: no such heading)."""
    lines = text.splitlines()
    if heading not in lines:
        return None
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join(lines[start:end]).strip()


def _edited_releases(package: str, root: Path) -> list[str]:
    """A released section must read as it did in its release commit: entries merged in
    later (a branch that wrote under the old Unreleased heading) belong under Unreleased."""
    rel = f"packages/{package}/CHANGELOG.md"
    now = (package_dir(package, root) / "CHANGELOG.md").read_text()
    problems = []
    for r in releases(package, root):
        if r.commit is None:
            continue
        then = _git("show", f"{r.commit}:{rel}", root=root)
        heading = f"## {r.version} ({r.date})"
        if then and _section(then, heading) != _section(now, heading):
            problems.append(f"ember-{package}: the {r.version} section of CHANGELOG.md was edited after its"
                            f" release ({r.commit[:10]}); new entries go under '## Unreleased'")
    return problems


def _has_entries(package: str, root: Path) -> bool:
    text = (package_dir(package, root) / "CHANGELOG.md").read_text()
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## "))
    body = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        body.append(line)
    return any(line.strip().startswith("- ") for line in body)


def cut(bumps: dict[str, str], date: str, root: Path = ROOT) -> list[Path]:
    """Close each named package's Unreleased section as ``## VERSION (DATE)``, open a new
    empty one above it, and set the version in pyproject.toml. Returns the files changed."""
    changed: list[Path] = []
    for p, new in bumps.items():
        if p not in PACKAGES:
            raise ReleaseError(f"unknown package {p!r}; the packages are {', '.join(PACKAGES)}")
        if not re.fullmatch(r"\d+\.\d+\.\d+", new):
            raise ReleaseError(f"ember-{p}: {new!r} is not MAJOR.MINOR.PATCH")
        old = version(p, root)
        done = [Version(r.version) for r in releases(p, root)]
        if done and Version(new) <= max(done):
            raise ReleaseError(f"ember-{p}: {new} is not newer than its last release {max(done)}")
        if Version(new) < Version(old):
            raise ReleaseError(f"ember-{p}: {new} is older than the current version {old}")
        log = package_dir(p, root) / "CHANGELOG.md"
        lines = log.read_text().splitlines(keepends=True)
        at = next((i for i, line in enumerate(lines) if line.startswith("## ")), None)
        if at is None or not _UNRELEASED.match(lines[at].rstrip("\n")):
            raise ReleaseError(f"ember-{p}: CHANGELOG.md has no Unreleased section to release")
        if not _has_entries(p, root):
            raise ReleaseError(f"ember-{p}: the Unreleased section lists no change")
        lines[at] = f"## {new} ({date})\n"
        lines[at:at] = ["## Unreleased\n", "\n"]
        log.write_text("".join(lines))
        toml = package_dir(p, root) / "pyproject.toml"
        text = toml.read_text()
        if len(_VERSION_LINE.findall(text)) != 1:
            raise ReleaseError(f"{toml}: expected one `version = \"...\"` line")
        toml.write_text(_VERSION_LINE.sub(f'version = "{new}"', text))
        changed += [log, toml]
    problems = check(root)
    if problems:
        raise ReleaseError("after the cut:\n  " + "\n  ".join(problems))
    return changed


def build(packages: list[str], out: Path, root: Path = ROOT, python: str = sys.executable,
          validate: bool = True) -> list[Path]:
    """The sdist and wheel of each package into ``out``, metadata validated."""
    out.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    for p in packages:
        before = set(out.iterdir())
        # --no-isolation: hatchling from this environment; nothing is downloaded
        cmd = [python, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", str(out),
               str(package_dir(p, root))]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise ReleaseError(f"ember-{p}: build failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
        new = sorted(set(out.iterdir()) - before)
        norm = f"ember_{p}-{version(p, root)}"
        files = [f for f in new if f.name.startswith(norm)] or [
            f for f in out.iterdir() if f.name.startswith(norm + "-") or f.name == norm + ".tar.gz"]
        if not any(f.suffix == ".whl" for f in files) or not any(f.name.endswith(".tar.gz") for f in files):
            raise ReleaseError(f"ember-{p}: build made no wheel or sdist named {norm}* in {out}")
        made += files
    if validate:
        res = subprocess.run([python, "-m", "twine", "check", "--strict", *map(str, made)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise ReleaseError(f"twine check failed:\n{res.stdout}{res.stderr}")
    return made


def status(root: Path = ROOT) -> str:
    rows = []
    for p in PACKAGES:
        rel = releases(p, root)
        last = f"{rel[0].version} ({rel[0].date}, {rel[0].commit[:10] if rel[0].commit else 'not committed'})" \
            if rel else "never released"
        pending = "changes unreleased" if _UNRELEASED.match(changelog_sections(p, root)[0]) and _has_entries(p, root) \
            else "nothing unreleased"
        rows.append(f"ember-{p:<9} {version(p, root):<8} last release: {last}; {pending}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("status")
    sub.add_parser("check")
    c = sub.add_parser("cut")
    c.add_argument("bumps", nargs="+", metavar="NAME=VERSION")
    c.add_argument("--date", default=_dt.date.today().isoformat())
    c.add_argument("--commit", action="store_true", help="commit the changed files as the release")
    b = sub.add_parser("build")
    b.add_argument("packages", nargs="*", default=list(PACKAGES))
    b.add_argument("--out", type=Path, default=ROOT / "dist")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "status":
            print(status())
        elif a.cmd == "check":
            problems = check()
            for line in problems:
                print(line)
            print("release rules: ok" if not problems else f"release rules: {len(problems)} broken")
            return 1 if problems else 0
        elif a.cmd == "cut":
            bumps = {}
            for item in a.bumps:
                name, sep, ver = item.partition("=")
                if not sep:
                    raise ReleaseError(f"{item!r}: write NAME=VERSION, e.g. ir=0.2.0")
                bumps[name.removeprefix("ember-")] = ver
            changed = cut(bumps, a.date)
            names = ", ".join(f"ember-{p} {v}" for p, v in bumps.items())
            if a.commit:
                subprocess.run(["git", "add", *map(str, changed)], cwd=ROOT, check=True)
                subprocess.run(["git", "commit", "-q", "-m", f"release: {names} ({a.date})"], cwd=ROOT, check=True)
            print(f"released {names}" + ("" if a.commit else "; commit the changed files: that commit is the release"))
        elif a.cmd == "build":
            for f in build([p.removeprefix("ember-") for p in a.packages], a.out):
                print(f.relative_to(ROOT) if f.is_relative_to(ROOT) else f)
    except ReleaseError as e:
        print(f"release: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
