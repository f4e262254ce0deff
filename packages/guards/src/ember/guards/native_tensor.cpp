// ember.guards: a tensor's TENSOR_MATCH read from its TensorImpl (ADR 0051).
//
// Built once per torch build (it includes torch's headers) and cached on disk; the
// generated guard modules (plain C) call ``match`` through the function pointer this
// module exports in a capsule. ``match`` answers only where reading the tensor's
// fields directly gives what the Python getters give: the object's class is
// torch.Tensor or torch.nn.Parameter and neither class changed since this module was
// loaded (their type version tags), no __torch_function__ mode is on, the layout is strided and the sizes are not symbolic.
// Anywhere else it returns -2 and the generated code runs the getters one by one,
// as the Python check does.
//
// spec (int64): [0] dtype code, [1] device mode (0: none, 1: type and index, 2: type),
// [2] device type, [3] device index, [4] requires_grad, [5] ndim, [6] keys mode
// (0: none, 1: raw key set), [7] key set raw, then ndim sizes and ndim strides
// (-1: not checked).
#include <Python.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <ATen/PythonTorchFunctionTLS.h>

#include <cmath>
#include <vector>

namespace {

PyTypeObject *tensor_type = nullptr;
PyTypeObject *parameter_type = nullptr;
unsigned int tensor_tag = 0;
unsigned int parameter_tag = 0;

bool unchanged(PyTypeObject *tp) {
    if (tp == tensor_type) {
        return tensor_tag != 0 && tp->tp_version_tag == tensor_tag;
    }
    if (tp == parameter_type) {
        return parameter_tag != 0 && tp->tp_version_tag == parameter_tag;
    }
    return false;
}

// ``match`` without the mode test (``layout_check`` makes it once per call)
int match_unmoded(PyObject *v, const int64_t *s) noexcept {
    try {
        PyTypeObject *tp = Py_TYPE(v);
        if (!unchanged(tp) || !THPVariable_Check(v)) {
            return -2;
        }
        const at::Tensor &t = THPVariable_Unpack(v);
        if (!t.defined() || t.layout() != c10::kStrided) {
            return -2;
        }
        c10::TensorImpl *impl = t.unsafeGetTensorImpl();
        if (impl->has_symbolic_sizes_strides()) {
            return -2;
        }
        if (static_cast<int64_t>(t.scalar_type()) != s[0]) {
            return 0;
        }
        if (s[1] != 0) {
            c10::Device d = t.device();
            if (static_cast<int64_t>(d.type()) != s[2]) {
                return 0;
            }
            if (s[1] == 1 && static_cast<int64_t>(d.index()) != s[3]) {
                return 0;
            }
        }
        if (static_cast<int64_t>(t.requires_grad()) != s[4]) {
            return 0;
        }
        const int64_t ndim = s[5];
        if (t.dim() != ndim) {
            return 0;
        }
        c10::IntArrayRef sizes = impl->sizes();
        c10::IntArrayRef strides = impl->strides();
        const int64_t *want_sizes = s + 8;
        const int64_t *want_strides = s + 8 + ndim;
        for (int64_t d = 0; d < ndim; d++) {
            if (want_sizes[d] >= 0 && sizes[d] != want_sizes[d]) {
                return 0;
            }
        }
        for (int64_t d = 0; d < ndim; d++) {
            if (want_strides[d] >= 0 && strides[d] != want_strides[d]) {
                return 0;
            }
        }
        if (s[6] == 1 && static_cast<int64_t>(t.key_set().raw_repr()) != s[7]) {
            return 0;
        }
        return 1;
    } catch (...) {
        return -2;
    }
}

int match(PyObject *v, const int64_t *s) noexcept {
    // Tensor and Parameter are the classes whose getters skip __torch_function__
    // unless a mode is on (torch::check_has_torch_function for an exact class)
    if (at::impl::torch_function_mode_enabled()) {
        return -2;
    }
    return match_unmoded(v, s);
}

// ``v.untyped_storage().data_ptr()`` read from the TensorImpl (NO_ALIASING, ADR 0062): 1 with
// ``*out`` set, or -2 where the methods might give something else (then the generated code
// calls them). ``data_ptr()`` is the storage's ``mutable_data()``, called here too (it
// materializes a copy-on-write storage there as here); a null pointer (meta, an invalid
// storage: 0 or an error there) and any C++ exception take the methods' path.
int storage_ptr(PyObject *v, uintptr_t *out) noexcept {
    try {
        if (at::impl::torch_function_mode_enabled()) {
            return -2;
        }
        if (!unchanged(Py_TYPE(v)) || !THPVariable_Check(v)) {
            return -2;
        }
        const at::Tensor &t = THPVariable_Unpack(v);
        if (!t.defined() || !t.has_storage()) {
            return -2;
        }
        c10::StorageImpl *impl = t.storage().unsafeGetStorageImpl();
        if (impl == nullptr || impl->data() == nullptr) {
            return -2;
        }
        void *p = impl->mutable_data();
        if (p == nullptr) {
            return -2;
        }
        *out = reinterpret_cast<uintptr_t>(p);
        return 1;
    } catch (...) {
        return -2;
    }
}

PyObject *storage_capsule(PyObject *, PyObject *) {
    return PyCapsule_New(reinterpret_cast<void *>(&storage_ptr), "ember_guards.storage_ptr", nullptr);
}

unsigned int tag_of(PyTypeObject *tp) {
    PyObject *name = PyUnicode_InternFromString("dtype");
    if (name == nullptr) {
        return 0;
    }
    (void)_PyType_Lookup(tp, name);  // assigns the version tag where it can
    Py_DECREF(name);
    return (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ? tp->tp_version_tag : 0;
}

PyObject *dtype_code(PyObject *, PyObject *arg) {
    if (!THPDtype_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "dtype_code expects a torch.dtype");
        return nullptr;
    }
    return PyLong_FromLongLong(static_cast<long long>(reinterpret_cast<THPDtype *>(arg)->scalar_type));
}

PyObject *device_code(PyObject *, PyObject *arg) {
    if (!THPDevice_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "device_code expects a torch.device");
        return nullptr;
    }
    const c10::Device &d = reinterpret_cast<THPDevice *>(arg)->device;
    return Py_BuildValue("(LL)", static_cast<long long>(d.type()), static_cast<long long>(d.index()));
}

