"""ember.ir: the contracts between ember's stages.

* The graph IR (:class:`GraphIR`, :class:`Node`, :class:`TensorMeta`, ...):
  an FX graph as data, with :func:`from_fx` / :func:`to_fx`,
  :func:`dumps` / :func:`loads` (JSON text) and :func:`save` / :func:`load`
  (a directory with ``graph.json`` and ``weights.safetensors``).

* The guard IR (:class:`GuardSet`, :class:`Guard`, :class:`GuardKind`,
  sources :class:`Local` / :class:`Global` / :class:`Attr` / :class:`Item` /
  :class:`Size` / :class:`Stride` / :class:`DictItem` / :class:`DictEntry` with :func:`parse_source`): what a compiled
  graph assumed about its frame.
* The value encoding (:func:`encode_value` / :func:`decode_value`): tagged
  JSON for the constants found in graphs and guard payloads.
* :class:`FormatError`: every malformed input, naming file, node and field.
* The conventions every package shares at run time: log areas
  (``ember.ir.logs``: ``ember.<area>`` loggers, ``EMBER_LOGS``, ``set_logs``)
  and the debug folder (``ember.ir.debug``: ``EMBER_COMPILE_DEBUG``, one folder
  per compiled frame).
* The ATen recorder and the decomposition table both compilers trace with
  (:class:`AtenRecorder`, ``ember.ir.recorder``; :func:`core_aten_table`,
  :func:`mutation_decompositions`, ... in ``ember.ir.decompositions``).
* Symbolic sizes and fake tensors at run time (``ember.ir.shapes``: ``ShapeEnv``,
  ``SymNode``, ``EagerLayoutFakeMode``), shared by every stage that traces, not a
  contract (ADR 0066).

Other packages import this module's names, and the public submodules listed under
``[tool.ember] public-modules`` in ember-ir's ``pyproject.toml``; every other module
is private (``tools/check_imports.py``).
"""

from ember.ir import debug, logs, shapes
from ember.ir.decompositions import (
    DecompDict,
    LazyDecompTable,
    core_aten_decompositions,
    core_aten_table,
    get_decompositions,
    is_random,
    mutation_decompositions,
    with_required,
)
from ember.ir.errors import FormatError, UnsupportedGraphError
from ember.ir.fx_convert import detect_dialect, from_fx, meta_of, to_fx
from ember.ir.graph import (
    DIALECTS,
    OPS,
    Dialect,
    Dim,
    GraphIR,
    Meta,
    ModuleSpec,
    Node,
    PyTreeCodegen,
    ScalarMeta,
    TensorMeta,
    format_node,
)
from ember.ir.guards import (
    PAYLOAD_SCHEMA,
    SOURCELESS_KINDS,
    Guard,
    GuardKind,
    GuardSet,
    dispatch_keys_text,
    global_state_payload,
    qualname,
    tensor_payload,
)
from ember.ir.modules import module_spec
from ember.ir.recorder import AtenRecorder, DecompTable, UnrecordedTensor, call_node, symint_args
from ember.ir.serialize import dumps, loads
from ember.ir.source import (
    DICT_ENTRY_PREFIXES,
    DICT_ITEM_PREFIX,
    Attr,
    DictEntry,
    DictItem,
    Global,
    Item,
    Local,
    Size,
    Source,
    Stride,
    format_needed,
    needs_format_2,
    parse_source,
    root_of,
)
from ember.ir.symbolic import is_relation, parse_sym_expr, size_symbol, sym_text
from ember.ir.targets import resolve_method, resolve_target, target_name, tensor_method_allowed
from ember.ir.values import (
    JSON,
    NodeRef,
    decode_value,
    dtype_name,
    encode_guard_value,
    encode_value,
    parse_device,
    parse_dtype,
)
from ember.ir.versioning import GRAPH_FORMAT, GRAPH_VERSION, GUARDS_FORMAT, GUARDS_VERSION
from ember.ir.weights import GRAPH_FILE, WEIGHTS_FILE, load, save

__all__ = [
    "debug",
    "logs",
    "shapes",
    "DICT_ENTRY_PREFIXES",
    "DICT_ITEM_PREFIX",
    "module_spec",
    "DIALECTS",
    "GRAPH_FILE",
    "OPS",
    "WEIGHTS_FILE",
    "Dialect",
    "Dim",
    "GraphIR",
    "Meta",
    "ModuleSpec",
    "Node",
    "PyTreeCodegen",
    "ScalarMeta",
    "TensorMeta",
    "detect_dialect",
    "dumps",
    "format_node",
    "from_fx",
    "load",
    "loads",
    "meta_of",
    "resolve_method",
    "resolve_target",
    "save",
    "target_name",
    "tensor_method_allowed",
    "to_fx",
    "GRAPH_FORMAT",
    "GRAPH_VERSION",
    "GUARDS_FORMAT",
    "GUARDS_VERSION",
    "JSON",
    "PAYLOAD_SCHEMA",
    "SOURCELESS_KINDS",
    "Attr",
    "DictEntry",
    "DictItem",
    "FormatError",
    "Global",
    "Guard",
    "GuardKind",
    "GuardSet",
    "Item",
    "Local",
    "NodeRef",
    "Size",
    "Source",
    "Stride",
    "UnsupportedGraphError",
    "decode_value",
    "dispatch_keys_text",
    "dtype_name",
    "encode_guard_value",
    "encode_value",
    "global_state_payload",
    "is_relation",
    "format_needed",
    "needs_format_2",
    "parse_device",
    "parse_dtype",
    "parse_source",
    "parse_sym_expr",
    "qualname",
    "root_of",
    "size_symbol",
    "sym_text",
    "tensor_payload",
    # the ATen recorder and the decomposition table (ember.ir.recorder, ember.ir.decompositions)
    "AtenRecorder",
    "DecompDict",
    "DecompTable",
    "LazyDecompTable",
    "UnrecordedTensor",
    "call_node",
    "core_aten_decompositions",
    "core_aten_table",
    "get_decompositions",
    "is_random",
    "mutation_decompositions",
    "symint_args",
    "with_required",
]
