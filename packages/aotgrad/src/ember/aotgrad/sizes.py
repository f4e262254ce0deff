"""Symbolic sizes in traced graphs: from ``SymInt`` values to nodes that compute them.

While tracing with symbolic inputs, ATen ops receive sizes as ``torch.SymInt``
(``view(x, [s0 * 4, 16])``) and the recorder keeps them in the node arguments
as they are: the tracer, functionalization and the partitioner never need to
know where a size comes from. Once a graph is final (the inference graph, or
the forward and the backward after partitioning), :func:`bind_sizes` replaces
each symbolic value by nodes computing it from the graph's own inputs:
``aten.sym_size.int(primals_1, 0)`` for a symbol that is a dimension of an
input, then ``operator.mul``/``floordiv``/``mod``... for the arithmetic, once
per expression, right after the placeholders. So every graph is runnable on
its own, and each one reads its sizes from its own inputs (the backward from
the tangents and saved tensors).

A symbol the backward needs but none of its inputs has as a dimension (the
batch size of ``x.sum()``'s gradient, whose tangent is a scalar) is passed
from the forward as a saved int: :func:`pass_sizes` adds it to the forward's
outputs and the backward's inputs.

An *unbacked* symbol (``u0``: the number of True values of a mask, ADR 0046) is no
input's dimension: the graph reads it from the result of the op that made it
(``aten.sym_size.int(index, 0)`` right after ``index``), and every expression over
it is computed after that read.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten, tree_map

from ember.aotgrad.errors import TraceError
from ember.aotgrad.floats import FLOAT_SYMBOL
from ember.ir import call_node, symint_args
from ember.ir.shapes import python_value

if TYPE_CHECKING:
    import sympy

if TYPE_CHECKING:
    from ember.aotgrad.partition import Partition

aten = torch.ops.aten
SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


def expr_of(value: object) -> sympy.Basic | None:
    """The sympy expression of a symbolic value (``None`` for plain values)."""
    import sympy
    if isinstance(value, SYM_TYPES):
        expr: sympy.Basic = value.node.expr
        if expr.is_number or expr in (sympy.true, sympy.false):
            return None
        return expr
    return None


def hint(value: object) -> int:
    """An int for heuristics: a symbolic size's value for the inputs traced now, never
    guarded (``int(size)`` would specialize the graph to it)."""
    if isinstance(value, torch.SymInt):
        return int(value.node.hint) if expr_of(value) is not None else int(value)
    return int(value)  # type: ignore[call-overload,no-any-return]


def is_symbolic_tensor(t: object) -> bool:
    return isinstance(t, torch.Tensor) and any(expr_of(s) is not None for s in (*t.shape, *t.stride()))


def _values(value: object) -> Iterator[object]:
    """Every SymInt/SymFloat/SymBool inside ``value`` (tensor sizes and strides included)."""
    for leaf in tree_flatten(value)[0]:
        if isinstance(leaf, torch.Tensor):
            yield from leaf.shape
            yield from leaf.stride()
        elif isinstance(leaf, SYM_TYPES):
            yield leaf


def needed_symbols(gm: fx.GraphModule) -> set[sympy.Symbol]:
    """Symbols ``gm``'s arguments and values depend on (what running or compiling it needs)."""
    import sympy
    needed: set[sympy.Symbol] = set()
    for node in gm.graph.nodes:
        for value in (*_values((node.args, node.kwargs)), *_values(node.meta.get("val"))):
            expr = expr_of(value)
            if expr is not None:
                needed |= {s for s in expr.free_symbols if isinstance(s, sympy.Symbol)}
    return needed


#: ``symbol_sources``' dim for a 0-d float64 tensor holding a dynamic Python float (ADR 0044)
ITEM = -1


def symbol_sources(gm: fx.GraphModule) -> dict[sympy.Symbol, tuple[fx.Node, int | None]]:
    """Each symbol one of ``gm``'s inputs provides: (placeholder, dim), or (placeholder,
    None) for a placeholder holding the symbolic int itself, or (placeholder, ``ITEM``)
    for a dynamic float's 0-d float64 tensor."""
    import sympy
    found: dict[sympy.Symbol, tuple[fx.Node, int | None]] = {}
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            for d, size in enumerate(val.shape):
                expr = expr_of(size)
                if isinstance(expr, sympy.Symbol):
                    found.setdefault(expr, (node, d))
            held = getattr(val, FLOAT_SYMBOL, None)  # a dynamic Python float's tensor
            if isinstance(held, sympy.Symbol):
                found.setdefault(held, (node, ITEM))
        else:
            expr = expr_of(val)
            if isinstance(expr, sympy.Symbol):
                found.setdefault(expr, (node, None))
    return found