PyObject *setup(PyObject *, PyObject *args) {
    PyObject *tensor, *parameter;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &tensor, &PyType_Type, &parameter)) {
        return nullptr;
    }
    tensor_type = reinterpret_cast<PyTypeObject *>(tensor);
    parameter_type = reinterpret_cast<PyTypeObject *>(parameter);
    Py_INCREF(tensor);
    Py_INCREF(parameter);
    tensor_tag = tag_of(tensor_type);
    parameter_tag = tag_of(parameter_type);
    return PyCapsule_New(reinterpret_cast<void *>(&match), "ember_guards.tensor_match", nullptr);
}

// -- parameter groups: one loop per group (ADR 0058) ------------------------------------
//
// An optimizer step's layout, checked per call without one guard per tensor: for each
// group, ``group["params"]`` holds the same parameter objects; each has the metadata of
// its TENSOR_MATCH, a gradient or none as before (with its metadata), and its state
// (``state.get(p)``) is None as before, or a dict with the same keys in the same order
// whose tensors match and whose other values equal the captured ones. It is the verdict
// of ember.dynamo's per-tensor guards (``optimizer_guards.tensor_guards``) where it can
// be read from the objects directly, and "undecided" (None) anywhere else: a subclass,
// a changed Tensor or Parameter class, a mode, a non-leaf parameter, a group or state
// that is not an exact dict or list, a key compare that raised. The caller then runs
// the per-tensor check. On a match it returns the step's inputs, gathered in the same
// loop: for each parameter with a gradient, ``p, p.grad`` and its state tensors in the
// plan's order.

struct Entry {
    PyObject *key = nullptr;
    int kind = 0;  // 0 a tensor of class ``type`` (spec), 1 identity with value, 2 a float nan,
                   // 3 type(v) is type and v == value
    std::vector<int64_t> spec;
    PyObject *type = nullptr;
    PyObject *value = nullptr;
};

struct Param {
    PyObject *obj = nullptr;
    PyObject *cls = nullptr;
    std::vector<int64_t> spec;
    bool has_grad = false;
    PyObject *grad_cls = nullptr;
    std::vector<int64_t> grad_spec;
    bool has_state = false;
    std::vector<Entry> entries;
    std::vector<Py_ssize_t> gather;  // entries that are inputs, in input order
};

struct Layout {
    std::vector<std::vector<Param>> groups;
    PyObject *hold = nullptr;  // the spec tuple: every borrowed pointer above lives in it
    PyObject *params_key = nullptr;
    PyTypeObject *state_type = nullptr;  // besides dict: the one mapping class accepted (defaultdict)
    Py_ssize_t n_inputs = 0;
};

