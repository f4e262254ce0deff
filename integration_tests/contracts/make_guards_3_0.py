"""How the guard format 3.0 golden file in this directory was written (ADR 0062).

Format 3.0 added one guard kind, ``NO_ALIASING``: the tensors a graph writes in place
(``written``: positions in ``sources``) share memory with no other of its inputs. Run once,
by hand, when format 3.0 was made; never rerun it to make a failing contract test pass.

    .venv/bin/python integration_tests/contracts/make_guards_3_0.py
"""

from __future__ import annotations

from pathlib import Path

from ember.ir import Guard, GuardKind, GuardSet, Local, parse_source

HERE = Path(__file__).parent


def main() -> None:
    tensor = {
        "cls": "torch.Tensor", "cls_id": 140000000000001, "dtype": "float32", "device": "cpu",
        "requires_grad": False, "dispatch_keys": "DispatchKeySet(CPU, ADInplaceOrView, AutogradCPU)",
        "ndim": 1, "sizes": [8], "strides": [1],
    }
    cache = parse_source("dict.__getitem__(L['cache'], 'k')")
    guards = GuardSet(
        guards=(
            Guard(Local("x"), GuardKind.TENSOR_MATCH, tensor),
            Guard(cache, GuardKind.TENSOR_MATCH, tensor),
            Guard(None, GuardKind.NO_ALIASING, {"sources": ["L['x']", cache.expr()], "written": [1]}),
        ),
    )  # fmt: skip
    (HERE / "guards_3.0.json").write_text(guards.dumps())


if __name__ == "__main__":
    main()