def unbacked_sources(gm: fx.GraphModule) -> dict[sympy.Symbol, tuple[fx.Node, int | None]]:
    """Each symbol that no placeholder provides but a computed tensor has as a dimension:
    (the first node producing such a tensor, dim). Unbacked sizes are found this way; an
    unbacked value (``.item()``, ADR 0060) is (the ``_local_scalar_dense`` node, None)."""
    import sympy
    inputs = symbol_sources(gm)
    found: dict[sympy.Symbol, tuple[fx.Node, int | None]] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        val = node.meta.get("val")
        if node.target is aten._local_scalar_dense.default and isinstance(val, SYM_TYPES):
            expr = expr_of(val)
            if isinstance(expr, sympy.Symbol) and expr not in inputs:
                found.setdefault(expr, (node, None))
            continue
        if not isinstance(val, torch.Tensor):
            continue
        for d, size in enumerate(val.shape):
            expr = expr_of(size)
            if isinstance(expr, sympy.Symbol) and expr not in inputs:
                found.setdefault(expr, (node, d))
    return found


def read_unbacked_producers(gm: fx.GraphModule) -> list[fx.Node]:
    """The ops making an unbacked size that some node reads as a number in its arguments
    (``mul(t, u0)``): no FX edge leads from the reader to them, so a pass choosing nodes by
    their inputs (the partitioner) must keep them where the size is read."""
    import sympy
    read: set[sympy.Symbol] = set()
    for node in gm.graph.nodes:
        for value in _values((node.args, node.kwargs)):
            expr = expr_of(value)
            if expr is not None:
                read |= {s for s in expr.free_symbols if isinstance(s, sympy.Symbol)}
    producers = unbacked_sources(gm)
    return [producers[s][0] for s in sorted(read, key=str) if s in producers]


def has_unbacked(gm: fx.GraphModule) -> bool:
    """Whether ``gm`` has a size that depends on data (an unbacked symbol, ADR 0046)."""
    for node in gm.graph.nodes:
        for value in (*_values((node.args, node.kwargs)), *_values(node.meta.get("val"))):
            expr = expr_of(value)
            env = getattr(getattr(value, "node", None), "env", None)
            if expr is not None and env is not None and env.has_unbacked(expr):
                return True
    return False


def shape_env_of(gm: fx.GraphModule) -> Any:
    """The ember ShapeEnv behind ``gm``'s symbolic values (``None`` when it has none)."""
    for node in gm.graph.nodes:
        for value in (*_values((node.args, node.kwargs)), *_values(node.meta.get("val"))):
            env = getattr(getattr(value, "node", None), "env", None)
            if env is not None:
                return env
    return None