bool int_spec(PyObject *t, std::vector<int64_t> &out) {
    if (!PyTuple_Check(t)) {
        PyErr_SetString(PyExc_TypeError, "a tensor spec is a tuple of ints");
        return false;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++) {
        long long x = PyLong_AsLongLong(PyTuple_GET_ITEM(t, i));
        if (x == -1 && PyErr_Occurred()) {
            return false;
        }
        out.push_back(static_cast<int64_t>(x));
    }
    return true;
}

void layout_free(PyObject *capsule) {
    Layout *layout = static_cast<Layout *>(PyCapsule_GetPointer(capsule, "ember_guards.layout"));
    if (layout != nullptr) {
        Py_XDECREF(layout->hold);
        Py_XDECREF(layout->params_key);
        Py_XDECREF(reinterpret_cast<PyObject *>(layout->state_type));
        delete layout;
    }
}

// make_layout(groups, state_type): groups is a tuple of groups, a group a tuple of params,
// a param ``(obj, cls, spec, grad_cls | None, grad_spec | None, entries | None, gather)``, an
// entry ``(key, kind, spec | value | type, cls | value)``.
PyObject *make_layout(PyObject *, PyObject *args) {
    PyObject *spec, *state_type;
    if (!PyArg_ParseTuple(args, "O!O!", &PyTuple_Type, &spec, &PyType_Type, &state_type)) {
        return nullptr;
    }
    auto *layout = new Layout();
    for (Py_ssize_t g = 0; g < PyTuple_GET_SIZE(spec); g++) {
        PyObject *group = PyTuple_GET_ITEM(spec, g);
        if (!PyTuple_Check(group)) {
            PyErr_SetString(PyExc_TypeError, "a group is a tuple of parameters");
            delete layout;
            return nullptr;
        }
        std::vector<Param> params;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(group); i++) {
            PyObject *row = PyTuple_GET_ITEM(group, i);
            PyObject *obj, *cls, *pspec, *gcls, *gspec, *entries, *gather;
            if (!PyArg_ParseTuple(row, "OOO!OOOO!", &obj, &cls, &PyTuple_Type, &pspec, &gcls, &gspec, &entries,
                                  &PyTuple_Type, &gather)) {
                delete layout;
                return nullptr;
            }
            Param p;
            p.obj = obj;
            p.cls = cls;
            p.grad_cls = gcls;
            bool ok = int_spec(pspec, p.spec);
            p.has_grad = gspec != Py_None;
            if (ok && p.has_grad) {
                ok = int_spec(gspec, p.grad_spec);
            }
            p.has_state = entries != Py_None;
            if (ok && p.has_state) {
                if (!PyTuple_Check(entries)) {
                    PyErr_SetString(PyExc_TypeError, "state entries are a tuple");
                    ok = false;
                }
                for (Py_ssize_t k = 0; ok && k < PyTuple_GET_SIZE(entries); k++) {
                    Entry e;
                    PyObject *a, *b;
                    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(entries, k), "OiOO", &e.key, &e.kind, &a, &b)) {
                        ok = false;
                        break;
                    }
                    if (e.kind == 0) {
                        ok = int_spec(a, e.spec);
                        e.type = b;
                    } else if (e.kind == 1) {
                        e.value = a;
                    } else if (e.kind == 3) {
                        e.type = a;
                        e.value = b;
                    } else if (e.kind != 2) {
                        PyErr_SetString(PyExc_ValueError, "unknown state entry kind");
                        ok = false;
                    }
                    p.entries.push_back(std::move(e));
                }
            }
            for (Py_ssize_t k = 0; ok && k < PyTuple_GET_SIZE(gather); k++) {
                Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GET_ITEM(gather, k));
                if (j < 0 || static_cast<size_t>(j) >= p.entries.size() || p.entries[j].kind != 0) {
                    if (!PyErr_Occurred()) {
                        PyErr_SetString(PyExc_ValueError, "a gathered entry must be a tensor entry");
                    }
                    ok = false;
                    break;
                }
                p.gather.push_back(j);
            }
            if (!ok) {
                delete layout;
                return nullptr;
            }
            if (p.has_grad) {
                layout->n_inputs += 2 + static_cast<Py_ssize_t>(p.gather.size());
            }
            params.push_back(std::move(p));
        }
        layout->groups.push_back(std::move(params));
    }
    layout->params_key = PyUnicode_InternFromString("params");
    if (layout->params_key == nullptr) {
        delete layout;
        return nullptr;
    }
    Py_INCREF(spec);
    layout->hold = spec;
    Py_INCREF(state_type);
    layout->state_type = reinterpret_cast<PyTypeObject *>(state_type);
    PyObject *capsule = PyCapsule_New(layout, "ember_guards.layout", layout_free);
    if (capsule == nullptr) {
        Py_DECREF(layout->hold);
        Py_DECREF(layout->params_key);
        Py_DECREF(state_type);
        delete layout;
    }
    return capsule;
}

