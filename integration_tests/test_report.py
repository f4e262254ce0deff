"""``EMBER_COMPILE_DEBUG=1`` + ``python -m ember.dynamo report``: the run's events, stage
timings and each frame's artifacts in one HTML page (ADR 0053), and the progress line.

The program compiled here has a graph break (a ``print``) and a recompile (a second
length), and its results are checked against eager first: the report must describe a run
that was right.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

import ember.dynamo
from ember.dynamo.__main__ import main as cli
from ember.dynamo.report import find_run, render
from ember.ir import stages

ROOT = Path(__file__).resolve().parent.parent


class _Text(HTMLParser):
    """The page's visible text and its section ids."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.ids: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for k, v in attrs:
            if k == "id" and v:
                self.ids.append(v)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: str) -> _Text:
    p = _Text()
    p.feed(page)
    p.close()
    return p


def _program(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = torch.tanh(x @ w)
    print("", end="")  # the graph break the report must show
    return y.relu() + 1


@pytest.fixture
def debug_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EMBER_COMPILE_DEBUG", "1")
    monkeypatch.setenv("EMBER_COMPILE_DEBUG_DIR", str(tmp_path / "debug"))
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path / "cache"))  # a cold compile: every stage runs
    ember.dynamo.reset()
    compiled = ember.dynamo.compile(_program, backend="inductor")
    w = torch.randn(8, 8)
    with torch.no_grad():
        for n in (4, 6):  # the second length recompiles (automatic dynamic)
            x = torch.randn(n, 8)
            torch.testing.assert_close(compiled(x, w), _program(x, w))
    ember.dynamo.reset()
    return tmp_path / "debug"


def test_events_name_the_break_and_the_recompile_with_the_users_source(debug_run: Path) -> None:
    run = find_run(debug_run)
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    kinds = [e["kind"] for e in events]
    assert "capture" in kinds and "recompile" in kinds
    breaks = [b for e in events for b in e.get("breaks", [])]
    assert any("print" in b["reason"] for b in breaks)
    here = Path(__file__).name
    assert any(s["file"].endswith(here) and "print" in s["text"] for b in breaks for s in b["stack"])
    recompile = next(e for e in events if e["kind"] == "recompile")
    assert "size" in recompile["reason"] and recompile["file"].endswith(here)
    for e in events:
        if e["kind"] == "capture":
            assert (run / e["folder"]).is_dir()


def test_the_page_holds_frames_breaks_recompiles_stages_and_kernels(debug_run: Path) -> None:
    run = find_run(debug_run)
    page = _parse(render(run))
    text = " ".join(page.text)
    captures = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()
                if json.loads(line)["kind"] == "capture"]
    for e in captures:  # every captured frame has its section, linked from the events table
        assert e["folder"] in page.ids
    assert "print(\"\", end=\"\")" in text  # the user's line of the break
    assert "recompile" in text and "assumed" in text  # the recompile's reason
    for stage in ("dynamo", "aotgrad.trace", "inductor.lower"):
        assert stage in text
    assert "def call(" in text  # the inductor wrapper, embedded
    assert "guards.txt" in text and "graph_0.txt" in text
    assert "<script" not in render(run)  # self-contained, nothing to fetch or run


def test_cli_writes_the_newest_run_and_refuses_a_folder_without_runs(
        debug_run: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["report", str(debug_run)]) == 0
    out = Path(capsys.readouterr().out.strip())
    assert out.name == "report.html" and out.parent == find_run(debug_run)
    assert "ember compile report" in out.read_text()
    empty = tmp_path_factory.mktemp("empty")
    assert cli(["report", str(empty)]) == 2
    assert "EMBER_COMPILE_DEBUG=1" in capsys.readouterr().err


def test_stage_seconds_are_exclusive_and_recorded_per_folder(tmp_path: Path) -> None:
    before = stages.totals()
    with stages.stage("t.outer", folder=tmp_path), stages.stage("t.inner", folder=tmp_path, cache="miss"):
        sum(range(20000))
    records = [json.loads(line) for line in (tmp_path / "stages.jsonl").read_text().splitlines()]
    inner, outer = records  # inner finishes first
    assert inner["stage"] == "t.inner" and inner["cache"] == "miss"
    assert outer["stage"] == "t.outer"
    # the outer's own seconds exclude the inner's: own + inner = the outer's whole time
    assert outer["seconds"] + inner["inclusive"] == pytest.approx(outer["inclusive"], abs=2e-6)
    spent = stages.since(before)
    assert set(spent) >= {"t.outer", "t.inner"}


def test_progress_switch() -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    assert stages.progress_enabled({}, Tty())  # type: ignore[arg-type]
    assert not stages.progress_enabled({"EMBER_PROGRESS": "0"}, Tty())  # type: ignore[arg-type]
    assert stages.progress_enabled({"EMBER_PROGRESS": "1"}, None)
    with tempfile.TemporaryFile("w") as f:
        assert not stages.progress_enabled({}, f)


_PROGRESS_SCRIPT = textwrap.dedent("""
    import torch, ember.dynamo
    def f(x):
        return torch.sin(x) * 2 + x.cos()
    x = torch.randn(16)
    torch.testing.assert_close(ember.dynamo.compile(f, backend="inductor")(x), f(x))
""")


@pytest.mark.parametrize("env, shown", [({"EMBER_PROGRESS": "1", "EMBER_PROGRESS_AFTER": "0"}, True),
                                        ({"EMBER_PROGRESS_AFTER": "0"}, False)])
def test_progress_line_on_stderr_only_when_asked_or_a_terminal(
        env: dict[str, str], shown: bool, tmp_path: Path) -> None:
    full = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path), **env}
    full.pop("EMBER_PROGRESS", None) if "EMBER_PROGRESS" not in env else None
    proc = subprocess.run([sys.executable, "-c", _PROGRESS_SCRIPT], env=full, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert ("[ember] compiled `f`" in proc.stderr) is shown, proc.stderr
    assert "[ember]" not in proc.stdout


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.slow
def test_the_blog_training_loop_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium (Debian: apt-get install chromium)")
    html_path = tmp_path / "report.html"
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "report_example.py"), "-o", str(html_path),
                           "--steps", "3", "--debug-dir", str(tmp_path / "dbg")],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run",
             f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([browser, *flags, "--dump-dom", html_path.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = _parse(dom.stdout)
    text = " ".join(rendered.text)
    assert "ember compile report" in text
    assert "recompile" in text and "decoder_input_ids" in text  # the length change
    assert sum(1 for i in rendered.ids if i.startswith("frame_")) >= 2
    shot = tmp_path / "shot.png"
    subprocess.run([browser, *flags, "--window-size=1100,1500", f"--screenshot={shot}",
                    html_path.as_uri()], capture_output=True, timeout=120, check=True)
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[0] == 1500 and pixels.std() > 0.05  # a page was drawn, not a blank
