"""Mixed-version pipelines: released stages with current ones (ADR 0054).

For each package, the *released* build is its newest release (tools/release.py: the
commit that recorded the dated CHANGELOG heading) whose sources differ from the working
tree's, else its newest release. Its wheel is built from that commit in a temporary git
worktree; the *current* wheels from the working tree. Each pairing gets a fresh
virtualenv holding torch and only those wheels (pip resolves them against the ranges the
packages declare), then runs tools/compat_program.py outside the repository: a small
model trained at three batch sizes through dynamo, aotgrad and inductor under
``EMBER_STRICT=1``, compared with eager, and graph and guard IR files exchanged with the
pairing run before it. The second pairing also starts from the first one's compile cache.

    python tools/compat.py [--pairing NAME ...] [--work DIR]

Pairings: ``new-frontend`` (current ir, guards, dynamo; released aotgrad, inductor) and
``new-backend`` (released guards, dynamo; current ir, aotgrad, inductor). Where the
declared ranges refuse a pairing, pip's refusal is the result (reported, exit 0 only if
``--allow-refused``).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import release

ROOT = release.ROOT
PAIRINGS: dict[str, dict[str, str]] = {
    "new-frontend": {"ir": "current", "guards": "current", "dynamo": "current",
                     "aotgrad": "released", "inductor": "released"},
    "new-backend": {"ir": "current", "guards": "released", "dynamo": "released",
                    "aotgrad": "current", "inductor": "current"},
}


class CompatError(Exception):
    pass


@dataclass
class Outcome:
    pairing: str
    status: str  # "ok", "refused" (pip: the declared ranges exclude it), "failed"
    wheels: list[str]
    detail: str


def released_commit(package: str) -> release.Release:
    """The release to pair with: the newest one whose sources differ from the working
    tree, else the newest."""
    found = release.releases(package)
    if not found:
        raise CompatError(f"ember-{package} was never released (tools/release.py cut)")
    if any(r.commit is None for r in found):
        raise CompatError(f"ember-{package}: a release has no commit in this checkout (no git history?)")
    for r in found:
        diff = subprocess.run(["git", "diff", "--quiet", str(r.commit), "--", f"packages/{package}"], cwd=ROOT)
        if diff.returncode == 1:
            return r
    return found[0]


def build_released(packages: list[str], out: Path, work: Path) -> dict[str, tuple[Path, release.Release]]:
    wheels: dict[str, tuple[Path, release.Release]] = {}
    for p in packages:
        r = released_commit(p)
        tree = work / f"src-{p}-{r.version}"
        if not tree.exists():
            subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), str(r.commit)],
                           cwd=ROOT, check=True, capture_output=True)
        try:
            made = release.build([p], out, root=tree, validate=False)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
        wheels[p] = (next(f for f in made if f.suffix == ".whl"), r)
    return wheels


def make_venv(where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    py = where / "bin" / "python"
    torch_version = md.version("torch")
    _pip(py, "install", "-q", f"torch=={torch_version}")
    return py


def _pip(py: Path, *args: str) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([str(py), "-m", "pip", *args], capture_output=True, text=True)
    if res.returncode != 0:
        raise CompatError(f"pip {' '.join(args[:2])} failed:\n{res.stdout[-3000:]}{res.stderr[-3000:]}")
    return res


def run_pairing(name: str, plan: dict[str, str], current: dict[str, Path],
                released: dict[str, tuple[Path, release.Release]], work: Path,
                other_out: Path | None, cache: Path) -> Outcome:
    wheels = [current[p] if how == "current" else released[p][0] for p, how in plan.items()]
    py = make_venv(work / f"venv-{name}")
    res = subprocess.run([str(py), "-m", "pip", "install", "-q", *map(str, wheels)], capture_output=True, text=True)
    names = [w.name for w in wheels]
    if res.returncode != 0:
        text = res.stdout + res.stderr
        if "ResolutionImpossible" in text or "conflict" in text.lower():
            return Outcome(name, "refused", names, text[-1500:])
        return Outcome(name, "failed", names, f"pip install failed:\n{text[-3000:]}")
    out = work / f"out-{name}"
    cmd = [str(py), str(ROOT / "tools" / "compat_program.py"), str(out)]
    if other_out is not None:
        cmd.append(str(other_out))
    env = {**os.environ, "EMBER_STRICT": "1", "EMBER_CACHE_DIR": str(cache), "PYTHONPATH": ""}
    run = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env, timeout=900)
    if run.returncode != 0:
        return Outcome(name, "failed", names, (run.stdout + run.stderr)[-4000:])
    return Outcome(name, "ok", names, run.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairing", action="append", choices=sorted(PAIRINGS))
    ap.add_argument("--work", type=Path, help="keep the wheels and virtualenvs here")
    ap.add_argument("--allow-refused", action="store_true")
    ap.add_argument("--json", type=Path, help="write the outcomes here")
    a = ap.parse_args(argv)
    names = a.pairing or list(PAIRINGS)
    work = a.work or Path(tempfile.mkdtemp(prefix="ember-compat-"))
    work.mkdir(parents=True, exist_ok=True)
    outcomes: list[Outcome] = []
    try:
        needed_released = sorted({p for n in names for p, how in PAIRINGS[n].items() if how == "released"})
        released = build_released(needed_released, work / "released", work)
        for p, (_, r) in released.items():
            print(f"[compat] released ember-{p} {r.version} ({r.date}, commit {str(r.commit)[:10]})")
        made = release.build(list(release.PACKAGES), work / "current", validate=False)
        current = {p: next(f for f in made if f.name.startswith(f"ember_{p}-") and f.suffix == ".whl")
                   for p in release.PACKAGES}
        cache = work / "cache"
        other: Path | None = None
        for n in names:
            o = run_pairing(n, PAIRINGS[n], current, released, work, other, cache)
            outcomes.append(o)
            print(f"[compat] {n}: {o.status} ({', '.join(o.wheels)})\n  {o.detail}")
            if o.status == "ok":
                other = work / f"out-{n}"
    except CompatError as e:
        print(f"compat: {e}", file=sys.stderr)
        return 1
    finally:
        if a.json:
            a.json.write_text(json.dumps([o.__dict__ for o in outcomes], indent=1))
        if a.work is None:
            shutil.rmtree(work, ignore_errors=True)
    bad = [o for o in outcomes if o.status == "failed" or (o.status == "refused" and not a.allow_refused)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
