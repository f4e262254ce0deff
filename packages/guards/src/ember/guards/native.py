"""A frame's guards as one C function (ADR 0051).

The generated Python check (``check_fn.py``) stays the reference: it is what runs
first, what explains a failure, and what the native check must agree with. The
native check is the same program in C: :func:`generate_c` walks the steps the Python
code generator recorded (``GuardBuilder.program``: each read, each part, in the same
order) and writes each as the C API calls the interpreter makes for the Python
expression (``native_prelude.c``): ``v.x`` is ``PyObject_GetAttr``, ``a == b`` inside
an ``and`` is ``PyObject_RichCompare`` and its truth, ``x is c`` a pointer compare.
A part without a native form (``Part.terms is None``: a ``SHAPE_EXPR`` relation, a
user ``__eq__`` never needs one since ``==`` is the same call) runs as a Python
predicate called from C, a leaf inside the native tree. Reading a value that raises
an ``Exception`` fails the check, as ``except Exception: return False`` does; any
other ``BaseException`` propagates.

The C source holds no process-specific value: classes, constants and object ids
are ``make(objs, ids, flags)``'s arguments, so the library is cached on disk keyed by
the source (``ember.ir.native_build``) and a warm start loads it without compiling.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ember.ir.native_build import BackgroundBuild, NativeBuildError, load_extension, torch_flags

if TYPE_CHECKING:
    from ember.guards.builder import GuardBuilder, Part

_PRELUDE = Path(__file__).with_name("native_prelude.c")
AREA = "guards"
PREFIX = "ember_guards"

_EPILOGUE = r"""
static PyObject *
checker_call(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "a native guard check takes (f_locals, f_globals)");
        return NULL;
    }
    int r = body((Checker *)callable, args[0], args[1]);
    if (r < 0) {
        return NULL;
    }
    return PyBool_FromLong(r);
}

static void
checker_dealloc(Checker *self)
{
    Py_XDECREF(self->objs);
    Py_XDECREF(self->flags);
    Py_XDECREF(self->dead_key);
    PyMem_Free(self->ids);
    PyMem_Free(self->cc);
    PyMem_Free(self->mc);
    PyMem_Free(self->mv);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
checker_module_reads(Checker *self, PyObject *unused)
{
    (void)unused;
    PyObject *out = PyList_New(NM);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t g = 0; g < NM; g++) {
        ModuleCache *c = &self->mc[g];
        PyObject *row = Py_BuildValue("(iII)", c->state, c->hits, c->misses);
        if (row == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, g, row);
    }
    return out;
}

