"""Opcode handlers every supported CPython version shares.

One method per opcode, named like it. ``self`` is an
``InstructionTranslatorBase``; the handlers whose meaning differs between
versions are in ``instructions_3xx`` and take precedence over these.
"""

from __future__ import annotations

import dis
import importlib
import importlib.util
import operator
from collections.abc import Callable
from typing import Any

from .bytecode_transform import arg
from .errors import Unsupported, UserRaised
from .translator_core import TranslatorCore
from .variables.base import NotConstant, VariableTracker
from .variables.builtins import BuiltinVariable
from .variables.constant import ConstantVariable
from .variables.dicts import DictVariable, dict_key
from .variables.functions import CellVariable, NestedFunctionVariable
from .variables.known_scalars import index_values
from .variables.lazy import LazyVariable
from .variables.lists import BaseListVariable, ListVariable, TupleVariable
from .variables.misc import NullVariable
from .variables.ndarray import NumpyNdarrayVariable
from .variables.objects import MISSING, ExceptionVariable, NewObjectVariable, ObjectVariable
from .variables.sets import SetVariable
from .variables.sym import make_slice
from .variables.tensor import TensorVariable
from .variables.torch import AutocastVariable, ContextMethodVariable, GradModeVariable

Inst = dis.Instruction

BINARY_OPS: list[Callable[[Any, Any], Any]] = [
    operator.add, operator.and_, operator.floordiv, operator.lshift, operator.matmul,
    operator.mul, operator.mod, operator.or_, operator.pow, operator.rshift,
    operator.sub, operator.truediv, operator.xor,
]
INPLACE_OPS: list[Callable[[Any, Any], Any]] = [
    operator.iadd, operator.iand, operator.ifloordiv, operator.ilshift, operator.imatmul,
    operator.imul, operator.imod, operator.ior, operator.ipow, operator.irshift,
    operator.isub, operator.itruediv, operator.ixor,
]
COMPARE_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq,
    "!=": operator.ne, ">": operator.gt, ">=": operator.ge,
}


