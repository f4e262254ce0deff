// ember.inductor: the native graph runner (ADR 0068).
//
// Runs a C++ graph's wrapper without the Python interpreter: ``native_runner.py``
// translates the generated Python wrapper (the reference, and the debug path) into a
// list of instructions over numbered slots; ``make`` turns them into a ``Program``,
// whose call does what the Python ``call(args)`` does: allocates with
// at::empty_strided, views with at::as_strided, calls each kernel through its function
// pointer (no ctypes), calls ATen extern ops through the dispatcher (boxed, their
// constant arguments converted once), frees buffers where the wrapper ``del``s them and
// returns the same list. Python is entered only where the wrapper's own helpers are
// the slow path (a result in another layout, an input copied into the compiled one)
// or the callee is a Python object. The GIL is released while the program runs.
//
// Built once per torch build (it includes torch's headers) and cached on disk.
#include <Python.h>
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <array>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

// -- instructions (the codes native_runner.py writes) --------------------------------------
enum Op : int {
    OP_ARGS = 0,        // slots... <- args; args.clear()
    OP_CONST = 1,       // dst <- constants[i]
    OP_ALLOC = 2,       // dst <- empty_strided(sizes, strides, dtype)
    OP_PTR = 3,         // dst <- src.data_ptr()
    OP_KERNEL = 4,      // fn(args...)
    OP_STRIDED = 5,     // dst <- as_strided(src, sizes, strides[, offset])
    OP_VIEW = 6,        // dst <- as_strided(src, sizes, strides, src.storage_offset() + offset)
    OP_CONST_VIEW = 7,  // dst <- the cached view of a constant
    OP_EXTERN = 8,      // dst <- op(operands...) through the dispatcher
    OP_RESTRIDE_IF = 9, // if dst is None or dst.stride() != strides: dst = _restride(dst, ...)
    OP_RESTRIDE = 10,   // dst <- _restride(src[path...], sizes, strides)
    OP_MOVE = 11,       // dst <- src
    OP_DEL = 12,        // del dst
    OP_PYCALL = 13,     // dst <- fn(operands...) (Python)
    OP_INPUT = 14,      // dst <- _input(i, dst, sizes, strides, dtype)
    OP_SIZE = 15,       // dst <- src.size(d)
    OP_STRIDE = 16,     // dst <- src.stride(d)
    OP_INT = 17,        // dst <- expr
    OP_RETURN = 18,     // return [operands...]
};

// expression codes (reverse Polish, int64)
enum : int64_t { E_CONST = 0, E_SLOT = 1, E_ADD = 2, E_SUB = 3, E_MUL = 4, E_FLOORDIV = 5, E_MOD = 6, E_NEG = 7 };
using Expr = std::vector<int64_t>;

// operand kinds
enum Kind : int {
    K_IVALUE = 0,   // a constant converted once to the schema argument's type
    K_SLOT = 1,     // a slot's value as it is
    K_INT = 2,      // an int expression
    K_TENSORS = 3,  // a list of slots' tensors (Tensor[])
    K_OPT_TENSORS = 4,  // a list of slots' tensors or None (Tensor?[])
    K_INTS = 5,     // a list of int expressions
    K_PY = 6,       // a Python object, as it is (Python calls and the result list)
    K_TUPLE = 7,    // a Python tuple of int expressions (Python calls)
};

struct Operand {
    Kind kind = K_SLOT;
    int slot = -1;
    Expr expr;
    std::vector<Operand> items;
    std::vector<Expr> exprs;
    c10::IValue value;
    PyObject *py = nullptr;  // owned
};

struct Instr {
    Op op = OP_MOVE;
    int dst = -1;
    int src = -1;
    int64_t aux = 0;  // constant index, dim, cache index, input index
    std::vector<int> slots;
    std::vector<Expr> sizes, strides, args;
    Expr offset;
    bool has_offset = false;
    void *fn = nullptr;
    int (*take_error)() = nullptr;
    PyObject *py = nullptr;  // owned: a Python callable, or the error type of a kernel
    std::string text;        // a kernel's index-error message
    std::vector<int64_t> path;
    c10::ScalarType dtype = c10::ScalarType::Float;
    std::optional<c10::OperatorHandle> handle;
    std::vector<Operand> operands;
};

struct Slot {
    c10::IValue v;
    PyObject *py = nullptr;  // owned; a Python value (a Python call's result) when set
};

struct ConstView {
    at::Tensor of;
    void *data = nullptr;
    at::Tensor view;
};

// -- calling a kernel through its address ------------------------------------------------------
// Every kernel argument is a pointer or an int64: both travel in integer registers (or
// 8-byte stack slots), so a kernel of n arguments is called through a function type of n
// int64s (as ctypes calls it).
using Caller = void (*)(void *, const int64_t *);

template <size_t... I>
void call_n(void *f, const int64_t *a, std::index_sequence<I...>) {
    reinterpret_cast<void (*)(decltype((void)I, int64_t{})...)>(f)(a[I]...);
}

