"""How the guard format 2.0 golden file in this directory was written (ADR 0045).

Format 2.0 added one source kind, ``dict.__getitem__(base, key)``: a dict's own item
read past a ``__getitem__`` that a dict subclass overrides. Run once, by hand, when
format 2.0 was released; never rerun it to make a failing contract test pass.

    .venv/bin/python integration_tests/contracts/make_guards_2_0.py
"""

from __future__ import annotations

from pathlib import Path

from ember.ir import DictItem, Global, Guard, GuardKind, GuardSet, Item, Local, encode_value, parse_source

HERE = Path(__file__).parent


def main() -> None:
    acts = Global("ACT2FN")
    guards = GuardSet(
        guards=(
            Guard(acts, GuardKind.TYPE_MATCH, {"type": "transformers.activations.ClassInstantier", "type_id": 140000000000011}),
            Guard(acts, GuardKind.DICT_KEYS, {"keys": [encode_value("gelu"), encode_value("silu")]}),
            Guard(DictItem(acts, "silu"), GuardKind.ID_MATCH, {"id": 140000000000012, "repr": "<class 'SiLUActivation'>"}),
            Guard(Item(DictItem(acts, "gelu"), 1), GuardKind.DICT_KEYS, {"keys": [encode_value("approximate")]}),
            Guard(parse_source("dict.__getitem__(L['self'].acts, 'gelu')[1]['approximate']"), GuardKind.CONSTANT_MATCH, {"value": encode_value("tanh")}),
            Guard(Local("x"), GuardKind.TENSOR_MATCH, {
                "cls": "torch.Tensor", "cls_id": 140000000000001, "dtype": "float32", "device": "cpu",
                "requires_grad": False, "dispatch_keys": "DispatchKeySet(CPU, ADInplaceOrView, AutogradCPU)",
                "ndim": 2, "sizes": [None, 8], "strides": [8, 1],
            }),
        ),
        shape_relations=("s0 >= 2",),
    )  # fmt: skip
    (HERE / "guards_2.0.json").write_text(guards.dumps())


if __name__ == "__main__":
    main()