enum Verdict { NO = 0, YES = 1, UNDECIDED = 2, FAILED = 3 };

// an Exception while reading: undecided (the per-tensor check says what Python says);
// any other BaseException propagates
Verdict raised() {
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        return UNDECIDED;
    }
    return FAILED;
}

Verdict of_match(int r) {
    return r == 1 ? YES : (r == 0 ? NO : UNDECIDED);
}

// one parameter's state: ``state.get(p)`` (``s``, borrowed, or NULL for none)
Verdict check_state(const Param &P, PyObject *s, PyObject **found) {
    if (s == nullptr || s == Py_None) {
        return P.has_state ? NO : YES;  // ``list(None.keys())`` raises: the check fails
    }
    if (!P.has_state) {
        return NO;  // ``states[j] is None`` fails
    }
    if (!PyDict_CheckExact(s)) {
        return UNDECIDED;
    }
    if (PyDict_GET_SIZE(s) != static_cast<Py_ssize_t>(P.entries.size())) {
        return NO;
    }
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *v;
    while (PyDict_Next(s, &pos, &k, &v)) {
        const Entry &e = P.entries[i];
        found[i++] = v;
        if (k != e.key) {
            if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(e.key)) {
                return UNDECIDED;  // a compare that may run Python code
            }
            int same = PyObject_RichCompareBool(k, e.key, Py_EQ);
            if (same < 0) {
                return raised();
            }
            if (!same) {
                return NO;
            }
        }
    }
    for (size_t j = 0; j < P.entries.size(); j++) {
        const Entry &e = P.entries[j];
        PyObject *value = found[j];
        if (e.kind == 0) {
            if (reinterpret_cast<PyObject *>(Py_TYPE(value)) != e.type) {
                return NO;
            }
            Verdict r = of_match(match_unmoded(value, e.spec.data()));
            if (r != YES) {
                return r;
            }
        } else if (e.kind == 1) {
            if (value != e.value) {
                return NO;
            }
        } else if (e.kind == 2) {
            if (!PyFloat_CheckExact(value) || !std::isnan(PyFloat_AS_DOUBLE(value))) {
                return NO;
            }
        } else {
            if (reinterpret_cast<PyObject *>(Py_TYPE(value)) != e.type) {
                return NO;
            }
            if (!PyFloat_CheckExact(value) && !PyLong_CheckExact(value) && !PyUnicode_CheckExact(value)) {
                return UNDECIDED;  // an __eq__ that may run Python code: the Python check runs it
            }
            PyObject *r = PyObject_RichCompare(value, e.value, Py_EQ);
            if (r == nullptr) {
                return raised();
            }
            int t = PyObject_IsTrue(r);
            Py_DECREF(r);
            if (t < 0) {
                return raised();
            }
            if (!t) {
                return NO;
            }
        }
    }
    return YES;
}

