"""The text of a standalone ``repro.py``: needs torch, safetensors, ember.ir and the backend.

It deliberately does not import ember.minifier, so a backend developer can run
it with only the packages under test installed. Exit status: 1 when it fails
as recorded, 3 when it fails differently, 0 when nothing fails.
"""

from __future__ import annotations

SCRIPT = '''\
"""Standalone repro written by ember.minifier.

{summary}

Run:  python repro.py       (exit 1: reproduced, 3: a different failure, 0: no failure)
Needs torch, safetensors, ember-ir and the package providing backend {backend!r}.
"""

import copy
import importlib
import importlib.metadata
import json
import re
import sys
import traceback
from pathlib import Path

import torch
import torch.fx as fx
from safetensors.torch import load_file

import ember.ir

HERE = Path(__file__).resolve().parent


def load_inputs():
    spec = json.loads((HERE / "inputs.json").read_text())
    data = load_file(str(HERE / "inputs.safetensors")) if (HERE / "inputs.safetensors").exists() else {{}}
    out = []
    for item in spec["inputs"]:
        if item["kind"] == "scalar":
            out.append(item["value"])
            continue
        dtype = getattr(torch, item["dtype"])
        if item["kind"] == "seed":
            gen = torch.Generator().manual_seed(item["seed"])
            flat = torch.randn(item["shape"], generator=gen, dtype=dtype)
        else:
            flat = data[item["key"]]
        t = torch.empty_strided(item["shape"], item["stride"], dtype=dtype)
        t.copy_(flat)
        out.append(t.requires_grad_(item.get("requires_grad", False)))
    return out


def load_backend(ref):
    for ep in importlib.metadata.entry_points(group="ember.backends"):
        if ep.name == ref["name"]:
            return ep.load()
    module, _, qual = ref["name"].partition(":")
    if ref.get("path"):
        sys.path.insert(0, ref["path"])
    obj = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def call(compiled, inputs):
    if getattr(compiled, "_boxed_call", False):
        return compiled(list(inputs))
    return compiled(*inputs)


def signature(phase, exc):
    first = (str(exc).strip().splitlines() or [""])[0]
    msg = re.sub(r"\\d+", "#", re.sub(r"0x[0-9a-fA-F]+", "<addr>", first))[:300]
    t = type(exc)
    return {{"phase": phase, "exc_type": f"{{t.__module__}}.{{t.__qualname__}}", "message": msg}}


def leaves(x):
    if isinstance(x, (list, tuple)):
        return [y for item in x for y in leaves(item)]
    return [x]


def rel_rms(x, ref):
    x, ref = x.detach().double(), ref.detach().double()
    scale = float(ref.nan_to_num(0.0).pow(2).mean().sqrt())
    return float((x - ref).nan_to_num(0.0).pow(2).mean().sqrt()) / max(scale, 1e-30)


def inaccuracy(res, gm, inputs, tol, multiplier):
    with torch.no_grad():
        eager = fx.Interpreter(gm).run(*inputs)
        try:
            wide = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                    for t in inputs]
            ref = fx.Interpreter(copy.deepcopy(gm).to(torch.float64)).run(*wide)
        except Exception:
            ref = None
    r, e = leaves(res), leaves(eager)
    f = leaves(ref) if ref is not None else e
    if len(r) != len(e):
        return f"the backend returned {{len(r)}} outputs, eager {{len(e)}}"
    for i, (a, b, c) in enumerate(zip(r, e, f)):
        if not isinstance(b, torch.Tensor):
            if a != b:
                return f"output {{i}}: {{a!r}} != eager {{b!r}}"
            continue
        if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return f"output {{i}}: shape or dtype differs from eager"
        if not b.is_floating_point():
            if not torch.equal(a, b):
                return f"output {{i}} differs from eager"
            continue
        if not torch.equal(a.isnan(), c.isnan()):
            return f"output {{i}}: NaN where the float64 reference has none (or the reverse)"
        res_err = rel_rms(a, c)
        ref_err = rel_rms(b, c) if ref is not None else 0.0
        if res_err > multiplier * ref_err + tol:
            return (f"output {{i}}: relative RMS error {{res_err:.3g}} vs float64 eager, "
                    f"eager float32 has {{ref_err:.3g}}")
    return None


def main():
    failure = json.loads((HERE / "failure.json").read_text())
    gm = ember.ir.to_fx(ember.ir.load(HERE / "graph"))
    inputs = load_inputs()
    backend = load_backend(failure["backend"])
    phase = "compile"
    try:
        compiled = backend(copy.deepcopy(gm), list(inputs))
        phase = "run"
        res = call(compiled, inputs)
    except Exception as exc:
        traceback.print_exc()
        got = signature(phase, exc)
        want = failure.get("signature")
        if failure["kind"] == "error" and got == want:
            print(f"ember repro: REPRODUCED {{got['exc_type']}} at {{phase}} time: {{got['message']}}")
            return 1
        print(f"ember repro: FAILED DIFFERENTLY: {{got}} (recorded: {{want}})")
        return 3
    if failure["kind"] == "accuracy":
        why = inaccuracy(res, gm, inputs, failure["tol"], failure["multiplier"])
        if why is not None:
            print(f"ember repro: REPRODUCED inaccuracy: {{why}}")
            return 1
    print("ember repro: no failure reproduced")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def render(summary: str, backend: str) -> str:
    """``repro.py``'s source for a repro of ``summary`` on ``backend``."""
    return SCRIPT.format(summary=summary, backend=backend)
