"""The native graph runner (ADR 0068): a C++ graph's wrapper run without the interpreter.

The generated Python wrapper (``codegen/wrapper.py``) stays what ember.inductor writes,
logs (``EMBER_LOGS=output_code``), caches and profiles. For the C++ backend its
statements are few and regular (allocate, take a pointer, call a kernel, view, call an
ATen op, check a result's strides, free, return), and this module translates them,
statement by statement, into the instructions of ``native_runner.cpp``: a program
that does the same without Python bytecode, ctypes or the Python argument parsing of
each ATen call (the GIL released while it runs). The translation is bound to one
compiled graph's kernels (their addresses) and constants.

A wrapper with a statement the translator does not know runs as Python (the
reference); so does every call while the runner module is being built (once per
torch build, in a thread, cached on disk) or where it cannot be
(``EMBER_NATIVE_RUNNER=0`` turns it off; ``=wait`` waits for the build, for tests and
benchmarks). ``EMBER_NATIVE_RUNNER=strict`` makes an untranslatable wrapper an error,
to find the statements the translator misses.
"""

from __future__ import annotations

import ast
import ctypes
import functools
import logging
import os
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ember.ir.native_build import BackgroundBuild, load_extension, torch_flags

log = logging.getLogger("ember.inductor.native_runner")

_SOURCE = Path(__file__).with_name("native_runner.cpp")

# instruction and operand codes (native_runner.cpp)
ARGS, CONST, ALLOC, PTR, KERNEL, STRIDED, VIEW, CONST_VIEW, EXTERN = range(9)
RESTRIDE_IF, RESTRIDE, MOVE, DEL, PYCALL, INPUT, SIZE, STRIDE, INT, RETURN = range(9, 19)
K_IVALUE, K_SLOT, K_INT, K_TENSORS, K_OPT_TENSORS, K_INTS, K_PY, K_TUPLE = range(8)
E_CONST, E_SLOT = 0, 1
_BINOPS: dict[type, int] = {ast.Add: 2, ast.Sub: 3, ast.Mult: 4, ast.FloorDiv: 5, ast.Mod: 6}
E_NEG = 7
MAX_KERNEL_ARGS = 128

_TENSOR_TYPES = {"Tensor", "Optional[Tensor]"}
_INT_TYPES = {"int", "Optional[int]", "number", "Optional[number]"}
_INT_LIST_TYPES = {"List[int]", "Optional[List[int]]"}


class Untranslatable(Exception):
    """A wrapper statement the native runner has no instruction for."""


# -- the runner module ---------------------------------------------------------------------

def _build() -> Any:
    return load_extension(_SOURCE.read_text(), "runner", "ember_inductor_runner", flags=torch_flags(), cxx=True)


_runner: BackgroundBuild[Any] = BackgroundBuild("ember-native-runner", _build)


def mode() -> str:
    """``EMBER_NATIVE_RUNNER``: ``1`` (default), ``0``, ``wait`` or ``strict``."""
    return os.environ.get("EMBER_NATIVE_RUNNER", "1")


def runner_module(wait: bool = False) -> Any | None:
    """The built runner module; None while it is being built (in a thread) or where it
    cannot be (see ``runner_error``)."""
    return _runner.get(wait)


def building() -> bool:
    """Whether the runner module is being built now (graphs run as Python meanwhile)."""
    return _runner.building() and mode() != "0"


def is_program(call: Any) -> bool:
    """Whether ``call`` is a native program (not a Python wrapper)."""
    module = _runner.value
    return module is not None and isinstance(call, module.Program)


def runner_error() -> str | None:
    """Why the runner module is not available (None when it is or is being built)."""
    return _runner.error


# -- translation ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _parsed(source: str) -> ast.FunctionDef:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            return node
    raise Untranslatable("the wrapper has no call(args)")


_MISSING = object()