class _Binder:
    """Emits, once per expression, the nodes computing a symbolic value in ``gm``."""

    def __init__(self, gm: fx.GraphModule) -> None:
        self.gm = gm
        self.graph = gm.graph
        self.sources = symbol_sources(gm)
        self.computed = unbacked_sources(gm)
        self.env = shape_env_of(gm)
        self.cache: dict[sympy.Basic, Any] = {}
        #: id(SymNode) -> (the node, kept alive; its graph node), for float recipes
        self.recipes: dict[int, tuple[Any, Any]] = {}
        self.anchor: fx.Node = next(n for n in self.graph.nodes if n.op != "placeholder")
        #: the graph's nodes before binding (the nodes this binder adds are not among them)
        self.original: set[fx.Node] = set(self.graph.nodes)

    def value(self, value: Any) -> Any:
        expr = expr_of(value)
        if expr is None:
            return python_value(value)  # a constant: its expression is a number
        if getattr(value.node, "recipe", None) is not None:
            return self._recipe(value.node)
        return self.node(expr, type(value))

    def _recipe(self, sym: Any) -> Any:
        """A float computed as traced (``SymNode.recipe``): float arithmetic is not
        associative, so never rebuilt from its canonicalized expression."""
        hit = self.recipes.get(id(sym))
        if hit is not None:
            return hit[1]
        fn, operands = sym.recipe
        args = []
        for o in operands:
            if getattr(o, "recipe", None) is not None:
                args.append(self._recipe(o))
            elif o.expr.is_number:
                args.append(o.pytype(o.expr))
            else:
                args.append(self.node(o.expr, {int: torch.SymInt, float: torch.SymFloat,
                                               bool: torch.SymBool}[o.pytype]))
        with self.graph.inserting_before(self._anchor_of(sym.expr)):  # after `.item()`'s read
            made = self.graph.call_function(fn, tuple(args))
        if self.env is not None:
            made.meta["val"] = torch.SymFloat(sym) if sym.pytype is float else sym  # type: ignore[no-untyped-call]
        self.recipes[id(sym)] = (sym, made)
        return made

    def node(self, expr: sympy.Basic, kind: type) -> Any:
        hit = self.cache.get(expr)
        if hit is not None:
            return hit
        if expr.is_Integer:
            return int(expr)
        if expr.is_Number:
            return float(expr)
        with self.graph.inserting_before(self._anchor_of(expr)):
            made = self._build(expr, kind)
        self._meta(made, expr, kind)
        self.cache[expr] = made
        return made

    def _anchor_of(self, expr: sympy.Basic) -> fx.Node:
        """Where the nodes computing ``expr`` go: after the placeholders, or right after the
        reads of the unbacked sizes it uses (each read right after the op producing it)."""
        late = [s for s in expr.free_symbols if s not in self.sources and s in self.computed]
        if not late:
            return self.anchor
        reads = [self._unbacked_read(s) for s in late]
        order = {n: i for i, n in enumerate(self.graph.nodes)}
        last: fx.Node = max(reads, key=lambda n: order[n])
        after: fx.Node = last.next
        while after not in self.original and after.op != "output":
            after = after.next  # past what was computed after that read already (its operands)
        return after

    def _unbacked_read(self, sym: sympy.Symbol) -> fx.Node:
        hit = self.cache.get(sym)
        if isinstance(hit, fx.Node):
            return hit
        producer, dim = self.computed[sym]
        if dim is None:  # ``.item()``'s node: it is the value
            self.cache[sym] = producer
            return producer
        with self.graph.inserting_after(producer):
            read = self.graph.call_function(aten.sym_size.int, (producer, dim))
        self._meta(read, sym, torch.SymInt)
        self.cache[sym] = read
        return read

    def _meta(self, node: Any, expr: sympy.Basic, kind: type) -> None:
        """``node.meta["val"]``: the symbolic value it computes (what compilers read)."""
        if isinstance(node, fx.Node) and "val" not in node.meta and self.env is not None:
            pytypes: dict[Any, type] = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}
            pytype = pytypes[kind]
            node.meta["val"] = self.env.sym_value(expr, pytype)

    def _build(self, expr: sympy.Basic, kind: type) -> Any:
        import sympy
        if isinstance(expr, sympy.Symbol):
            source = self.sources.get(expr)
            if source is None and expr in self.computed:
                return self._unbacked_read(expr)
            if source is None:
                raise TraceError(f"size symbol {expr} is not a dimension of any input of the graph")
            ph, dim = source
            if dim is None:
                return ph
            if dim == ITEM:
                return self.graph.call_function(aten._local_scalar_dense.default, (ph,))
            return self.graph.call_function(aten.sym_size.int, (ph, dim))
        if isinstance(expr, sympy.Add):
            return self._fold(operator.add, expr.args, kind)
        if isinstance(expr, sympy.Mul):
            num, den = sympy.fraction(expr)
            if den != 1:
                return self._call(operator.truediv, (num, den), torch.SymFloat)
            coeff, rest = expr.as_coeff_Mul()
            if coeff == -1:
                return self._call(operator.neg, (rest,), kind)
            return self._fold(operator.mul, expr.args, kind)
        if isinstance(expr, sympy.floor):
            num, den = sympy.fraction(sympy.together(expr.args[0]))
            return self._call(operator.floordiv, (num, den), torch.SymInt)
        if isinstance(expr, sympy.ceiling):
            num, den = sympy.fraction(sympy.together(expr.args[0]))
            return self._call(operator.neg, (sympy.floor(-num / den),), torch.SymInt)
        if isinstance(expr, sympy.Mod):
            return self._call(operator.mod, expr.args, torch.SymInt)
        if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) > 0:
            return self._call(operator.pow, expr.args, kind)
        if isinstance(expr, sympy.Pow) and expr.exp == sympy.Rational(1, 2):
            return self._call(math.sqrt, (expr.base,), torch.SymFloat)
        relations: dict[Any, Callable[..., Any]] = {
            sympy.Eq: operator.eq, sympy.Ne: operator.ne, sympy.Lt: operator.lt,
            sympy.Le: operator.le, sympy.Gt: operator.gt, sympy.Ge: operator.ge,
        }
        for rel, fn in relations.items():
            if isinstance(expr, rel):
                return self._call(fn, tuple(expr.args), torch.SymBool)
        raise TraceError(f"cannot compute the size expression {expr} in a graph")

    def _call(self, fn: Callable[..., Any], args: tuple[sympy.Basic, ...], kind: type) -> fx.Node:
        parts = tuple(self.node(a, torch.SymInt) for a in args)
        node = self.graph.call_function(fn, parts)
        return node

    def _fold(self, fn: Callable[..., Any], args: tuple[sympy.Basic, ...], kind: type) -> Any:
        acc, acc_expr = self.node(args[0], kind), args[0]
        for a in args[1:-1]:
            acc_expr = fn(acc_expr, a)
            acc = self.graph.call_function(fn, (acc, self.node(a, kind)))
            self._meta(acc, acc_expr, kind)
        return self.graph.call_function(fn, (acc, self.node(args[-1], kind)))