template <size_t N>
void call_fixed(void *f, const int64_t *a) {
    call_n(f, a, std::make_index_sequence<N>{});
}

template <size_t... N>
constexpr std::array<Caller, sizeof...(N)> make_callers(std::index_sequence<N...>) {
    return {&call_fixed<N>...};
}

constexpr size_t MAX_KERNEL_ARGS = 128;
const std::array<Caller, MAX_KERNEL_ARGS + 1> CALLERS = make_callers(std::make_index_sequence<MAX_KERNEL_ARGS + 1>{});

// -- the GIL, released while the program runs ----------------------------------------------
struct Gil {
    PyThreadState *saved = nullptr;
    void release() {
        if (saved == nullptr) {
            saved = PyEval_SaveThread();
        }
    }
    void hold() {
        if (saved != nullptr) {
            PyEval_RestoreThread(saved);
            saved = nullptr;
        }
    }
    ~Gil() { hold(); }
};

// the GIL held for a scope, and given back at its end where it was released before
struct Held {
    Gil &gil;
    bool was_released;
    explicit Held(Gil &g) : gil(g), was_released(g.saved != nullptr) { gil.hold(); }
    ~Held() {
        if (was_released) {
            gil.release();
        }
    }
};

[[noreturn]] void raise_python() {
    python_error e;
    e.persist();
    throw e;
}

// -- the program ---------------------------------------------------------------------------
struct Program {
    PyObject_HEAD
    std::vector<Instr> *code;
    std::vector<PyObject *> *constants;  // owned
    std::vector<ConstView> *views;
    std::mutex *views_lock;
    int n_slots;
    int64_t written_from;  // instructions from here may have written an input (-1: none)
    PyObject *inputs_written;  // owned: called with the exception raised after that point
    PyObject *weakrefs;
};

int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t modulo(int64_t a, int64_t b) {
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

int64_t int_of(const Slot &s, Gil &gil) {
    if (s.py != nullptr) {
        Held held(gil);
        int64_t v = PyLong_AsLongLong(s.py);
        if (v == -1 && PyErr_Occurred()) {
            raise_python();
        }
        return v;
    }
    if (s.v.isInt()) {
        return s.v.toInt();
    }
    if (s.v.isBool()) {
        return s.v.toBool() ? 1 : 0;
    }
    TORCH_CHECK(false, "ember native runner: an int was expected, got ", s.v.tagKind());
}

int64_t eval(const Expr &e, std::vector<Slot> &slots, Gil &gil) {
    int64_t stack[32];
    int sp = 0;
    for (size_t i = 0; i < e.size(); i++) {
        int64_t code = e[i];
        if (code == E_CONST) {
            stack[sp++] = e[++i];
            continue;
        }
        if (code == E_SLOT) {
            stack[sp++] = int_of(slots[e[++i]], gil);
            continue;
        }
        if (code == E_NEG) {
            stack[sp - 1] = -stack[sp - 1];
            continue;
        }
        int64_t b = stack[--sp];
        int64_t a = stack[sp - 1];
        switch (code) {
            case E_ADD: a = a + b; break;
            case E_SUB: a = a - b; break;
            case E_MUL: a = a * b; break;
            case E_FLOORDIV:
                TORCH_CHECK(b != 0, "integer division by zero in a size expression");
                a = floordiv(a, b);
                break;
            case E_MOD:
                TORCH_CHECK(b != 0, "integer modulo by zero in a size expression");
                a = modulo(a, b);
                break;
            default: TORCH_CHECK(false, "ember native runner: bad expression code ", code);
        }
        stack[sp - 1] = a;
    }
    return stack[0];
}

using Ints = c10::SmallVector<int64_t, 8>;

Ints eval_all(const std::vector<Expr> &es, std::vector<Slot> &slots, Gil &gil) {
    Ints out;
    out.reserve(es.size());
    for (const Expr &e : es) {
        out.push_back(eval(e, slots, gil));
    }
    return out;
}

// a slot's tensor; a Python value is unpacked (under the GIL)
at::Tensor tensor_of(const Slot &s, Gil &gil) {
    if (s.py != nullptr) {
        Held held(gil);
        TORCH_CHECK(THPVariable_Check(s.py), "ember native runner: a tensor was expected");
        return THPVariable_Unpack(s.py);
    }
    TORCH_CHECK(s.v.isTensor(), "ember native runner: a tensor was expected, got ", s.v.tagKind());
    return s.v.toTensor();
}

void set_py(Slot &s, PyObject *obj) {  // steals obj; the GIL is held
    Py_CLEAR(s.py);
    if (obj == Py_None) {
        s.v = c10::IValue();
        Py_DECREF(obj);
    } else if (THPVariable_Check(obj)) {
        s.v = THPVariable_Unpack(obj);
        Py_DECREF(obj);
    } else if (PyLong_CheckExact(obj)) {
        s.v = static_cast<int64_t>(PyLong_AsLongLong(obj));
        Py_DECREF(obj);
    } else {
        s.v = c10::IValue();
        s.py = obj;
    }
}

void clear_slot(Slot &s, Gil &gil) {
    if (s.py != nullptr) {
        Held held(gil);
        Py_CLEAR(s.py);
    }
    s.v = c10::IValue();
}

// a value as a new Python reference (the GIL is held)
PyObject *to_py(const Slot &s) {
    if (s.py != nullptr) {
        Py_INCREF(s.py);
        return s.py;
    }
    const c10::IValue &v = s.v;
    if (v.isTensor()) {
        const at::Tensor &t = v.toTensor();
        if (!t.defined()) {
            Py_RETURN_NONE;
        }
        return THPVariable_Wrap(t);
    }
    if (v.isNone()) {
        Py_RETURN_NONE;
    }
    if (v.isInt()) {
        return PyLong_FromLongLong(v.toInt());
    }
    return torch::jit::toPyObject(v).release().ptr();
}

PyObject *tuple_of(const Ints &values) {
    PyObject *t = PyTuple_New(static_cast<Py_ssize_t>(values.size()));
    if (t == nullptr) {
        raise_python();
    }
    for (size_t i = 0; i < values.size(); i++) {
        PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(values[i]));
    }
    return t;
}