class _SlotRef(ast.expr):
    """A hoisted view inside a list argument."""

    def __init__(self, slot: int) -> None:
        super().__init__()
        self.slot = slot


class _Translator:
    """One wrapper's statements as native instructions, bound to a namespace (``wrapper_runtime.namespace``)."""

    def __init__(self, ns: Mapping[str, Any], consts: Sequence[Any]) -> None:
        self.ns = ns
        self.consts = consts
        self.slots: dict[str, int] = {}
        self.n_slots = 0
        self.code: list[tuple[Any, ...]] = []
        self.constants: list[torch.Tensor] = []
        self.n_views = 0
        self.written_from = -1
        self.have_args = False

    # slots and expressions
    def new_slot(self, name: str) -> int:
        slot = self.slots.get(name)
        if slot is None:
            slot = self.slots[name] = self.n_slots
            self.n_slots += 1
        return slot

    def temp(self) -> int:
        self.n_slots += 1
        return self.n_slots - 1

    def known(self, node: ast.expr) -> int:
        if not isinstance(node, ast.Name) or node.id not in self.slots:
            raise Untranslatable(f"not a local: {ast.unparse(node)}")
        return self.slots[node.id]

    def expr(self, node: ast.expr) -> list[int]:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return [E_CONST, node.value]
        if isinstance(node, ast.Name):
            return [E_SLOT, self.known(node)]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return [*self.expr(node.left), *self.expr(node.right), _BINOPS[type(node.op)]]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return [*self.expr(node.operand), E_NEG]
        raise Untranslatable(f"not an int expression: {ast.unparse(node)}")

    def exprs(self, node: ast.expr) -> list[list[int]]:
        if not isinstance(node, (ast.Tuple, ast.List)):
            raise Untranslatable(f"not a tuple of sizes: {ast.unparse(node)}")
        return [self.expr(e) for e in node.elts]

    def const_index(self, node: ast.expr) -> int | None:
        """``i`` of ``_c[i]``."""
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                and node.value.id == "_c" and isinstance(node.slice, ast.Constant)
                and type(node.slice.value) is int):
            return node.slice.value
        return None

    def value(self, node: ast.expr) -> Any:
        """A Python value written as a literal (or ``_c[i]``); Untranslatable for anything
        that reads a local."""
        if isinstance(node, _SlotRef):
            raise Untranslatable("a view is not a constant")
        i = self.const_index(node)
        if i is not None:
            return self.consts[i]
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self.value(node.operand)
            if isinstance(v, (int, float)):
                return -v
        if isinstance(node, (ast.Tuple, ast.List)):
            return [self.value(e) for e in node.elts]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
            return getattr(torch, node.attr)
        raise Untranslatable(f"not a constant: {ast.unparse(node)}")

    # statements
    def body(self, stmts: list[ast.stmt]) -> None:
        for s in stmts:
            self.stmt(s)

    def stmt(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Assign) and len(s.targets) == 1:
            self.assign(s.targets[0], s.value)
        elif isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
            self.call_stmt(s.value)
        elif isinstance(s, ast.Delete):
            for t in s.targets:
                self.code.append((DEL, self.known(t)))
        elif isinstance(s, ast.If):
            self.restride_if(s)
        elif isinstance(s, ast.Try):
            self.try_stmt(s)
        elif isinstance(s, ast.Return) and isinstance(s.value, ast.List):
            self.code.append((RETURN, [self.result_operand(e) for e in s.value.elts]))
        else:
            raise Untranslatable(f"statement {ast.unparse(s)[:80]}")

    def assign(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Tuple):
            if not (isinstance(value, ast.Name) and value.id == "args") or self.have_args:
                raise Untranslatable(f"unpacking {ast.unparse(value)}")
            names = [e.id for e in target.elts if isinstance(e, ast.Name)]
            if len(names) != len(target.elts):
                raise Untranslatable("unpacking into something other than names")
            self.code.append((ARGS, [self.new_slot(n) for n in names]))
            self.have_args = True
            return
        if not isinstance(target, ast.Name):
            raise Untranslatable(f"assignment to {ast.unparse(target)}")
        name = target.id
        if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id == "_constants":
            key = self.value(value.slice)
            self.constants.append(self.ns["_constants"][key])
            self.code.append((CONST, self.new_slot(name), len(self.constants) - 1))
        elif isinstance(value, ast.Name):
            src = self.known(value)
            self.code.append((MOVE, self.new_slot(name), src))
        elif isinstance(value, ast.Call):
            self.assign_call(name, value)
        else:
            expr = self.expr(value)
            self.code.append((INT, self.new_slot(name), expr))

    def assign_call(self, name: str, call: ast.Call) -> None:
        fn = call.func
        if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and not call.keywords:
            src = self.known(fn.value)
            if fn.attr == "data_ptr" and not call.args:
                self.code.append((PTR, self.new_slot(name), src))
                return
            if fn.attr in ("size", "stride") and len(call.args) == 1:
                dim = self.value(call.args[0])
                if type(dim) is int:
                    self.code.append((SIZE if fn.attr == "size" else STRIDE, self.new_slot(name), src, dim))
                    return
            raise Untranslatable(f"method call {ast.unparse(call)[:80]}")
        if self.const_index(fn) is not None:
            self.extern(name, call)
            return
        if not isinstance(fn, ast.Name):
            raise Untranslatable(f"call of {ast.unparse(fn)}")
        if fn.id == "_input":
            self.input_check(name, call)
            return
        if fn.id == "_restride":
            self.restride(name, call)
            return
        if self.view_call(call, self.new_slot(name)) is None:
            raise Untranslatable(f"call of {fn.id}")

    def view_call(self, call: ast.Call, dst: int | None = None) -> int | None:
        """``empty_strided``/``_as_strided``/``_view``/``_const_view`` into slot ``dst`` (a
        new temporary one by default): its index; None for other calls."""
        fn = call.func
        if not isinstance(fn, ast.Name):
            return None
        a = call.args
        if fn.id == "empty_strided" and self.ns.get("empty_strided") is torch.empty_strided:
            kw = {k.arg: k.value for k in call.keywords}
            if len(a) != 2 or set(kw) != {"dtype"}:
                raise Untranslatable(f"allocation {ast.unparse(call)[:80]}")
            dtype = self.value(kw["dtype"])
            if not isinstance(dtype, torch.dtype):
                raise Untranslatable(f"allocation of dtype {dtype!r}")
            dst = self.temp() if dst is None else dst
            self.code.append((ALLOC, dst, self.exprs(a[0]), self.exprs(a[1]), dtype))
            return dst
        if call.keywords:
            return None
        if fn.id == "_as_strided" and len(a) in (3, 4):
            src = self.known(a[0])
            off = self.expr(a[3]) if len(a) == 4 else None
            dst = self.temp() if dst is None else dst
            self.code.append((STRIDED, dst, src, self.exprs(a[1]), self.exprs(a[2]), off))
            return dst
        if fn.id == "_view" and len(a) == 4:
            src = self.known(a[0])
            dst = self.temp() if dst is None else dst
            self.code.append((VIEW, dst, src, self.exprs(a[1]), self.exprs(a[2]), self.expr(a[3])))
            return dst
        if fn.id == "_const_view" and len(a) == 6 and isinstance(a[0], ast.Name) and a[0].id == "_vc":
            key = self.value(a[1])
            if type(key) is not int or key < 0:
                raise Untranslatable("a constant view's key")
            self.n_views = max(self.n_views, key)
            src = self.known(a[2])
            dst = self.temp() if dst is None else dst
            self.code.append((CONST_VIEW, dst, src, self.exprs(a[3]), self.exprs(a[4]), self.expr(a[5]), key))
            return dst
        return None

    def call_stmt(self, call: ast.Call) -> None:
        fn = call.func
        if (isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id == "args"
                and fn.attr == "clear" and not call.args):
            if not self.have_args:
                raise Untranslatable("args.clear() before the inputs are unpacked")
            return  # the ARGS instruction empties the list
        if not isinstance(fn, ast.Name) or call.keywords:
            raise Untranslatable(f"call {ast.unparse(call)[:80]}")
        kernel = self.ns.get(fn.id)
        args = [self.expr(a) for a in call.args]
        address, take, message = _kernel_address(kernel)
        if address is None or len(args) > MAX_KERNEL_ARGS:
            if not callable(kernel):
                raise Untranslatable(f"call of {fn.id}")
            self.code.append((PYCALL, -1, kernel, [(K_INT, e) for e in args]))
            return
        from .errors import KernelIndexError

        self.code.append((KERNEL, address, args, take, KernelIndexError, message))

    def restride_if(self, s: ast.If) -> None:
        """``if x is None or x.stride() != (...): x = _restride(x, sizes, strides)``."""
        t = s.test
        ok = (isinstance(t, ast.BoolOp) and isinstance(t.op, ast.Or) and len(t.values) == 2
              and not s.orelse and len(s.body) == 1 and isinstance(s.body[0], ast.Assign))
        if ok:
            assign = s.body[0]
            assert isinstance(assign, ast.Assign)
            call = assign.value
            target = assign.targets[0]
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "_restride"
                    and isinstance(target, ast.Name) and len(call.args) == 3
                    and isinstance(call.args[0], ast.Name) and call.args[0].id == target.id):
                slot = self.known(target)
                self.code.append((RESTRIDE_IF, slot, slot, [], self.exprs(call.args[1]),
                                  self.exprs(call.args[2]), self.ns["_restride"]))
                return
        raise Untranslatable(f"if statement {ast.unparse(s)[:80]}")

    def restride(self, name: str, call: ast.Call) -> None:
        if len(call.args) != 3 or call.keywords:
            raise Untranslatable("_restride's arguments")
        node = call.args[0]
        path: list[int] = []
        while isinstance(node, ast.Subscript):
            index = self.value(node.slice)
            if type(index) is not int:
                raise Untranslatable("a result's index")
            path.insert(0, index)
            node = node.value
        src = self.known(node)
        self.code.append((RESTRIDE, self.new_slot(name), src, path, self.exprs(call.args[1]),
                          self.exprs(call.args[2]), self.ns["_restride"]))

    def input_check(self, name: str, call: ast.Call) -> None:
        a = call.args
        if len(a) != 5 or call.keywords or not (isinstance(a[1], ast.Name) and a[1].id == name):
            raise Untranslatable("_input's arguments")
        dtype = self.value(a[4])
        if not isinstance(dtype, torch.dtype):
            raise Untranslatable("_input's dtype")
        slot = self.known(a[1])
        sizes, strides = self.exprs(a[2]), self.exprs(a[3])
        operands = [(K_PY, self.value(a[0])), (K_SLOT, slot), (K_TUPLE, sizes), (K_TUPLE, strides), (K_PY, dtype)]
        self.code.append((INPUT, slot, sizes, strides, dtype, self.ns["_input"], operands))

    def try_stmt(self, s: ast.Try) -> None:
        """The ``try: ... except Exception as _e: _inputs_written(_e); raise`` around the
        statements from the first kernel that may write an input."""
        if len(s.handlers) != 1 or s.orelse or s.finalbody or self.written_from >= 0:
            raise Untranslatable("try statement")
        h = s.handlers[0]
        if not (len(h.body) == 2 and isinstance(h.body[1], ast.Raise)
                and "_inputs_written" in ast.unparse(h.body[0])):
            raise Untranslatable("exception handler")
        self.written_from = len(self.code)
        self.body(s.body)

    # operands
    def hoisted(self, node: ast.expr) -> int | None:
        """A view call inside an argument list, made into a temporary slot first."""
        if isinstance(node, ast.Call):
            slot = self.view_call(node)
            if slot is None:
                raise Untranslatable(f"call in an argument: {ast.unparse(node)[:80]}")
            return slot
        return None

    def result_operand(self, node: ast.expr) -> tuple[Any, ...]:
        slot = self.hoisted(node)
        if slot is not None:
            return (K_SLOT, slot)
        if isinstance(node, ast.Name):
            return (K_SLOT, self.known(node))
        i = self.const_index(node)
        if i is not None:
            return (K_PY, self.ns["_c"][i])
        if isinstance(node, ast.Constant) and (node.value is None or type(node.value) in (int, float, bool)):
            return (K_PY, node.value)
        return (K_INT, self.expr(node))

    def extern(self, name: str, call: ast.Call) -> None:
        i = self.const_index(call.func)
        assert i is not None
        op = self.consts[i]
        temps: list[int] = []

        def arg_node(node: ast.expr) -> ast.expr | int:
            slot = self.hoisted(node)
            if slot is not None:
                temps.append(slot)
                return slot
            if isinstance(node, (ast.List, ast.Tuple)) and any(isinstance(e, ast.Call) for e in node.elts):
                items: list[Any] = []
                for e in node.elts:
                    s = self.hoisted(e)
                    if s is not None:
                        temps.append(s)
                    items.append(e if s is None else s)
                return ast.List(elts=[_SlotRef(x) if isinstance(x, int) else x for x in items], ctx=ast.Load())
            return node

        args = [arg_node(a) for a in call.args]
        kwargs = {k.arg: arg_node(k.value) for k in call.keywords}
        if any(k is None for k in kwargs):
            raise Untranslatable("**kwargs in an extern call")
        dst = self.new_slot(name)
        operands = None
        if isinstance(op, torch._ops.OpOverload):
            try:
                operands = self.schema_operands(op, args, kwargs)  # type: ignore[arg-type]
            except Untranslatable as why:
                log.debug("native runner: %s through Python (%s)", op, why)
        if operands is not None:
            schema = op._schema
            self.code.append((EXTERN, dst, schema.name, schema.overload_name, operands))
        else:
            if kwargs:
                raise Untranslatable(f"keyword arguments of a Python call ({op})")
            self.code.append((PYCALL, dst, self.ns["_c"][i], [self.py_operand(a) for a in args]))
        for t in temps:
            self.code.append((DEL, t))

    def py_operand(self, node: ast.expr | int) -> tuple[Any, ...]:
        if isinstance(node, int):
            return (K_SLOT, node)
        if isinstance(node, ast.Name):
            return (K_SLOT, self.known(node))
        try:
            return (K_PY, self.value(node))
        except Untranslatable:
            return (K_INT, self.expr(node))

    def schema_operands(self, op: Any, args: list[Any], kwargs: dict[str, Any]) -> list[tuple[Any, ...]]:
        schema = op._schema
        params = schema.arguments
        if len(args) > len(params):
            raise Untranslatable("too many arguments")
        given: dict[int, Any] = dict(enumerate(args))
        for key, node in kwargs.items():
            pos = next((j for j, p in enumerate(params) if p.name == key), None)
            if pos is None or pos in given:
                raise Untranslatable(f"keyword {key}")
            given[pos] = node
        out: list[tuple[Any, ...]] = []
        for pos, p in enumerate(params):
            if pos not in given:
                if not p.has_default_value():
                    raise Untranslatable(f"argument {p.name} missing")
                out.append((K_IVALUE, None, pos, 1))
                continue
            out.append(self.typed_operand(given[pos], str(p.type), pos))
        return out

    def typed_operand(self, node: Any, typ: str, pos: int) -> tuple[Any, ...]:
        if isinstance(node, int):  # a hoisted view
            if typ not in _TENSOR_TYPES:
                raise Untranslatable(f"a tensor for {typ}")
            return (K_SLOT, node)
        if isinstance(node, _SlotRef):
            raise Untranslatable("a view inside a constant")
        try:
            value = self.value(node)
        except Untranslatable:
            value = _MISSING
        if value is not _MISSING:
            return (K_IVALUE, value, pos, 0)
        if typ in _TENSOR_TYPES:
            return (K_SLOT, self.known(node))
        if typ in _INT_TYPES:
            return (K_INT, self.expr(node))
        if typ in _INT_LIST_TYPES:
            return (K_INTS, self.exprs(node))
        if typ in ("List[Tensor]", "List[Optional[Tensor]]") and isinstance(node, (ast.List, ast.Tuple)):
            items: list[int | None] = []
            for e in node.elts:
                if isinstance(e, _SlotRef):
                    items.append(e.slot)
                elif isinstance(e, ast.Constant) and e.value is None and typ != "List[Tensor]":
                    items.append(None)
                else:
                    items.append(self.known(e))
            return (K_TENSORS if typ == "List[Tensor]" else K_OPT_TENSORS, items)
        raise Untranslatable(f"an operand of type {typ}: {ast.unparse(node)[:60]}")