def _symbols_of(value: object) -> set[Any]:
    found: set[Any] = set()
    for v in _values(value):
        expr = expr_of(v)
        if expr is not None:
            found |= expr.free_symbols
    return found


def has_symbolic_args(gm: fx.GraphModule) -> bool:
    return any(
        isinstance(a, SYM_TYPES)
        for node in gm.graph.nodes
        for a in tree_flatten((node.args, node.kwargs))[0]
    )


def bind_sizes(gm: fx.GraphModule) -> fx.GraphModule:
    """Replace every symbolic value in ``gm``'s node arguments by nodes computing it (in place)."""
    if not has_symbolic_args(gm):
        return gm
    binder = _Binder(gm)
    for node in list(gm.graph.nodes):
        if node.op not in ("call_function", "output"):
            continue

        def one(a: Any) -> Any:
            return binder.value(a) if isinstance(a, SYM_TYPES) else a

        node.args = tree_map(one, node.args)
        node.kwargs = tree_map(one, node.kwargs)
    gm.graph.lint()
    gm.recompile()
    return gm


def pass_sizes(part: Partition) -> Partition:
    """Bind the sizes of a forward/backward pair; symbols the backward cannot read from
    its own inputs become saved ints (forward outputs, backward placeholders)."""
    fw, bw = part.forward, part.backward
    missing = sorted(needed_symbols(bw) - set(symbol_sources(bw)), key=str)
    saved = list(part.saved)
    if missing:
        env = shape_env_of(fw) or shape_env_of(bw)
        if env is None:
            raise TraceError("the backward needs sizes but the graphs carry no shape environment")
        out = next(n for n in fw.graph.nodes if n.op == "output")
        floats = {s for s, t in getattr(env, "unbacked_values", {}).items() if t is float}
        values = [env.sym_value(sym, float if sym in env.floats or sym in floats else int)
                  for sym in missing]
        # a float ``.item()`` read (ADR 0060): the backward gets the 0-d tensor it was read
        # from and reads it again, so neither graph hands a Python float across and kernels
        # keep reading it from memory (ADR 0055)
        producers = unbacked_sources(fw)
        inputs = symbol_sources(fw)
        tensors: dict[Any, fx.Node] = {}
        for sym in missing:
            node, dim = producers.get(sym, (None, 0))
            if sym in floats and node is not None and dim is None and isinstance(node.args[0], fx.Node):
                tensors[sym] = node.args[0]
            elif inputs.get(sym, (None, None))[1] == ITEM:  # a dynamic float's tensor (ADR 0044)
                tensors[sym] = inputs[sym][0]
        out.args = ((*out.args[0], *[tensors.get(sym, v) for sym, v in zip(missing, values,
                                                                           strict=True)]),)
        last_saved = [n for n in bw.graph.nodes if n.op == "placeholder" and n.name in part.saved]
        anchor = last_saved[-1].next if last_saved else next(iter(bw.graph.nodes))
        reads: list[tuple[fx.Node, Any]] = []
        for sym, value in zip(missing, values, strict=True):
            with bw.graph.inserting_before(anchor):
                ph = bw.graph.placeholder(f"item_{sym}" if sym in tensors else f"size_{sym}")
            ph.meta["val"] = tensors[sym].meta["val"] if sym in tensors else value
            if sym in tensors and sym not in inputs:  # (a dynamic float's: bind_sizes reads it)
                reads.append((ph, value))
            saved.append(ph.name)
        first_op = next(n for n in bw.graph.nodes if n.op != "placeholder")
        for ph, value in reads:
            with bw.graph.inserting_before(first_op):
                read = bw.graph.call_function(aten._local_scalar_dense.default, (ph,))
            read.meta["val"] = value
        for sym in tensors:  # a read left without a use in the forward
            if sym not in producers:
                continue
            node = producers[sym][0]
            if not node.users and not any(
                    n is not node and sym in _symbols_of((n.args, n.kwargs)) for n in fw.graph.nodes):
                fw.graph.erase_node(node)
        fw.recompile()
        bw.recompile()
    return dataclasses.replace(part, forward=bind_sizes(fw), backward=bind_sizes(bw),
                               saved=tuple(saved))


__all__ = ["bind_sizes", "call_node", "has_unbacked", "symint_args", "expr_of", "hint", "is_symbolic_tensor", "needed_symbols", "pass_sizes", "shape_env_of",
           "read_unbacked_producers", "symbol_sources", "unbacked_sources"]