// the operand's value as a new Python reference, for a Python call (the GIL is held)
PyObject *operand_py(const Operand &o, std::vector<Slot> &slots, Gil &gil) {
    switch (o.kind) {
        case K_SLOT: return to_py(slots[o.slot]);
        case K_PY: Py_INCREF(o.py); return o.py;
        case K_INT: return PyLong_FromLongLong(eval(o.expr, slots, gil));
        case K_TUPLE: return tuple_of(eval_all(o.exprs, slots, gil));
        default: TORCH_CHECK(false, "ember native runner: bad Python operand kind ", int(o.kind));
    }
}

// call ``fn(operands...)`` (Python) and store its result in ``dst`` (-1: drop it)
void py_call(PyObject *fn, const std::vector<Operand> &ops, int dst, std::vector<Slot> &slots, Gil &gil) {
    Held held(gil);
    PyObject *args = PyTuple_New(static_cast<Py_ssize_t>(ops.size()));
    if (args == nullptr) {
        raise_python();
    }
    for (size_t i = 0; i < ops.size(); i++) {
        PyObject *a = operand_py(ops[i], slots, gil);
        if (a == nullptr) {
            Py_DECREF(args);
            raise_python();
        }
        PyTuple_SET_ITEM(args, i, a);
    }
    PyObject *out = PyObject_Call(fn, args, nullptr);
    Py_DECREF(args);
    if (out == nullptr) {
        raise_python();
    }
    if (dst >= 0) {
        set_py(slots[dst], out);
    } else {
        Py_DECREF(out);
    }
}

c10::IValue operand_value(const Operand &o, std::vector<Slot> &slots, Gil &gil) {
    switch (o.kind) {
        case K_IVALUE: return o.value;
        case K_SLOT: {
            const Slot &s = slots[o.slot];
            if (s.py != nullptr) {
                return tensor_of(s, gil);
            }
            return s.v;
        }
        case K_INT: return eval(o.expr, slots, gil);
        case K_TENSORS: {
            c10::List<at::Tensor> list;
            list.reserve(o.items.size());
            for (const Operand &item : o.items) {
                list.push_back(tensor_of(slots[item.slot], gil));
            }
            return list;
        }
        case K_OPT_TENSORS: {
            c10::List<std::optional<at::Tensor>> list;
            list.reserve(o.items.size());
            for (const Operand &item : o.items) {
                if (item.kind == K_IVALUE) {
                    list.push_back(std::nullopt);
                } else {
                    list.push_back(tensor_of(slots[item.slot], gil));
                }
            }
            return list;
        }
        case K_INTS: {
            std::vector<int64_t> values;
            values.reserve(o.exprs.size());
            for (const Expr &e : o.exprs) {
                values.push_back(eval(e, slots, gil));
            }
            return values;
        }
        default: TORCH_CHECK(false, "ember native runner: bad operand kind ", int(o.kind));
    }
}

bool same_strides(const at::Tensor &t, const Ints &strides) {
    c10::IntArrayRef have = t.strides();
    if (have.size() != strides.size()) {
        return false;
    }
    for (size_t d = 0; d < strides.size(); d++) {
        if (have[d] != strides[d]) {
            return false;
        }
    }
    return true;
}

// ``_restride``'s cases that keep the tensor as it is (the rest copy, in Python)
bool keeps_layout(const at::Tensor &t, const Ints &sizes, const Ints &strides) {
    if (same_strides(t, strides) || t.numel() <= 1) {
        return true;
    }
    c10::IntArrayRef have = t.strides();
    if (have.size() != strides.size() || sizes.size() != strides.size()) {
        return false;
    }
    for (size_t d = 0; d < strides.size(); d++) {
        if (sizes[d] != 1 && have[d] != strides[d]) {
            return false;
        }
    }
    return true;
}