Verdict check_layout(const Layout &L, PyObject *groups, PyObject *state, PyObject *out) {
    if (at::impl::torch_function_mode_enabled()) {
        return UNDECIDED;
    }
    if (Py_TYPE(state) != &PyDict_Type && Py_TYPE(state) != L.state_type) {
        return UNDECIDED;
    }
    if (!PyList_CheckExact(groups) || PyList_GET_SIZE(groups) != static_cast<Py_ssize_t>(L.groups.size())) {
        return UNDECIDED;
    }
    Py_ssize_t n = 0;
    std::vector<PyObject *> found;
    for (size_t g = 0; g < L.groups.size(); g++) {
        const std::vector<Param> &want = L.groups[g];
        PyObject *group = PyList_GET_ITEM(groups, g);
        if (!PyDict_CheckExact(group)) {
            return UNDECIDED;
        }
        PyObject *params = PyDict_GetItemWithError(group, L.params_key);
        if (params == nullptr) {
            return PyErr_Occurred() ? raised() : UNDECIDED;
        }
        if (!PyList_CheckExact(params)) {
            return UNDECIDED;
        }
        if (PyList_GET_SIZE(params) != static_cast<Py_ssize_t>(want.size())) {
            return NO;
        }
        for (size_t i = 0; i < want.size(); i++) {
            const Param &P = want[i];
            PyObject *p = PyList_GET_ITEM(params, i);
            if (p != P.obj) {
                return NO;  // the ID_MATCH (P.obj is held by the layout, so its address is its own)
            }
            if (reinterpret_cast<PyObject *>(Py_TYPE(p)) != P.cls) {
                return NO;  // the TENSOR_MATCH's ``type(v) is C`` (``__class__`` can be assigned)
            }
            Verdict r = of_match(match_unmoded(p, P.spec.data()));
            if (r != YES) {
                return r;
            }
            // ``p.grad``: the getter of an exact Tensor or Parameter without a mode (match
            // said so) is the TensorImpl's grad; a non-leaf's getter warns: the getter decides
            const at::Tensor &t = THPVariable_Unpack(p);
            if (!t.is_leaf()) {
                return UNDECIDED;
            }
            const at::Tensor &grad = t.grad();
            if (grad.defined() != P.has_grad) {
                return NO;  // a CONSTANT_MATCH on None, or a TENSOR_MATCH's class test
            }
            PyObject *g_obj = nullptr;
            if (P.has_grad) {
                g_obj = THPVariable_Wrap(grad);
                if (g_obj == nullptr) {
                    return raised();
                }
                r = reinterpret_cast<PyObject *>(Py_TYPE(g_obj)) != P.grad_cls ? NO : YES;
                if (r == YES) r = of_match(match_unmoded(g_obj, P.grad_spec.data()));
                if (r != YES) {
                    Py_DECREF(g_obj);
                    return r;
                }
            }
            // ``state.get(p)``: Tensor.__hash__ is ``id(self)`` (the class is unchanged:
            // match said so), which hashes as the address
            if (reinterpret_cast<uintptr_t>(p) > static_cast<uintptr_t>(PY_SSIZE_T_MAX)) {
                Py_XDECREF(g_obj);
                return UNDECIDED;
            }
            PyObject *s = _PyDict_GetItem_KnownHash(state, p, static_cast<Py_hash_t>(reinterpret_cast<intptr_t>(p)));
            if (s == nullptr && PyErr_Occurred()) {
                Py_XDECREF(g_obj);
                return raised();
            }
            Py_XINCREF(s);
            found.assign(P.entries.size(), nullptr);
            r = check_state(P, s, found.data());
            if (r != YES) {
                Py_XDECREF(s);
                Py_XDECREF(g_obj);
                return r;
            }
            if (P.has_grad) {
                Py_INCREF(p);
                PyList_SET_ITEM(out, n++, p);
                PyList_SET_ITEM(out, n++, g_obj);  // the reference Wrap gave
                for (Py_ssize_t j : P.gather) {
                    Py_INCREF(found[j]);
                    PyList_SET_ITEM(out, n++, found[j]);
                }
            }
            Py_XDECREF(s);
        }
    }
    return YES;
}

// layout_check(layout, groups, state): the inputs (a list) where the layout matches,
// False where it does not, None where the per-tensor check must decide
PyObject *layout_check(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "layout_check(layout, groups, state)");
        return nullptr;
    }
    Layout *L = static_cast<Layout *>(PyCapsule_GetPointer(args[0], "ember_guards.layout"));
    if (L == nullptr) {
        return nullptr;
    }
    PyObject *out = PyList_New(L->n_inputs);
    if (out == nullptr) {
        return nullptr;
    }
    Verdict v;
    try {
        v = check_layout(*L, args[1], args[2], out);
    } catch (...) {
        v = PyErr_Occurred() ? raised() : UNDECIDED;
    }
    if (v == YES) {
        return out;
    }
    Py_DECREF(out);  // the unset slots are NULL, which list dealloc skips
    if (v == FAILED) {
        return nullptr;
    }
    if (v == NO) {
        Py_RETURN_FALSE;
    }
    Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "setup(torch.Tensor, torch.nn.Parameter) -> capsule of match()"},
    {"dtype_code", dtype_code, METH_O, "the ScalarType number of a torch.dtype"},
    {"storage_capsule", storage_capsule, METH_NOARGS, "capsule of storage_ptr() (NO_ALIASING, ADR 0062)"},
    {"device_code", device_code, METH_O, "(DeviceType number, index) of a torch.device"},
    {"make_layout", make_layout, METH_VARARGS, "make_layout(groups, state_type) -> capsule (ADR 0058)"},
    {"layout_check", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(layout_check)), METH_FASTCALL,
     "layout_check(layout, groups, state) -> the inputs, False, or None (undecided)"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, EMBER_MODULE_NAME, nullptr, -1, methods,
                          nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC EMBER_PYINIT(void) {
    return PyModule_Create(&module_def);
}