def _kernel_address(kernel: Any) -> tuple[int | None, int, str]:
    """(address, index-error flag's address or 0, its message) of a loaded C++ kernel."""
    fn = getattr(kernel, "native_fn", kernel)
    if not isinstance(fn, ctypes._CFuncPtr):  # type: ignore[attr-defined]
        return None, 0, ""
    address = ctypes.cast(fn, ctypes.c_void_p).value
    take = getattr(kernel, "native_take_error", None)
    take_address = ctypes.cast(take, ctypes.c_void_p).value if take is not None else 0
    return address, take_address or 0, getattr(kernel, "native_message", "")


def translate(source: str, ns: Mapping[str, Any], consts: Sequence[Any]) -> tuple[Any, ...]:
    """The arguments of the runner module's ``make`` for this wrapper and namespace;
    raises Untranslatable."""
    fn = _parsed(source)
    t = _Translator(ns, consts)
    t.body(fn.body)
    if not t.code or t.code[-1][0] != RETURN:
        raise Untranslatable("the wrapper does not end in a return")
    return (t.code, t.n_slots, t.constants, t.n_views, t.written_from, ns["_inputs_written"])


#: each program -> the Python wrapper it was translated from (the reference)
_python_of: weakref.WeakKeyDictionary[Any, Callable[[list[Any]], list[Any]]] = weakref.WeakKeyDictionary()