void restride(Slot &dst, const Instr &in, std::vector<Slot> &slots, Gil &gil) {
    if (dst.py == nullptr) {
        if (dst.v.isNone()) {
            return;
        }
        if (dst.v.isTensor()) {
            const at::Tensor &t = dst.v.toTensor();
            if (!t.defined()) {
                return;
            }
            Ints sizes = eval_all(in.sizes, slots, gil);
            Ints strides = eval_all(in.strides, slots, gil);
            if (keeps_layout(t, sizes, strides)) {
                return;
            }
        }
    }
    // the slow path: Python's ``_restride(t, sizes, strides)`` (a copy)
    Held held(gil);
    PyObject *t = to_py(dst);
    PyObject *sizes = tuple_of(eval_all(in.sizes, slots, gil));
    PyObject *strides = tuple_of(eval_all(in.strides, slots, gil));
    PyObject *out = PyObject_CallFunctionObjArgs(in.py, t, sizes, strides, nullptr);
    Py_DECREF(t);
    Py_DECREF(sizes);
    Py_DECREF(strides);
    if (out == nullptr) {
        raise_python();
    }
    set_py(dst, out);
}

// ``value[path...]`` of a result tuple or list
Slot subscript(const Slot &s, const std::vector<int64_t> &path, Gil &gil) {
    Slot out;
    if (s.py != nullptr) {
        Held held(gil);
        PyObject *cur = s.py;
        Py_INCREF(cur);
        for (int64_t i : path) {
            PyObject *next = PySequence_GetItem(cur, i);
            Py_DECREF(cur);
            if (next == nullptr) {
                raise_python();
            }
            cur = next;
        }
        set_py(out, cur);
        return out;
    }
    c10::IValue cur = s.v;
    for (int64_t i : path) {
        if (cur.isTuple()) {
            cur = cur.toTupleRef().elements().at(i);
        } else if (cur.isList()) {
            cur = cur.toListRef().at(i);
        } else {
            TORCH_CHECK(false, "ember native runner: cannot index a ", cur.tagKind());
        }
    }
    out.v = std::move(cur);
    return out;
}

at::Tensor const_view(Program *p, const Instr &in, const at::Tensor &t, std::vector<Slot> &slots, Gil &gil) {
    Ints sizes = eval_all(in.sizes, slots, gil);
    Ints strides = eval_all(in.strides, slots, gil);
    int64_t offset = t.storage_offset() + eval(in.offset, slots, gil);
    if (t.requires_grad() && c10::GradMode::is_enabled()) {
        return at::as_strided(t, sizes, strides, offset);
    }
    std::lock_guard<std::mutex> lock(*p->views_lock);
    ConstView &hit = (*p->views)[in.aux];
    if (hit.of.defined() && hit.of.unsafeGetTensorImpl() == t.unsafeGetTensorImpl() && hit.data == t.data_ptr()) {
        return hit.view;
    }
    at::Tensor view = at::as_strided(t, sizes, strides, offset);
    hit.of = t;
    hit.data = t.data_ptr();
    hit.view = view;
    return view;
}

void run_extern(const Instr &in, std::vector<Slot> &slots, Gil &gil) {
    torch::jit::Stack stack;
    stack.reserve(in.operands.size());
    for (const Operand &o : in.operands) {
        stack.push_back(operand_value(o, slots, gil));
    }
    in.handle->callBoxed(&stack);
    Slot &dst = slots[in.dst];
    if (dst.py != nullptr) {
        clear_slot(dst, gil);
    }
    if (stack.size() == 1) {
        dst.v = std::move(stack[0]);
    } else {
        dst.v = c10::ivalue::Tuple::create(std::move(stack));
    }
}

void check_input(const Instr &in, std::vector<Slot> &slots, Gil &gil) {
    Slot &s = slots[in.dst];
    if (s.py == nullptr && s.v.isTensor()) {
        const at::Tensor &t = s.v.toTensor();
        Ints sizes = eval_all(in.sizes, slots, gil);
        Ints strides = eval_all(in.strides, slots, gil);
        if (t.defined() && t.scalar_type() == in.dtype && t.sizes().equals(sizes) && same_strides(t, strides)) {
            return;
        }
    }
    py_call(in.py, in.operands, in.dst, slots, gil);
}

