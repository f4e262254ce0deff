"""ember.aotgrad: ahead-of-time autograd.

Traces a function's forward and backward at ATen level into one joint graph,
removes mutation (functionalization), splits it into a forward and a backward
graph (default or min-cut rematerialization partitioner) and hands each to a
compiler; the pair runs inside one ``torch.autograd.Function``.

    from ember.aotgrad import aot_function, nop_compiler
    f = aot_function(lambda x: x.sin().cos(), nop_compiler)
"""

from ember.aotgrad.api import (
    AotFunction,
    AotModule,
    AotOptions,
    GraphCompiler,
    PartitionFn,
    aot_autograd,
    aot_function,
    aot_inference,
    aot_module,
    nop_compiler,
)
from ember.aotgrad.backends import aot_eager
from ember.aotgrad.decompositions import (
    LazyDecompTable,
    core_aten_decompositions,
    get_decompositions,
    mutation_decompositions,
)
from ember.aotgrad.errors import (
    AotGradError,
    DoubleBackwardError,
    FunctionalizationError,
    PartitionError,
    TraceError,
    VerifyError,
)
from ember.aotgrad.exchange import round_trip, to_graph_ir
from ember.aotgrad.functionalize import functionalize
from ember.aotgrad.joint import OutputSlot, TracedGraph, trace_graph
from ember.aotgrad.partition import (
    OpCategory,
    Partition,
    default_partition,
    min_cut_rematerialization_partition,
    op_category,
    split_joint,
)
from ember.aotgrad.trace import GraphTracer

__all__ = [
    "AotFunction",
    "AotGradError",
    "AotModule",
    "AotOptions",
    "DoubleBackwardError",
    "FunctionalizationError",
    "GraphCompiler",
    "GraphTracer",
    "OpCategory",
    "OutputSlot",
    "Partition",
    "PartitionError",
    "PartitionFn",
    "TraceError",
    "TracedGraph",
    "VerifyError",
    "aot_autograd",
    "aot_eager",
    "aot_function",
    "aot_inference",
    "aot_module",
    "core_aten_decompositions",
    "default_partition",
    "functionalize",
    "get_decompositions",
    "LazyDecompTable",
    "min_cut_rematerialization_partition",
    "mutation_decompositions",
    "nop_compiler",
    "op_category",
    "round_trip",
    "split_joint",
    "to_graph_ir",
    "trace_graph",
]
