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

int match(PyObject *v, const int64_t *s) noexcept {
    try {
        PyTypeObject *tp = Py_TYPE(v);
        // Tensor and Parameter are the classes whose getters skip __torch_function__
        // unless a mode is on (torch::check_has_torch_function for an exact class)
        if (!unchanged(tp) || !THPVariable_Check(v) || at::impl::torch_function_mode_enabled()) {
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

PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "setup(torch.Tensor, torch.nn.Parameter) -> capsule of match()"},
    {"dtype_code", dtype_code, METH_O, "the ScalarType number of a torch.dtype"},
    {"device_code", device_code, METH_O, "(DeviceType number, index) of a torch.device"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, EMBER_MODULE_NAME, nullptr, -1, methods,
                          nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC EMBER_PYINIT(void) {
    return PyModule_Create(&module_def);
}