def python_of(program: Any) -> Callable[[list[Any]], list[Any]] | None:
    """The Python wrapper ``program`` was translated from (for benchmarks and debugging)."""
    return _python_of.get(program)


def native_call(
    source: str, ns: Mapping[str, Any], consts: Sequence[Any], wait: bool = False
) -> Callable[[list[Any]], list[Any]] | None:
    """The wrapper ``source`` (executed into ``ns``) as a native program, or None where it
    runs as Python: the runner is off, not built yet (``wait``: build it now), cannot be
    built, or the wrapper has a statement it has no instruction for."""
    how = mode()
    if how == "0":
        return None
    module = runner_module(wait=wait or how in ("wait", "strict"))
    if module is None:
        return None
    try:
        parts = translate(source, ns, consts)
    except Untranslatable as why:
        if how == "strict":
            raise
        log.debug("native runner: the wrapper runs as Python: %s", why)
        return None
    try:
        program = module.make(*parts)
    except Exception as exc:
        if how == "strict":
            raise
        log.debug("native runner: the wrapper runs as Python: %s", exc)
        return None
    _python_of[program] = ns["call"]
    return program  # type: ignore[no-any-return]


__all__ = ["Untranslatable", "building", "is_program", "mode", "native_call", "python_of", "runner_error", "runner_module", "translate"]