PyObject *execute(Program *p, std::vector<Slot> &slots, PyObject *args, Gil &gil, int64_t &pc) {
    const std::vector<Instr> &code = *p->code;
    for (pc = 0; pc < static_cast<int64_t>(code.size()); pc++) {
        const Instr &in = code[pc];
        switch (in.op) {
            case OP_ARGS: {
                if (!PyList_Check(args)) {
                    PyErr_SetString(PyExc_TypeError, "a compiled graph takes a list of its inputs");
                    raise_python();
                }
                Py_ssize_t n = PyList_GET_SIZE(args);
                if (n != static_cast<Py_ssize_t>(in.slots.size())) {
                    PyErr_Format(PyExc_ValueError, "the compiled graph takes %zd inputs, got %zd",
                                 static_cast<Py_ssize_t>(in.slots.size()), n);
                    raise_python();
                }
                for (Py_ssize_t i = 0; i < n; i++) {
                    PyObject *item = PyList_GET_ITEM(args, i);
                    Py_INCREF(item);
                    set_py(slots[in.slots[i]], item);
                }
                if (PyList_SetSlice(args, 0, n, nullptr) != 0) {
                    raise_python();
                }
                gil.release();
                break;
            }
            case OP_CONST: {
                Slot &s = slots[in.dst];
                s.v = THPVariable_Unpack((*p->constants)[in.aux]);
                break;
            }
            case OP_ALLOC: {
                Ints sizes = eval_all(in.sizes, slots, gil);
                Ints strides = eval_all(in.strides, slots, gil);
                slots[in.dst].v = at::empty_strided(sizes, strides, at::TensorOptions().dtype(in.dtype));
                break;
            }
            case OP_PTR: {
                const Slot &src = slots[in.src];
                void *ptr = (src.py == nullptr && src.v.isTensor()) ? src.v.toTensor().data_ptr()
                                                                      : tensor_of(src, gil).data_ptr();
                slots[in.dst].v = static_cast<int64_t>(reinterpret_cast<intptr_t>(ptr));
                break;
            }
            case OP_KERNEL: {
                int64_t values[MAX_KERNEL_ARGS];
                size_t n = in.args.size();
                for (size_t i = 0; i < n; i++) {
                    values[i] = eval(in.args[i], slots, gil);
                }
                CALLERS[n](in.fn, values);
                if (in.take_error != nullptr && in.take_error()) {
                    Held held(gil);
                    PyErr_SetString(in.py, in.text.c_str());
                    raise_python();
                }
                break;
            }
            case OP_STRIDED:
            case OP_VIEW: {
                at::Tensor t = tensor_of(slots[in.src], gil);
                Ints sizes = eval_all(in.sizes, slots, gil);
                Ints strides = eval_all(in.strides, slots, gil);
                at::Tensor v;
                if (in.op == OP_VIEW) {
                    v = at::as_strided(t, sizes, strides, t.storage_offset() + eval(in.offset, slots, gil));
                } else if (in.has_offset) {
                    v = at::as_strided(t, sizes, strides, eval(in.offset, slots, gil));
                } else {
                    v = at::as_strided(t, sizes, strides);
                }
                Slot &dst = slots[in.dst];
                clear_slot(dst, gil);
                dst.v = std::move(v);
                break;
            }
            case OP_CONST_VIEW: {
                at::Tensor t = tensor_of(slots[in.src], gil);
                at::Tensor v = const_view(p, in, t, slots, gil);
                Slot &dst = slots[in.dst];
                clear_slot(dst, gil);
                dst.v = std::move(v);
                break;
            }
            case OP_EXTERN: run_extern(in, slots, gil); break;
            case OP_RESTRIDE_IF: restride(slots[in.dst], in, slots, gil); break;
            case OP_RESTRIDE: {
                Slot picked = subscript(slots[in.src], in.path, gil);
                restride(picked, in, slots, gil);
                Slot &dst = slots[in.dst];
                clear_slot(dst, gil);
                dst.v = std::move(picked.v);
                dst.py = picked.py;
                break;
            }
            case OP_MOVE: {
                if (in.dst == in.src) {
                    break;
                }
                const Slot &src = slots[in.src];
                Slot &dst = slots[in.dst];
                clear_slot(dst, gil);
                if (src.py != nullptr) {
                    Held held(gil);
                    Py_INCREF(src.py);
                    dst.py = src.py;
                }
                dst.v = src.v;
                break;
            }
            case OP_DEL: clear_slot(slots[in.dst], gil); break;
            case OP_PYCALL: py_call(in.py, in.operands, in.dst, slots, gil); break;
            case OP_INPUT: check_input(in, slots, gil); break;
            case OP_SIZE:
            case OP_STRIDE: {
                at::Tensor t = tensor_of(slots[in.src], gil);
                int64_t v = in.op == OP_SIZE ? t.size(in.aux) : t.stride(in.aux);
                Slot &dst = slots[in.dst];
                clear_slot(dst, gil);
                dst.v = v;
                break;
            }
            case OP_INT: {
                int64_t v = eval(in.sizes.at(0), slots, gil);
                Slot &dst = slots[in.dst];
                clear_slot(dst, gil);
                dst.v = v;
                break;
            }
            case OP_RETURN: {
                gil.hold();
                PyObject *out = PyList_New(static_cast<Py_ssize_t>(in.operands.size()));
                if (out == nullptr) {
                    raise_python();
                }
                for (size_t i = 0; i < in.operands.size(); i++) {
                    PyObject *item = operand_py(in.operands[i], slots, gil);
                    if (item == nullptr) {
                        Py_DECREF(out);
                        raise_python();
                    }
                    PyList_SET_ITEM(out, i, item);
                }
                return out;
            }
        }
    }
    gil.hold();
    Py_RETURN_NONE;
}