static PyMethodDef checker_methods[] = {
    {"module_reads", (PyCFunction)checker_module_reads, METH_NOARGS,
     "module_reads() -> [(state, hits, misses)] per module whose reads are served while it is unchanged"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CheckerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember_guards.NativeCheck",
    .tp_basicsize = sizeof(Checker),
    .tp_dealloc = (destructor)checker_dealloc,
    .tp_vectorcall_offset = offsetof(Checker, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "check(f_locals, f_globals) -> bool: a frame's guards, compiled",
    .tp_methods = checker_methods,
};

static PyObject *
make(PyObject *module, PyObject *args)
{
    PyObject *objs, *ids, *flags, *tensor = Py_None, *storage = Py_None;
    if (!PyArg_ParseTuple(args, "O!O!O|OO", &PyTuple_Type, &objs, &PyTuple_Type, &ids, &flags, &tensor, &storage)) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(objs) != NO || PyTuple_GET_SIZE(ids) != NI) {
        PyErr_SetString(PyExc_ValueError, "make(): wrong number of constants or ids");
        return NULL;
    }
    Checker *self = PyObject_New(Checker, &CheckerType);
    if (self == NULL) {
        return NULL;
    }
    self->vectorcall = checker_call;
    self->ids = PyMem_Malloc(sizeof(uintptr_t) * (NI > 0 ? NI : 1));
    Py_INCREF(objs);
    self->objs = objs;
    self->flags = NULL;
    self->dead_key = NULL;
    self->tm = NULL;
    self->sp = NULL;
    self->cc = PyMem_Calloc(NC > 0 ? NC : 1, sizeof(ClassCache));
    self->mc = PyMem_Calloc(NM > 0 ? NM : 1, sizeof(ModuleCache));
    self->mv = PyMem_Calloc(NMV > 0 ? NMV : 1, sizeof(PyObject *));
    if (self->cc == NULL || self->mc == NULL || self->mv == NULL) {
        PyMem_Free(self->ids);
        self->ids = NULL;
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    if (tensor != Py_None) {
        self->tm = (int (*)(PyObject *, const int64_t *))PyCapsule_GetPointer(tensor, "ember_guards.tensor_match");
        if (self->tm == NULL) {
            Py_DECREF(self);
            return NULL;
        }
    }
    if (storage != Py_None) {
        self->sp = (int (*)(PyObject *, uintptr_t *))PyCapsule_GetPointer(storage, "ember_guards.storage_ptr");
        if (self->sp == NULL) {
            Py_DECREF(self);
            return NULL;
        }
    }
    if (self->ids == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < NI; i++) {
        self->ids[i] = (uintptr_t)PyLong_AsVoidPtr(PyTuple_GET_ITEM(ids, i));
        if (PyErr_Occurred()) {
            Py_DECREF(self);
            return NULL;
        }
    }
    if (flags != Py_None) {
        Py_INCREF(flags);
        self->flags = flags;
        self->dead_key = PyUnicode_InternFromString("_dead");
        if (self->dead_key == NULL) {
            Py_DECREF(self);
            return NULL;
        }
    }
    return (PyObject *)self;
}

static PyMethodDef methods[] = {
    {"make", make, METH_VARARGS,
     "make(objs, ids, flags[, tensor_match capsule[, storage_ptr capsule]]) -> a check function"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, EMBER_MODULE_NAME, NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
EMBER_PYINIT(void)
{
    for (int i = 0; i < NS; i++) {
        S[i] = PyUnicode_InternFromString(S_TEXT[i]);
        if (S[i] == NULL) {
            return NULL;
        }
    }
    if (PyType_Ready(&CheckerType) < 0) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
"""


def _c_string(text: str) -> str:
    out = []
    for ch in text.encode("utf-8"):
        c = chr(ch)
        if c.isalnum() or c in "_ .,:;()[]{}<>+-*/=!?'@#$%^&|~":
            out.append(c)
        else:
            out.append(f"\\{ch:03o}")
    return '"' + "".join(out) + '"'


class _Tables:
    """The strings (interned, in the source), objects and ids (``make``'s arguments)."""

    def __init__(self) -> None:
        self.strings: dict[str, int] = {}
        self.objs: list[Any] = []
        self._obj_index: dict[tuple[type, int], int] = {}
        self.ids: list[int] = []
        self.sites = 0

    def site(self) -> int:
        """A new ``ClassCache`` slot (``config_attr``)."""
        self.sites += 1
        return self.sites - 1

    def s(self, text: str) -> str:
        i = self.strings.setdefault(text, len(self.strings))
        return f"S[{i}]"

    def o(self, value: Any) -> str:
        key = (type(value), id(value))
        i = self._obj_index.get(key)
        if i is None or self.objs[i] is not value:
            i = len(self.objs)
            self.objs.append(value)
            self._obj_index[key] = i
        return f"O({i})"

    def id(self, value: int) -> str:
        self.ids.append(value)
        return f"ID({len(self.ids) - 1})"


@dataclass
class NativeSource:
    """The C source of one check and the values ``make`` binds it to."""

    source: str
    objs: tuple[Any, ...]
    ids: tuple[int, ...]


def _read(op: tuple[Any, ...], slot: dict[str, int], t: _Tables) -> str:
    kind = op[0]
    if kind in ("local", "global"):
        return f"get_key({'L' if kind == 'local' else 'G'}, {t.s(op[1])})"
    base = f"V[{slot[op[1]]}]"
    if kind in ("attr", "module_dict_attr"):
        return f"PyObject_GetAttr({base}, {t.s(op[2])})"
    if kind == "item":
        return f"get_key({base}, {t.o(op[2])})"
    if kind == "dict_item":
        return f"dict_item({base}, {t.o(op[2])}, {t.o(dict.__getitem__)})"
    if kind == "dict_entry":
        return f"dict_entry({base}, {int(op[2])}, {int(op[3] == 'values')})"
    if kind in ("size", "stride"):
        return f"dim_of({base}, {t.s(kind)}, {t.o(op[2])})"
    if kind == "module_attr":
        return f"module_attr({base}, {t.s(op[2])}, {t.s(op[3])}, {t.s('__dict__')})"
    if kind == "config_attr":
        names = ("attribute_map", "__dict__", "_heterogeneity_spec", "get", "__getattribute__", "__getattr__", "super")
        return (f"config_attr({base}, {t.s(op[2])}, {t.o(op[3])}, &self->cc[{t.site()}], "
                + ", ".join(t.s(n) for n in names) + ")")
    if kind == "module_item":
        return f"module_item({base}, {t.s(op[2])}, {t.s('_modules')})"
    raise ValueError(f"no native read {kind!r}")


def _term(op: tuple[Any, ...], slot: dict[str, int], t: _Tables) -> str:
    kind = op[0]
    if kind in ("fn_eq", "fn_str_eq"):
        fn, v, want = op[1], f"V[{slot[op[2]]}]", op[3]
        if kind == "fn_eq":
            return f"eq_obj(PyObject_CallOneArg({t.o(fn)}, {v}), {t.o(want)})"
        return f"fn_str_eq({t.o(fn)}, {v}, {t.o(want)})"
    if kind == "call_is":
        return f"is_obj(call_fn({t.o(op[1])}, {t.o(tuple(op[2]))}), {t.o(op[3])})"
    if kind == "call_not":
        return f"call_not({t.o(op[1])})"
    if kind == "no_alias":
        names, written, tensor_type = op[1], op[2], op[3]
        vals = ", ".join(f"V[{slot[name]}]" for name in names)
        marks = ", ".join(str(int(w)) for w in written)
        return (f"no_alias(self, (PyObject *[]){{{vals}}}, {len(names)}, (const int[]){{{marks}}}, {len(written)}, "
                f"{t.o(tensor_type)}, {t.s('untyped_storage')}, {t.s('data_ptr')})")
    v = f"V[{slot[op[1]]}]"
    if kind == "type_is":
        return f"(PyObject *)Py_TYPE({v}) == {t.o(op[2])}"
    if kind == "type_id":
        return f"(uintptr_t)Py_TYPE({v}) == {t.id(op[2])}"
    if kind == "id":
        return f"(uintptr_t){v} == {t.id(op[2])}"
    if kind == "is":
        return f"{v} == {t.o(op[2])}"
    if kind == "is_var":
        return f"{v} == V[{slot[op[2]]}]"
    if kind == "not_none":
        return f"{v} != Py_None"
    if kind == "nan":
        return f"(PyFloat_CheckExact({v}) && isnan(PyFloat_AS_DOUBLE({v})))"
    if kind == "eq_typed":
        return f"eq_typed({v}, {t.o(op[2])}, {t.o(op[3])})"
    if kind == "len":
        return f"len_is({v}, {int(op[2])})"
    if kind == "keys":
        return f"keys_are({v}, {t.o(op[2])}, {t.s('keys')})"
    if kind == "attr_is":
        return f"is_obj(PyObject_GetAttr({v}, {t.s(op[2])}), {t.o(op[3])})"
    if kind == "attr_eq":
        return f"eq_obj(PyObject_GetAttr({v}, {t.s(op[2])}), {t.o(op[3])})"
    if kind == "method_eq":
        return f"eq_obj(call_method({v}, {t.s(op[2])}, {t.o(tuple(op[3]))}), {t.o(op[4])})"
    raise ValueError(f"no native term {kind!r}")


def _tensor_spec(fields: dict[str, Any], codes: Any) -> list[int] | None:
    """``native_tensor.cpp``'s spec of a TENSOR_MATCH (see there), or ``None``."""
    try:
        dtype = int(codes.dtype_code(fields["dtype"]))
        dev_type, dev_index = codes.device_code(fields["device"])
    except Exception:
        return None
    keys = fields["keys"]
    ndim = int(fields["ndim"])
    sizes = [-1 if x is None else int(x) for x in fields["sizes"]]
    strides = [-1 if x is None else int(x) for x in fields["strides"]]
    if len(sizes) != ndim or len(strides) != ndim or any(x < -1 for x in sizes + strides):
        return None
    raw = int(keys.raw_repr()) if keys is not None else 0
    if raw >= 2**63:
        return None
    return [dtype, int(fields["device_mode"]), int(dev_type), int(dev_index), int(bool(fields["requires_grad"])),
            ndim, 1 if keys is not None else 0, raw, *sizes, *strides]


def tensor_match_spec(payload: Mapping[str, Any], codes: Any) -> tuple[int, ...] | None:
    """``native_tensor.cpp``'s spec of the (not a weight's) ``TENSOR_MATCH`` with ``payload``:
    the fields ``builder.tensor_part`` tests after the class, or ``None`` where the direct
    read does not cover them (unreadable dispatch keys, a weight's payload)."""
    from ember.guards.builder import _dispatch_keys_of
    from ember.ir import parse_device, parse_dtype

    keys = _dispatch_keys_of(str(payload["dispatch_keys"]))
    if keys is None or payload.get("weight") is True:
        return None
    device = parse_device(str(payload["device"]))
    fields = {
        "dtype": parse_dtype(str(payload["dtype"])), "device": device,
        "requires_grad": bool(payload["requires_grad"]), "ndim": int(payload["ndim"]),
        "sizes": list(payload["sizes"]), "strides": list(payload["strides"]),
        "keys": keys, "device_mode": 1 if device.index is not None else 0,
    }
    spec = _tensor_spec(fields, codes)
    return None if spec is None else tuple(spec)


#: the reads a module's unchanged state serves (``module_hit`` in ``native_prelude.c``)
_MODULE_READS = ("module_attr", "module_item", "module_dict_attr")
_HOLDERS = ("_parameters", "_buffers", "_modules")


def _module_groups(program: Sequence[tuple[Any, ...]]) -> dict[str, tuple[int, list[str]]]:
    """Each module variable whose attributes the check reads through its dicts: its group
    number and the variables of those reads, in program order (ADR 0062;
    ``EMBER_NATIVE_MODULE_READS=0`` makes every read each call, as before)."""
    groups: dict[str, tuple[int, list[str]]] = {}
    for step in program:
        if step[0] == "read" and step[2][0] in _MODULE_READS:
            op = step[2]
            if op[0] == "module_attr" and op[2] not in _HOLDERS:
                continue
            group = groups.setdefault(op[1], (len(groups), []))
            group[1].append(step[1])
    return groups


def _group_offset(groups: dict[str, tuple[int, list[str]]], g: int) -> int:
    return sum(len(reads) for k, reads in groups.values() if k < g)


def _learn_lines(
    groups: dict[str, tuple[int, list[str]]], program: Sequence[tuple[Any, ...]], slot: dict[str, int], t: _Tables
) -> list[str]:
    """At the end of a check that passed, record each group read as usual (``module_learn``)."""
    ops = {step[1]: step[2] for step in program if step[0] == "read"}
    names = (f"{t.s('__getattribute__')}, {t.s('__dict__')}, {{"
             + ", ".join(t.s(h) for h in _HOLDERS) + "}")
    lines = ["    if (ok == 1) {", f"        ModuleNames MN = {{{names}}};"]
    for base, (g, reads) in groups.items():
        hold, keys, kinds, got = [], [], [], []
        for name in reads:
            op = ops[name]
            if op[0] == "module_attr":
                hold.append(str(_HOLDERS.index(op[2])))
                keys.append(t.s(op[3]))
                kinds.append("1")
            elif op[0] == "module_dict_attr":
                hold.append("-1")
                keys.append(t.s(op[2]))
                kinds.append("2")
            else:
                hold.append(str(_HOLDERS.index("_modules")))
                keys.append(t.s(op[2]))
                kinds.append("0")
            got.append(f"V[{slot[name]}]")
        lines += [
            f"        if (!H[{g}]) {{",
            f"            static const int h_[] = {{{', '.join(hold)}}}; static const char k_[] = {{{', '.join(kinds)}}};",
            f"            PyObject *n_[] = {{{', '.join(keys)}}}; PyObject *x_[] = {{{', '.join(got)}}};",
            f"            module_learn(&self->mc[{g}], self->mv + {_group_offset(groups, g)}, V[{slot[base]}], "
            f"{len(reads)}, h_, n_, k_, x_, &MN);",
            "        }",
        ]
    lines.append("    }")
    return lines


def generate_c(
    parts: Sequence[Part], builder: GuardBuilder, predicates: Sequence[Any] | None, codes: Any = None
) -> NativeSource:
    """The C source of the check of ``parts`` (compiled by ``builder``), and its values.

    ``predicates`` are the parts' Python predicates (``CheckFn._part_predicates``), used
    for the parts without a native form; ``None`` if every part has one. ``codes`` is the
    tensor helper (:func:`tensor_helper`): with it, each TENSOR_MATCH reads the tensor's
    fields directly where that gives what the getters give."""
    t = _Tables()
    slot: dict[str, int] = {}
    lines: list[str] = []
    specs: list[str] = []
    groups = _module_groups(builder.program) if os.environ.get("EMBER_NATIVE_MODULE_READS", "1") != "0" else {}
    n_values = sum(len(reads) for _, reads in groups.values())
    for step in builder.program:
        if step[0] == "read":
            name, op = step[1], step[2]
            k = len(slot)
            group = groups.get(op[1]) if op[0] in _MODULE_READS else None
            if group is None:
                lines.append(f"    READ({k}, {_read(op, slot, t)});")
            else:
                g, reads = group
                j = reads.index(name)
                # tested again before each read: a part in between may have run Python code
                hit = f"(H[{g}] = module_hit(&self->mc[{g}], V[{slot[op[1]]}], {int(j == 0)}))"
                if j > 0:
                    hit = f"H[{g}] && {hit}"
                at = _group_offset(groups, g) + j
                lines.append(f"    if ({hit}) {{ V[{k}] = self->mv[{at}]; Py_INCREF(V[{k}]); nv = {k + 1}; }}")
                lines.append(f"    else READ({k}, {_read(op, slot, t)});")
            slot[name] = k
            continue
        part = parts[step[1]]
        if part.terms is None:
            if predicates is None:
                raise ValueError("a part without a native form needs its Python predicate")
            args = [f"V[{slot[builder.names[s]]}]" for s in part.reads]
            pred = t.o(predicates[step[1]])
            if args:
                lines.append(f"    {{ PyObject *a_[] = {{{', '.join(args)}}}; TEST(leaf({pred}, a_, {len(args)})); }}")
            else:
                lines.append(f"    TEST(leaf({pred}, NULL, 0));")
            continue
        terms = [_term(term.op, slot, t) for term in part.terms if term.op is not None]
        spec = _tensor_spec(part.tensor, codes) if part.tensor is not None and codes is not None else None
        if spec is None:
            lines += [f"    TEST({term});" for term in terms]
            continue
        first = part.tensor["first"]
        lines += [f"    TEST({term});" for term in terms[:first]]
        name = f"TS{len(specs)}"
        specs.append(f"static const int64_t {name}[] = {{{', '.join(str(x) for x in spec)}}};")
        v = f"V[{slot[builder.names[part.reads[0]]]}]"
        lines.append(f"    {{ int r_ = TENSOR({v}, {name}); if (r_ != -2) TEST(r_); else {{")
        lines += [f"        TEST({term});" for term in terms[first:]]
        lines.append("    } }")
    learn = _learn_lines(groups, builder.program, slot, t) if groups else []
    head = [
        f"#define NS {len(t.strings)}",
        f"#define NO {len(t.objs)}",
        f"#define NI {len(t.ids)}",
        f"#define NC {t.sites}",
        f"#define NM {len(groups)}",
        f"#define NMV {n_values}",
        _PRELUDE.read_text(),
        "static const char *S_TEXT[NS > 0 ? NS : 1] = {"
        + ", ".join(_c_string(s) for s in t.strings) + ("" if t.strings else "NULL") + "};",
        *specs,
        "",
        "static int",
        "body(Checker *self, PyObject *L, PyObject *G)",
        "{",
        f"    PyObject *V[{max(len(slot), 1)}];",
        "    int H[NM > 0 ? NM : 1] = {0};",
        "    int nv = 0, ok = 0;",
        "    (void)L; (void)G; (void)V; (void)H;",
    ]
    if builder.weakrefs:
        head += [
            "    if (self->flags != NULL) {",
            "        PyObject *dead = PyDict_GetItemWithError(self->flags, self->dead_key);",
            "        if (dead == NULL && PyErr_Occurred()) goto error;",
            "        if (dead != NULL) TEST(!PyObject_IsTrue(dead));",
            "    }",
        ]
    tail = [
        "    ok = 1;",
        "    goto done;",
        "error:",
        "    if (PyErr_ExceptionMatches(PyExc_Exception)) {",
        "        PyErr_Clear();",
        "        ok = 0;",
        "    }",
        "    else {",
        "        ok = -1;",
        "    }",
        "done:",
        *learn,
        "    for (int i = 0; i < nv; i++) {",
        "        Py_DECREF(V[i]);",
        "    }",
        "    return ok;",
        "}",
    ]
    source = "\n".join([*head, *lines, *tail, _EPILOGUE])
    return NativeSource(source, tuple(t.objs), tuple(t.ids))


def build(native: NativeSource, flags: dict[str, Any] | None, capsule: Any = None) -> Any:
    """The native check function of ``native`` (loaded from the disk cache or compiled;
    raises ``ember.ir.native_build.NativeBuildError``). ``flags`` is the dict whose
    ``_dead`` entry says an identity-held object died (``GuardBuilder.consts``);
    ``capsule`` the tensor helper's ``match`` (:func:`tensor_helper`; its ``storage_ptr``
    is passed along with it)."""
    module = load_extension(native.source, AREA, PREFIX)
    storage = _storage_capsule() if capsule is not None else None
    return module.make(native.objs, native.ids, flags, capsule, storage)


def _storage_capsule() -> Any:
    """The tensor helper's ``storage_ptr`` capsule (``None`` without the helper)."""
    helper = _helper.value
    if helper is None:
        return None
    return helper[2]


# -- the tensor helper ---------------------------------------------------------------------

_TENSOR_SOURCE = Path(__file__).with_name("native_tensor.cpp")


def _load_helper() -> tuple[Any, Any, Any]:
    import torch

    module = load_extension(_TENSOR_SOURCE.read_text(), AREA, "ember_guards_tensor", flags=torch_flags(), cxx=True)
    capsule = module.setup(torch.Tensor, torch.nn.Parameter)
    return (module, capsule, module.storage_capsule())


_helper = BackgroundBuild("ember-native-tensor-guards", _load_helper)


def tensor_helper(wait: bool = False) -> tuple[Any, Any, Any] | None:
    """``(module, match capsule, storage_ptr capsule)`` of the tensor helper (``native_tensor.cpp``), or ``None`` while
    it is being built (in a thread: it compiles against torch's headers, ~15 s, once per
    torch build and cache) or where it cannot be built (``EMBER_NATIVE_TENSOR_GUARDS=0``
    turns it off)."""
    if os.environ.get("EMBER_NATIVE_TENSOR_GUARDS", "1") == "0" and _helper.value is None:
        return None
    return _helper.get(wait)


def layout_check(spec: tuple[Any, ...], state_type: type, wait: bool = False) -> Any | None:
    """A parameter-groups layout check (``native_tensor.cpp``'s ``layout_check``, ADR 0058)
    bound to ``spec``: ``check(groups, state)`` returns the gathered inputs, ``False`` or
    ``None`` (undecided). ``None`` here while the tensor helper is being built or where it
    cannot be (``wait``: wait for the build)."""
    helper = tensor_helper(wait=wait)
    if helper is None:
        return None
    module = helper[0]
    capsule = module.make_layout(spec, state_type)
    return functools.partial(module.layout_check, capsule)


def tensor_helper_error() -> str | None:
    """Why the tensor helper is not available (``None`` when it is, or not yet decided)."""
    return _helper.error


def source_lines(native: NativeSource) -> int:
    """Lines of generated C (for logs)."""
    return len(re.findall(r"\n", native.source))


__all__ = [
    "AREA", "PREFIX", "NativeBuildError", "NativeSource", "build", "generate_c", "layout_check", "source_lines",
    "tensor_helper", "tensor_helper_error", "tensor_match_spec",
]
