"""Decomposition tables: ember.ir's one table (``ember.ir.decompositions``), under the
names ember.aotgrad has always exported them by.

aotgrad always applies the functionalization layer (:func:`mutation_decompositions`,
through :func:`with_required`) below the table a caller passes.
"""

from __future__ import annotations

from ember.ir import (
    DecompDict,
    LazyDecompTable,
    core_aten_decompositions,
    get_decompositions,
    mutation_decompositions,
    with_required,
)
from ember.ir import DecompTable as DecompMapping

#: an ATen overload -> its decomposition (a table one can add to)
DecompTable = DecompDict

#: ``DecompMapping`` (ember.ir's ``DecompTable``): what ``aot_function`` & co. accept, a
#: table or a :class:`LazyDecompTable`
__all__ = [
    "DecompMapping",
    "DecompTable",
    "LazyDecompTable",
    "core_aten_decompositions",
    "get_decompositions",
    "mutation_decompositions",
    "with_required",
]