void clear_slots(std::vector<Slot> &slots) {  // the GIL is held
    for (Slot &s : slots) {
        Py_CLEAR(s.py);
    }
    slots.clear();
}

PyObject *program_call(PyObject *self, PyObject *args, PyObject *kwargs) {
    Program *p = reinterpret_cast<Program *>(self);
    PyObject *inputs = nullptr;
    if (kwargs != nullptr || !PyArg_ParseTuple(args, "O", &inputs)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "a compiled graph takes one list of inputs");
        }
        return nullptr;
    }
    std::vector<Slot> slots(static_cast<size_t>(p->n_slots));
    int64_t pc = 0;
    PyObject *result = nullptr;
    Gil gil;
    try {
        torch::PyWarningHandler warnings;
        try {
            result = execute(p, slots, inputs, gil, pc);
        } catch (...) {
            gil.hold();
            warnings.set_in_exception();
            throw;
        }
        gil.hold();
    } catch (...) {
        gil.hold();
        Py_CLEAR(result);
        torch::translate_exception_to_python(std::current_exception());
    }
    gil.hold();
    if (result == nullptr && p->written_from >= 0 && pc >= p->written_from && PyErr_Occurred()) {
        // the exception says that a kernel may have written an input (ember.ir.updates)
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb != nullptr && value != nullptr) {
            PyException_SetTraceback(value, tb);
        }
        PyObject *noted = PyObject_CallFunctionObjArgs(p->inputs_written, value, nullptr);
        Py_XDECREF(noted);
        if (noted == nullptr) {
            PyErr_Clear();
        }
        PyErr_Restore(type, value, tb);
    }
    clear_slots(slots);
    return result;
}

void program_dealloc(PyObject *self) {
    Program *p = reinterpret_cast<Program *>(self);
    if (p->weakrefs != nullptr) {
        PyObject_ClearWeakRefs(self);
    }
    if (p->code != nullptr) {
        for (Instr &in : *p->code) {
            Py_CLEAR(in.py);
            for (Operand &o : in.operands) {
                Py_CLEAR(o.py);
                for (Operand &item : o.items) {
                    Py_CLEAR(item.py);
                }
            }
        }
        delete p->code;
    }
    if (p->constants != nullptr) {
        for (PyObject *c : *p->constants) {
            Py_DECREF(c);
        }
        delete p->constants;
    }
    delete p->views;
    delete p->views_lock;
    Py_CLEAR(p->inputs_written);
    Py_TYPE(self)->tp_free(self);
}

PyTypeObject ProgramType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// -- building a program from native_runner.py's instruction tuples -----------------------------
int64_t as_int(PyObject *o) {
    int64_t v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        raise_python();
    }
    return v;
}

PyObject *item(PyObject *seq, Py_ssize_t i) {  // borrowed
    if (!PyTuple_Check(seq) || i >= PyTuple_GET_SIZE(seq)) {
        PyErr_SetString(PyExc_ValueError, "ember native runner: malformed instruction");
        raise_python();
    }
    return PyTuple_GET_ITEM(seq, i);
}

Expr parse_expr(PyObject *o) {
    Expr e;
    PyObject *seq = PySequence_Fast(o, "an expression is a sequence of ints");
    if (seq == nullptr) {
        raise_python();
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        e.push_back(as_int(PySequence_Fast_GET_ITEM(seq, i)));
    }
    Py_DECREF(seq);
    return e;
}

std::vector<Expr> parse_exprs(PyObject *o) {
    std::vector<Expr> out;
    PyObject *seq = PySequence_Fast(o, "expressions are a sequence");
    if (seq == nullptr) {
        raise_python();
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        out.push_back(parse_expr(PySequence_Fast_GET_ITEM(seq, i)));
    }
    Py_DECREF(seq);
    return out;
}

std::vector<int64_t> parse_ints(PyObject *o) { return parse_expr(o); }

