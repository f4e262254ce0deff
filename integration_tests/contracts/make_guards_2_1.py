"""How the guard format 2.1 golden file in this directory was written (ADR 0064).

Format 2.1 added the ``list(dict.keys(base))[i]`` / ``list(dict.values(base))[i]``
sources (a dict's entries by position, for dicts keyed by classes, enum members or
dtypes) and ``$set``/``$frozenset`` payload values (a module-level set of names pinned
by value). Run once, by hand, when format 2.1 was released; never rerun it to make a
failing contract test pass.

    .venv/bin/python integration_tests/contracts/make_guards_2_1.py
"""

from __future__ import annotations

from pathlib import Path

from ember.ir import DictEntry, Global, Guard, GuardKind, GuardSet, encode_guard_value

HERE = Path(__file__).parent


def main() -> None:
    table = Global("_BASIC_TYPE_VALIDATORS")
    names = Global("SUPPORTED")
    guards = GuardSet(
        guards=(
            Guard(table, GuardKind.TYPE_MATCH, {"type": "dict", "type_id": 140000000000021}),
            Guard(table, GuardKind.LENGTH_MATCH, {"length": 2}),
            Guard(DictEntry(table, 0, "keys"), GuardKind.ID_MATCH, {"id": 140000000000022, "repr": "typing.Union"}),
            Guard(DictEntry(table, 1, "keys"), GuardKind.ID_MATCH, {"id": 140000000000023, "repr": "<class 'list'>"}),
            Guard(DictEntry(table, 1, "values"), GuardKind.FUNCTION_MATCH, {"id": 140000000000024, "qualname": "validate_list"}),
            Guard(names, GuardKind.TYPE_MATCH, {"type": "set", "type_id": 140000000000025}),
            Guard(names, GuardKind.EQUALS_MATCH, {"value": encode_guard_value({"relu", "gelu"})}),
        ),
    )  # fmt: skip
    (HERE / "guards_2.1.json").write_text(guards.dumps())


if __name__ == "__main__":
    main()
