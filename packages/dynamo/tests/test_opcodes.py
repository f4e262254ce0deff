"""Every opcode of every supported CPython is handled, a deliberate graph break,
never seen by the translator, or listed as known-missing.

The opcode names come from ``dis.opmap`` for the running interpreter and from
``opcodes/cpython-3.x.txt`` (``dis.opmap`` dumped by that version) for the
others. Known-missing opcodes are reported as an expected failure naming them
(``pytest -rx``), and a handler added for one must also take it off
``KNOWN_MISSING``.
"""

from __future__ import annotations

import dis
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ember.dynamo import instructions_311, instructions_312, instructions_313
from ember.dynamo.instructions_common import CommonInstructions
from ember.dynamo.symbolic_convert import InliningGeneratorTranslator, InstructionTranslator

VERSIONS: dict[str, ModuleType] = {
    "3.11": instructions_311,
    "3.12": instructions_312,
    "3.13": instructions_313,
}
LISTS = Path(__file__).with_name("opcodes")


def opcodes(version: str) -> set[str]:
    lines = (LISTS / f"cpython-{version}.txt").read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def upper_names(cls: type) -> set[str]:
    return {name for name in vars(cls) if name.isupper()}


def handled(version: str) -> set[str]:
    """Opcodes with a handler on ``version``: the shared handlers, the version's
    own (its module and the ones it builds on), and the translators' own."""
    names = set()
    for klass in CommonInstructions.__mro__:
        names |= upper_names(klass)
    for klass in VERSIONS[version].VersionInstructions.__mro__:
        names |= upper_names(klass)
    for klass in (InstructionTranslator, InliningGeneratorTranslator):
        names |= upper_names(klass)
    return names


def classify(version: str) -> dict[str, set[str]]:
    module = VERSIONS[version]
    ops = opcodes(version)
    groups: dict[str, set[str]] = {
        "handled": ops & handled(version),
        "graph break": ops & set(module.GRAPH_BREAK_OPCODES),
        "never traced": {op for op in ops if op in module.NOT_TRACED or op.startswith("INSTRUMENTED_")},
        "known missing": ops & set(module.KNOWN_MISSING),
    }
    groups["unclassified"] = ops - set().union(*groups.values())
    return groups


RUNNING = f"{sys.version_info.major}.{sys.version_info.minor}"


def test_checked_in_list_matches_the_running_interpreter() -> None:
    assert RUNNING in VERSIONS, f"Python {RUNNING} is not a supported version"
    assert opcodes(RUNNING) == set(dis.opmap), (
        f"opcodes/cpython-{RUNNING}.txt is stale: regenerate it with this interpreter"
    )


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_every_opcode_is_classified(version: str) -> None:
    groups = classify(version)
    assert not groups["unclassified"], (
        f"Python {version}: opcodes with no handler, no deliberate graph break and not listed "
        f"as known-missing: {sorted(groups['unclassified'])} (see instructions_{version.replace('.', '')}.py)"
    )


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_each_opcode_has_one_class(version: str) -> None:
    groups = classify(version)
    kinds = ("handled", "graph break", "never traced", "known missing")
    for i, a in enumerate(kinds):
        for b in kinds[i + 1 :]:
            both = groups[a] & groups[b]
            assert not both, f"Python {version}: {sorted(both)} are both {a} and {b}"


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_lists_name_only_real_opcodes(version: str) -> None:
    module = VERSIONS[version]
    ops = opcodes(version)
    for table in ("GRAPH_BREAK_OPCODES", "NOT_TRACED", "KNOWN_MISSING"):
        stray = set(getattr(module, table)) - ops
        assert not stray, f"{module.__name__}.{table} names opcodes Python {version} lacks: {sorted(stray)}"


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_known_missing_opcodes(version: str) -> None:
    missing = sorted(classify(version)["known missing"])
    if missing:
        pytest.xfail(f"Python {version}: {len(missing)} opcodes without a handler yet: {', '.join(missing)}")


def test_a_deliberate_break_names_its_reason() -> None:
    import ember.dynamo
    from ember.dynamo.testing import CompileCounter

    def deletes(x: object) -> object:
        global GLOBAL_TO_DELETE
        GLOBAL_TO_DELETE = 1
        del GLOBAL_TO_DELETE
        return x

    with pytest.raises(ember.dynamo.Unsupported, match="DELETE_GLOBAL is not supported: `del` of a global"):
        ember.dynamo.compile(deletes, backend=CompileCounter(), fullgraph=True)(1)