Operand parse_operand(PyObject *o, const c10::FunctionSchema *schema) {
    Operand op;
    op.kind = static_cast<Kind>(as_int(item(o, 0)));
    PyObject *a = item(o, 1);
    switch (op.kind) {
        case K_IVALUE: {
            int64_t pos = as_int(item(o, 2));
            TORCH_CHECK(schema != nullptr && pos >= 0 && pos < static_cast<int64_t>(schema->arguments().size()),
                        "ember native runner: a constant operand without its schema argument");
            const c10::Argument &arg = schema->arguments()[pos];
            if (as_int(item(o, 3)) == 1) {  // the schema's default value
                TORCH_CHECK(arg.default_value().has_value(), "argument ", arg.name(), " has no default");
                op.value = *arg.default_value();
            } else {
                // a number where a Tensor is expected, as the Python binding of an op allows
                torch::jit::ToIValueAllowNumbersAsTensors numbers(true);
                op.value = torch::jit::toIValue(a, arg.type());
            }
            break;
        }
        case K_SLOT: op.slot = static_cast<int>(as_int(a)); break;
        case K_INT: op.expr = parse_expr(a); break;
        case K_TENSORS:
        case K_OPT_TENSORS: {
            PyObject *seq = PySequence_Fast(a, "a list operand is a sequence");
            if (seq == nullptr) {
                raise_python();
            }
            for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
                PyObject *x = PySequence_Fast_GET_ITEM(seq, i);
                Operand elem;
                if (x == Py_None) {
                    elem.kind = K_IVALUE;
                } else {
                    elem.kind = K_SLOT;
                    elem.slot = static_cast<int>(as_int(x));
                }
                op.items.push_back(std::move(elem));
            }
            Py_DECREF(seq);
            break;
        }
        case K_INTS:
        case K_TUPLE: op.exprs = parse_exprs(a); break;
        case K_PY: Py_INCREF(a); op.py = a; break;
        default: TORCH_CHECK(false, "ember native runner: bad operand kind ", int(op.kind));
    }
    return op;
}

std::vector<Operand> parse_operands(PyObject *o, const c10::FunctionSchema *schema) {
    std::vector<Operand> out;
    PyObject *seq = PySequence_Fast(o, "operands are a sequence");
    if (seq == nullptr) {
        raise_python();
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        out.push_back(parse_operand(PySequence_Fast_GET_ITEM(seq, i), schema));
    }
    Py_DECREF(seq);
    return out;
}

c10::ScalarType dtype_of(PyObject *o) {
    if (!THPDtype_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "ember native runner: a torch.dtype was expected");
        raise_python();
    }
    return reinterpret_cast<THPDtype *>(o)->scalar_type;
}

Instr parse_instr(PyObject *t) {
    Instr in;
    in.op = static_cast<Op>(as_int(item(t, 0)));
    switch (in.op) {
        case OP_ARGS: {
            for (int64_t s : parse_ints(item(t, 1))) {
                in.slots.push_back(static_cast<int>(s));
            }
            break;
        }
        case OP_CONST: in.dst = as_int(item(t, 1)); in.aux = as_int(item(t, 2)); break;
        case OP_ALLOC:
            in.dst = as_int(item(t, 1));
            in.sizes = parse_exprs(item(t, 2));
            in.strides = parse_exprs(item(t, 3));
            in.dtype = dtype_of(item(t, 4));
            break;
        case OP_PTR: in.dst = as_int(item(t, 1)); in.src = as_int(item(t, 2)); break;
        case OP_KERNEL: {
            in.fn = reinterpret_cast<void *>(static_cast<intptr_t>(as_int(item(t, 1))));
            in.args = parse_exprs(item(t, 2));
            TORCH_CHECK(in.args.size() <= MAX_KERNEL_ARGS, "a kernel of ", in.args.size(), " arguments");
            int64_t take = as_int(item(t, 3));
            if (take != 0) {
                in.take_error = reinterpret_cast<int (*)()>(static_cast<intptr_t>(take));
                in.py = item(t, 4);
                Py_INCREF(in.py);
                const char *text = PyUnicode_AsUTF8(item(t, 5));
                if (text == nullptr) {
                    raise_python();
                }
                in.text = text;
            }
            break;
        }
        case OP_STRIDED:
        case OP_VIEW:
        case OP_CONST_VIEW: {
            in.dst = as_int(item(t, 1));
            in.src = as_int(item(t, 2));
            in.sizes = parse_exprs(item(t, 3));
            in.strides = parse_exprs(item(t, 4));
            PyObject *off = item(t, 5);
            in.has_offset = off != Py_None;
            if (in.has_offset) {
                in.offset = parse_expr(off);
            }
            if (in.op == OP_CONST_VIEW) {
                in.aux = as_int(item(t, 6));
            }
            break;
        }
        case OP_EXTERN: {
            in.dst = as_int(item(t, 1));
            const char *name = PyUnicode_AsUTF8(item(t, 2));
            const char *overload = PyUnicode_AsUTF8(item(t, 3));
            if (name == nullptr || overload == nullptr) {
                raise_python();
            }
            in.handle = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
            in.operands = parse_operands(item(t, 4), &in.handle->schema());
            TORCH_CHECK(in.operands.size() == in.handle->schema().arguments().size(),
                        "ember native runner: ", name, " takes ", in.handle->schema().arguments().size(),
                        " arguments, got ", in.operands.size());
            break;
        }
        case OP_RESTRIDE_IF:
        case OP_RESTRIDE: {
            in.dst = as_int(item(t, 1));
            in.src = as_int(item(t, 2));
            in.path = parse_ints(item(t, 3));
            in.sizes = parse_exprs(item(t, 4));
            in.strides = parse_exprs(item(t, 5));
            in.py = item(t, 6);
            Py_INCREF(in.py);
            break;
        }
        case OP_MOVE: in.dst = as_int(item(t, 1)); in.src = as_int(item(t, 2)); break;
        case OP_DEL: in.dst = as_int(item(t, 1)); break;
        case OP_PYCALL:
            in.dst = as_int(item(t, 1));
            in.py = item(t, 2);
            Py_INCREF(in.py);
            in.operands = parse_operands(item(t, 3), nullptr);
            break;
        case OP_INPUT:
            in.dst = as_int(item(t, 1));
            in.sizes = parse_exprs(item(t, 2));
            in.strides = parse_exprs(item(t, 3));
            in.dtype = dtype_of(item(t, 4));
            in.py = item(t, 5);
            Py_INCREF(in.py);
            in.operands = parse_operands(item(t, 6), nullptr);
            break;
        case OP_SIZE:
        case OP_STRIDE:
            in.dst = as_int(item(t, 1));
            in.src = as_int(item(t, 2));
            in.aux = as_int(item(t, 3));
            break;
        case OP_INT: in.dst = as_int(item(t, 1)); in.sizes.push_back(parse_expr(item(t, 2))); break;
        case OP_RETURN: in.operands = parse_operands(item(t, 1), nullptr); break;
        default: TORCH_CHECK(false, "ember native runner: unknown instruction ", int(in.op));
    }
    return in;
}

