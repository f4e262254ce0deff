"""The vision-and-diffusion zoo's table: per model, torch.compile and ember side by side.

Run in the vision environment (``tools/setup_vision.sh``)::

    .venv-vision/bin/python tools/vision_zoo_report.py [NAME ...] [--skip-inductor]

Each model runs in a fresh process (one at a time, 600 s each): torch.compile with
``fullgraph=True`` (graph count, or the error), ember with ``fullgraph=True`` (graph
count, or the error), whether ember fell back to eager or warned, whether its outputs
equal eager's, and whether ``backend="inductor"`` equals eager. One JSON line per model
on stdout, a Markdown table at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time, warnings
import torch, torch._dynamo, torch._dynamo.testing
import ember.dynamo as ed
from ember.dynamo.testing import CompileCounter, CompileCounterWithBackend
from integration_tests.models import vision_zoo
from integration_tests.models.test_vision_zoo import assert_same, run

name, inductor = sys.argv[1], sys.argv[2] == "1"
row = {"model": name}
case = vision_zoo.build(name)
want = run(case, case.model)
t = time.perf_counter()
cnt = torch._dynamo.testing.CompileCounter()
try:
    run(case, torch.compile(case.model, backend=cnt, fullgraph=True))
    row["torch_fullgraph"] = cnt.frame_count
except Exception as e:
    row["torch_fullgraph"] = f"fails: {type(e).__name__}"
torch._dynamo.reset()
row["torch_s"] = round(time.perf_counter() - t, 1)
t = time.perf_counter()
cnt = CompileCounter()
try:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_same(run(case, ed.compile(case.model, backend=cnt, fullgraph=True)), want)
    row["ember_fullgraph"] = cnt.frame_count
    row["ember_warnings"] = [str(w.message)[:120] for w in caught if "ember" in str(w.message)]
except Exception as e:
    row["ember_fullgraph"] = f"fails: {type(e).__name__}: {str(e)[:300]}"
ed.reset()
cnt = CompileCounter()
try:
    assert_same(run(case, ed.compile(case.model, backend=cnt)), want)
    row["ember_graphs"] = cnt.frame_count
except Exception as e:
    row["ember_graphs"] = f"fails: {type(e).__name__}: {str(e)[:300]}"
ed.reset()
row["ember_s"] = round(time.perf_counter() - t, 1)
if inductor:
    t = time.perf_counter()
    try:
        assert_same(run(case, ed.compile(case.model, backend="inductor")), want)
        row["inductor_equal"] = True
    except Exception as e:
        row["inductor_equal"] = f"{type(e).__name__}: {str(e)[:200]}"
    row["inductor_s"] = round(time.perf_counter() - t, 1)
print("ROW " + json.dumps(row))
"""


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    inductor = "--skip-inductor" not in sys.argv
    sys.path.insert(0, str(ROOT))
    from integration_tests.models import vision_zoo

    names = args or [m.name for m in vision_zoo.ZOO]
    rows = []
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for name in names:
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, name, "1" if inductor else "0"],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
            )
            found = [ln[4:] for ln in proc.stdout.splitlines() if ln.startswith("ROW ")]
            row = json.loads(found[0]) if found else {
                "model": name, "error": (proc.stderr or proc.stdout)[-400:]
            }
        except subprocess.TimeoutExpired:
            row = {"model": name, "error": "timeout (600 s)"}
        row["wall_s"] = round(time.perf_counter() - start, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print("| model | torch.compile fullgraph | ember fullgraph | ember graphs | inductor = eager |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r.get('torch_fullgraph', r.get('error', ''))} | "
              f"{r.get('ember_fullgraph', '')} | {r.get('ember_graphs', '')} | "
              f"{r.get('inductor_equal', '')} |")


if __name__ == "__main__":
    main()