class CommonInstructions(TranslatorCore):
    # --- no-ops -------------------------------------------------------------------
    def NOP(self, inst: Inst) -> None:
        pass

    RESUME = NOP
    CACHE = NOP
    COPY_FREE_VARS = NOP
    EXTENDED_ARG = NOP

    # --- stack ------------------------------------------------------------------------
    def POP_TOP(self, inst: Inst) -> None:
        self.pop()

    def PUSH_NULL(self, inst: Inst) -> None:
        self.push(NullVariable())

    def COPY(self, inst: Inst) -> None:
        self.push(self.stack[-arg(inst)])

    def SWAP(self, inst: Inst) -> None:
        i = arg(inst)
        self.stack[-1], self.stack[-i] = self.stack[-i], self.stack[-1]

    # --- locals, cells, constants, globals -----------------------------------------------
    def LOAD_CONST(self, inst: Inst) -> None:
        self.push(ConstantVariable(inst.argval))

    def LOAD_FAST(self, inst: Inst) -> None:
        name = inst.argval
        if name not in self.symbolic_locals:
            raise Unsupported(f"local `{name}` read before assignment (UnboundLocalError)")
        value = self.symbolic_locals[name]
        if isinstance(value, LazyVariable):
            value = value.realize(self)
            self.symbolic_locals[name] = value
        self.push(value)

    def STORE_FAST(self, inst: Inst) -> None:
        self.symbolic_locals[inst.argval] = self.pop()

    def DELETE_FAST(self, inst: Inst) -> None:
        self.symbolic_locals.pop(inst.argval, None)

    def MAKE_CELL(self, inst: Inst) -> None:
        name = inst.argval
        if name in self.cells:
            return
        value = self.symbolic_locals.pop(name, None)
        if isinstance(value, LazyVariable):
            value = value.realize(self)
        self.cells[name] = CellVariable(value=value, name=name, owner=self.code)

    def LOAD_CLOSURE(self, inst: Inst) -> None:
        self.push(self.cells[inst.argval])

    def LOAD_DEREF(self, inst: Inst) -> None:
        self.push(self.cells[inst.argval].get(self))

    def STORE_DEREF(self, inst: Inst) -> None:
        self.cells[inst.argval].set(self, self.pop())

    def LOAD_GLOBAL(self, inst: Inst) -> None:
        if self.global_pushes_null(inst):
            self.push(NullVariable())
        self.push(self.load_global(inst.argval))

    def STORE_GLOBAL(self, inst: Inst) -> None:
        value = self.pop()
        if self.f_globals is not self.root_tx().f_globals:
            raise Unsupported(f"writing global `{inst.argval}` of another module")
        self.output.side_effects.store_global(inst.argval, value)

    def IMPORT_NAME(self, inst: Inst) -> None:
        fromlist = self.pop().as_python_constant()
        level = self.pop().as_python_constant()
        name = inst.argval
        if level != 0:
            # `from . import X` (diffusers' PEFT decorator on forward): resolved against the
            # frame's package, as the import statement would
            package = self.f_globals.get("__package__") or (
                self.f_globals.get("__name__") if "__path__" in self.f_globals
                else str(self.f_globals.get("__name__", "")).rpartition(".")[0]
            )
            if not package:
                raise Unsupported("relative import in a module without a package")
            name = importlib.util.resolve_name("." * level + name, package)
        module = importlib.import_module(name)
        for sub in fromlist or ():
            if sub != "*" and not hasattr(module, sub):
                importlib.import_module(f"{name}.{sub}")  # `from pkg import submodule`
        if not fromlist:
            module = importlib.import_module(name.split(".")[0])
        self.push(self.wrap(module, None))

    def IMPORT_FROM(self, inst: Inst) -> None:
        self.push(self.stack[-1].var_getattr(self, inst.argval))

    # --- attributes and items ----------------------------------------------------------------
    def STORE_ATTR(self, inst: Inst) -> None:
        obj = self.pop()
        value = self.pop()
        self.store_attr(obj, inst.argval, value)

    def DELETE_ATTR(self, inst: Inst) -> None:
        obj = self.pop()
        if not isinstance(obj, NewObjectVariable):
            raise Unsupported(f"`del` of attribute `{inst.argval}` of {obj.describe()}")
        obj.del_attr(self, inst.argval)

    def BINARY_SUBSCR(self, inst: Inst) -> None:
        key = self.pop()
        obj = self.pop()
        self.push(self.getitem(obj, key))

    def STORE_SUBSCR(self, inst: Inst) -> None:
        key = self.pop()
        obj = self.pop()
        value = self.pop()
        self.setitem(obj, key, value)

    def setitem(self, obj: VariableTracker, key: VariableTracker, value: VariableTracker) -> None:
        if isinstance(obj, TensorVariable):
            self.output.create_op("call_function", operator.setitem, [obj, key, value], {})
        elif isinstance(obj, (ListVariable, DictVariable, NumpyNdarrayVariable)):
            obj.call_method(self, "__setitem__", [key, value], {})
        elif isinstance(obj, ObjectVariable):
            if obj.call_dunder(self, "__setitem__", [key, value]) is MISSING:
                raise Unsupported(f"{obj.describe()} does not support item assignment (TypeError)")
        else:
            raise Unsupported(f"item assignment on {obj.describe()}")

    def DELETE_SUBSCR(self, inst: Inst) -> None:
        key = self.pop()
        obj = self.pop()
        if isinstance(obj, DictVariable):
            obj.call_method(self, "__delitem__", [key], {})
        elif isinstance(obj, ListVariable):
            obj.delitem(self, key)
        elif isinstance(obj, ObjectVariable) and obj.call_dunder(self, "__delitem__", [key]) is not MISSING:
            pass
        else:
            raise Unsupported(f"`del` of an item of {obj.describe()}")

    # --- building ------------------------------------------------------------------------------
    def BUILD_TUPLE(self, inst: Inst) -> None:
        self.push(TupleVariable(self.popn(arg(inst))))

    def BUILD_LIST(self, inst: Inst) -> None:
        self.push(ListVariable(self.popn(arg(inst))))

    def BUILD_SET(self, inst: Inst) -> None:
        self.push(SetVariable.of(self, self.popn(arg(inst))))

    def BUILD_MAP(self, inst: Inst) -> None:
        flat = self.popn(2 * arg(inst))
        self.push(DictVariable({dict_key(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}))

    def BUILD_CONST_KEY_MAP(self, inst: Inst) -> None:
        keys = self.pop().as_python_constant()
        values = self.popn(arg(inst))
        self.push(DictVariable(dict(zip(keys, values, strict=True))))

    def BUILD_SLICE(self, inst: Inst) -> None:
        self.push(make_slice(index_values(self, self.popn(arg(inst)))))

    def BUILD_STRING(self, inst: Inst) -> None:
        parts = self.popn(arg(inst))
        self.push(ConstantVariable("".join(p.as_python_constant() for p in parts)))

    def FORMAT_VALUE(self, inst: Inst) -> None:
        flags = arg(inst) or 0
        spec = self.pop().as_python_constant() if flags & 0x04 else ""
        v = self.value_to_format(self.pop())
        conv = flags & 0x03
        if conv == 1:
            v = str(v)
        elif conv == 2:
            v = repr(v)
        elif conv == 3:
            v = ascii(v)
        self.push(ConstantVariable(format(v, spec)))

    def value_to_format(self, value: VariableTracker) -> Any:
        """The Python value an f-string formats (3.13 splits ``FORMAT_VALUE``)."""
        try:
            return value.as_python_constant()  # a symbolic size is specialized to its value
        except NotConstant as e:
            raise Unsupported(f"formatting {value.describe()} into a string") from e

    def LIST_APPEND(self, inst: Inst) -> None:
        v = self.pop()
        target = self.stack[-arg(inst)]
        assert isinstance(target, ListVariable)
        target.write(self, (*target.items, v))

    def LIST_EXTEND(self, inst: Inst) -> None:
        v = self.pop()
        target = self.stack[-arg(inst)]
        assert isinstance(target, ListVariable)
        target.write(self, (*target.items, *v.unpack(self)))

    def SET_ADD(self, inst: Inst) -> None:
        v = self.pop()
        self.stack[-arg(inst)].call_method(self, "add", [v], {})

    def SET_UPDATE(self, inst: Inst) -> None:
        v = self.pop()
        self.stack[-arg(inst)].call_method(self, "update", [v], {})

    def LIST_TO_TUPLE(self, inst: Inst) -> None:
        lst = self.pop()
        assert isinstance(lst, BaseListVariable)
        self.push(TupleVariable(lst.items))

    def MAP_ADD(self, inst: Inst) -> None:
        value = self.pop()
        key = self.pop()
        target = self.stack[-arg(inst)]
        assert isinstance(target, DictVariable)
        target.set_item(self, dict_key(key), value)

    def DICT_UPDATE(self, inst: Inst) -> None:
        other = self.pop()
        target = self.stack[-arg(inst)]
        assert isinstance(target, DictVariable)
        if not isinstance(other, DictVariable):
            raise Unsupported(f"`**` unpacking of {other.describe()}")
        other.realize_all(self)
        target.write(self, {**target.items, **other.items})

    DICT_MERGE = DICT_UPDATE

    def UNPACK_SEQUENCE(self, inst: Inst) -> None:
        seq = self.pop()
        items = seq.unpack(self)
        if len(items) != arg(inst):
            raise Unsupported(f"unpacking {len(items)} values into {arg(inst)} names (ValueError)")
        for item in reversed(items):
            self.push(item)

    def UNPACK_EX(self, inst: Inst) -> None:
        before, after = arg(inst) & 0xFF, arg(inst) >> 8
        items = self.pop().unpack(self)
        if len(items) < before + after:
            raise Unsupported("not enough values to unpack (ValueError)")
        middle = ListVariable(items[before : len(items) - after])
        out = [*items[:before], middle, *items[len(items) - after :]]
        for item in reversed(out):
            self.push(item)

    # --- operators ------------------------------------------------------------------------------
    def BINARY_OP(self, inst: Inst) -> None:
        b = self.pop()
        a = self.pop()
        n = arg(inst)
        fn = BINARY_OPS[n] if n < len(BINARY_OPS) else INPLACE_OPS[n - len(BINARY_OPS)]
        self.push(self.binary(fn, a, b))

    def COMPARE_OP(self, inst: Inst) -> None:
        b = self.pop()
        a = self.pop()
        self.push(self.binary(COMPARE_OPS[inst.argval], a, b))

    def IS_OP(self, inst: Inst) -> None:
        b = self.pop()
        a = self.pop()
        self.push(self.is_op(a, b, bool(arg(inst))))

    def CONTAINS_OP(self, inst: Inst) -> None:
        container = self.pop()
        item = self.pop()
        result = self.contains(container, item)
        if arg(inst):
            result = BuiltinVariable(operator.not_).call_function(self, [result], {})
        self.push(result)

    def _unary(self, fn: Callable[[Any], Any]) -> None:
        self.push(BuiltinVariable(fn).call_function(self, [self.pop()], {}))

    def UNARY_NEGATIVE(self, inst: Inst) -> None:
        self._unary(operator.neg)

    def UNARY_POSITIVE(self, inst: Inst) -> None:
        self._unary(operator.pos)

    def UNARY_INVERT(self, inst: Inst) -> None:
        self._unary(operator.invert)

    def UNARY_NOT(self, inst: Inst) -> None:
        v = self.pop()
        self.push(ConstantVariable(not v.truth(self)))

    # --- iteration and jumps -----------------------------------------------------------------------
    def GET_ITER(self, inst: Inst) -> None:
        self.push(self.get_iter(self.pop()))

    def JUMP_FORWARD(self, inst: Inst) -> None:
        self.jump_to(inst.argval)

    JUMP_BACKWARD = JUMP_FORWARD
    JUMP_BACKWARD_NO_INTERRUPT = JUMP_FORWARD
    JUMP = JUMP_FORWARD

    def branch(self, inst: Inst, jump_if: bool, pop: bool = True) -> None:
        value = self.stack[-1]
        taken = value.truth(self) == jump_if
        if pop or not taken:
            self.pop()
        if taken:
            self.jump_to(inst.argval)

    def branch_none(self, inst: Inst, jump_if_none: bool) -> None:
        value = self.pop()
        is_none = self.is_op(value, ConstantVariable(None), False).as_python_constant()
        if is_none == jump_if_none:
            self.jump_to(inst.argval)

    # --- functions ----------------------------------------------------------------------------------
    def MAKE_FUNCTION(self, inst: Inst) -> None:
        """3.11 and 3.12: the attributes the flags name sit below the code object
        (3.13 sets them with ``SET_FUNCTION_ATTRIBUTE``)."""
        flags = arg(inst) or 0
        code_var = self.pop()
        attrs = {flag: self.pop() for flag in (0x08, 0x04, 0x02, 0x01) if flags & flag}
        self.push(self.make_nested_function(code_var, attrs))

    def make_nested_function(
        self, code_var: VariableTracker, attrs: dict[int, VariableTracker]
    ) -> NestedFunctionVariable:
        """A function of ``code_var``; ``attrs`` by ``MAKE_FUNCTION`` flag: 0x01
        defaults, 0x02 keyword-only defaults, 0x04 annotations (dropped), 0x08
        the closure."""
        code = code_var.as_python_constant()
        qualname = code.co_qualname if hasattr(code, "co_qualname") else code.co_name
        closure = attrs.get(0x08)
        kwdefaults = attrs.get(0x02)
        defaults = attrs.get(0x01)
        cells: list[CellVariable] = []
        if closure is not None:
            assert isinstance(closure, TupleVariable)
            cells = [c for c in closure.items if isinstance(c, CellVariable)]
        return NestedFunctionVariable(
            code,
            self.f_globals,
            qualname,
            tuple(defaults.unpack(self)) if defaults is not None else (),
            dict(kwdefaults.items) if isinstance(kwdefaults, DictVariable) else {},
            cells,
        )

    def call_n(self, nargs: int) -> None:
        """CALL with ``[NULL|callable, callable|self, *args]`` (3.11 and 3.12)
        or ``[callable, self|NULL, *args]`` (3.13)."""
        kw_names = self.kw_names
        self.kw_names = ()
        args = self.popn(nargs)
        second = self.pop()
        first = self.pop()
        if isinstance(first, NullVariable):
            fn = second
        elif isinstance(second, NullVariable):
            fn = first
        else:
            fn = first
            args = [second, *args]
        kwargs: dict[str, VariableTracker] = {}
        if kw_names:
            n = len(kw_names)
            kwargs = dict(zip(kw_names, args[-n:], strict=True))
            args = args[:-n]
        self.push(self.call(fn, args, kwargs))

    def CALL_FUNCTION_EX(self, inst: Inst) -> None:
        kwargs_var = self.pop() if arg(inst) & 1 else None
        args_var = self.pop()
        if isinstance(self.stack[-1], NullVariable):  # 3.13: [callable, NULL, args]
            self.pop()
            fn = self.pop()
        else:  # 3.11, 3.12: [NULL, callable, args]
            fn = self.pop()
            if self.stack and isinstance(self.stack[-1], NullVariable):
                self.pop()
        args = args_var.unpack(self)
        kwargs: dict[str, VariableTracker] = {}
        if kwargs_var is not None:
            if not isinstance(kwargs_var, DictVariable):
                raise Unsupported(f"`**` call argument {kwargs_var.describe()}")
            kwargs_var.realize_all(self)
            kwargs = {str(k): v for k, v in kwargs_var.items.items()}
        self.push(self.call(fn, args, kwargs))

    def KW_NAMES(self, inst: Inst) -> None:
        self.kw_names = tuple(self.code.co_consts[arg(inst)])

    # --- with blocks -----------------------------------------------------------------------------------
    def BEFORE_WITH(self, inst: Inst) -> None:
        ctx = self.pop()
        if not isinstance(ctx, (GradModeVariable, AutocastVariable)):
            raise Unsupported(
                f"`with` on {ctx.describe()} (only grad-mode and autocast contexts are traced)"
            )
        self.push(ContextMethodVariable(ctx, "__exit__"))
        self.push(ContextMethodVariable(ctx, "__enter__").call_function(self, [], {}))

    # --- errors ------------------------------------------------------------------------------------------
    def LOAD_ASSERTION_ERROR(self, inst: Inst) -> None:
        self.push(ConstantVariable(AssertionError))

    def RAISE_VARARGS(self, inst: Inst) -> None:
        args = self.popn(arg(inst))
        what = args[0].describe() if args else "re-raise"
        if args and args[0].is_python_constant() and args[0].as_python_constant() is AssertionError:
            raise UserRaised(AssertionError, "assertion failed while tracing (AssertionError)")
        if args and isinstance(args[0], ExceptionVariable):
            raise UserRaised(
                args[0].cls, f"`raise {args[0].message()}` inside a compiled region", args[0]
            )
        exc = args[0].as_python_constant() if args and args[0].is_python_constant() else None
        if isinstance(exc, type) and issubclass(exc, BaseException):
            raise UserRaised(exc, f"`raise {exc.__name__}` inside a compiled region")
        raise Unsupported(f"`raise` of {what} inside a compiled region")

    # --- exception handlers (for exceptions the traced code raises itself) ---------------
    def PUSH_EXC_INFO(self, inst: Inst) -> None:
        exc = self.pop()
        self.push(self.exc_infos[-1] if self.exc_infos else ConstantVariable(None))
        self.push(exc)
        self.exc_infos.append(exc)

    def POP_EXCEPT(self, inst: Inst) -> None:
        self.pop()
        self.exc_infos.pop()

    def CHECK_EXC_MATCH(self, inst: Inst) -> None:
        want = self.pop().as_python_constant()
        exc = self.stack[-1]
        try:
            self.push(ConstantVariable(issubclass(exc.python_type(), want)))
        except TypeError as e:
            raise Unsupported(f"`except` with {want!r} (TypeError)") from e

    def RERAISE(self, inst: Inst) -> None:
        exc = self.pop()
        if arg(inst):
            self.pop()  # the saved instruction offset
        if not isinstance(exc, ExceptionVariable):
            raise Unsupported(f"re-raising {exc.describe()} inside a compiled region")
        raise UserRaised(exc.cls, f"`raise {exc.message()}` inside a compiled region", exc)

    def catch(self, inst: Inst, error: UserRaised) -> bool:
        """Go to the handler of the ``try`` block ``inst`` is in, as CPython
        does for an exception the traced code raised; False if there is none."""
        entry = self.exception_entry(inst.offset)
        if entry is None:
            return False
        start, end, target, depth, lasti = entry
        exc = error.exception
        if exc is None:
            key = getattr(error, "key", None)
            exc = ExceptionVariable(error.exc_type, [] if key is None else [ConstantVariable(key)])
        del self.stack[depth:]
        if lasti:
            self.push(ConstantVariable(inst.offset))
        self.push(exc)
        self.jump_to(target)
        return True

    def LOAD_BUILD_CLASS(self, inst: Inst) -> None:
        raise Unsupported("class definition inside a compiled region")