// make(instructions, n_slots, constants, n_const_views, written_from, inputs_written) -> Program
PyObject *make(PyObject *, PyObject *args) {
    PyObject *instrs, *constants, *inputs_written;
    int n_slots, n_views;
    long long written_from;
    if (!PyArg_ParseTuple(args, "OiOiLO", &instrs, &n_slots, &constants, &n_views, &written_from, &inputs_written)) {
        return nullptr;
    }
    Program *p = PyObject_New(Program, &ProgramType);
    if (p == nullptr) {
        return nullptr;
    }
    p->code = new std::vector<Instr>();
    p->constants = new std::vector<PyObject *>();
    p->views = new std::vector<ConstView>(static_cast<size_t>(n_views) + 1);
    p->views_lock = new std::mutex();
    p->n_slots = n_slots;
    p->written_from = written_from;
    Py_INCREF(inputs_written);
    p->inputs_written = inputs_written;
    p->weakrefs = nullptr;
    PyObject *self = reinterpret_cast<PyObject *>(p);
    try {
        PyObject *seq = PySequence_Fast(constants, "constants are a sequence");
        if (seq == nullptr) {
            raise_python();
        }
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
            PyObject *c = PySequence_Fast_GET_ITEM(seq, i);
            if (!THPVariable_Check(c)) {
                Py_DECREF(seq);
                PyErr_SetString(PyExc_TypeError, "ember native runner: a constant is not a tensor");
                raise_python();
            }
            Py_INCREF(c);
            p->constants->push_back(c);
        }
        Py_DECREF(seq);
        seq = PySequence_Fast(instrs, "instructions are a sequence");
        if (seq == nullptr) {
            raise_python();
        }
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
            try {
                p->code->push_back(parse_instr(PySequence_Fast_GET_ITEM(seq, i)));
            } catch (...) {
                Py_DECREF(seq);
                throw;
            }
        }
        Py_DECREF(seq);
    } catch (...) {
        Py_DECREF(self);
        torch::translate_exception_to_python(std::current_exception());
        return nullptr;
    }
    return self;
}

PyMethodDef methods[] = {
    {"make", make, METH_VARARGS,
     "make(instructions, n_slots, constants, n_const_views, written_from, inputs_written) -> program"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, EMBER_MODULE_NAME, nullptr, -1, methods,
                          nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC EMBER_PYINIT(void) {
    ProgramType.tp_name = "ember_inductor_runner.Program";
    ProgramType.tp_basicsize = sizeof(Program);
    ProgramType.tp_flags = Py_TPFLAGS_DEFAULT;
    ProgramType.tp_call = program_call;
    ProgramType.tp_dealloc = program_dealloc;
    ProgramType.tp_weaklistoffset = offsetof(Program, weakrefs);
    ProgramType.tp_doc = "a compiled graph's wrapper, run natively";
    if (PyType_Ready(&ProgramType) < 0) {
        return nullptr;
    }
    PyObject *m = PyModule_Create(&module_def);
    if (m == nullptr) {
        return nullptr;
    }
    Py_INCREF(&ProgramType);
    PyModule_AddObject(m, "Program", reinterpret_cast<PyObject *>(&ProgramType));
    return m;
}
