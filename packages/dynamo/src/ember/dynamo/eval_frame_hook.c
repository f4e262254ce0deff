/* PEP 523 frame hook for ember.dynamo (CPython 3.11, 3.12, 3.13).
 *
 * While a callback is installed, every call of a Python function whose code
 * is not marked "skip" asks the callback first:
 *
 *     callback(func, bound_args) -> runner | SKIP
 *
 * bound_args is a tuple of the frame's argument slots after Python bound
 * them (positional, keyword-only, *args tuple, **kwargs dict; defaults
 * applied). ``runner()`` is called and its result returned to the caller
 * in place of running the frame; SKIP runs the frame as usual. While the
 * callback itself runs, no frame is intercepted. Generators, coroutines,
 * class bodies and module code always run as usual.
 *
 * What differs per version is kept to the macros below: where the frame
 * keeps its code and function, and who disposes of a frame the hook does not
 * evaluate. On 3.11 the caller (_PyEval_Vector) clears and pops it after the
 * eval function returns. From 3.12 the eval function owns it (the default
 * one clears and pops the frame when it returns), so discard_frame() does
 * that for a frame replaced by a runner: the frame never ran, so it holds
 * only its locals (the bound arguments), its function and its code, and it
 * was never linked into the thread's frame chain.
 *
 * Built at runtime by frame_hook.py with the system C compiler.
 */
#define PY_SSIZE_T_CLEAN
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error "ember's frame hook supports CPython 3.11 to 3.13"
#endif

#if PY_VERSION_HEX >= 0x030D0000
#define FRAME_CODE(f) ((PyCodeObject *)(f)->f_executable)
#define FRAME_FUNC(f) ((f)->f_funcobj)
#elif PY_VERSION_HEX >= 0x030C0000
#define FRAME_CODE(f) ((f)->f_code)
#define FRAME_FUNC(f) ((f)->f_funcobj)
#else
#define FRAME_CODE(f) ((f)->f_code)
#define FRAME_FUNC(f) ((PyObject *)(f)->f_func)
#endif

#if PY_VERSION_HEX >= 0x030C0000
#define EVAL_FUNCTION_OWNS_FRAME 1

#if PY_VERSION_HEX < 0x030D0000
/* _PyThreadState_PopFrame, which 3.12 does not export (3.13 does). */
static void
pop_frame(PyThreadState *tstate, struct _PyInterpreterFrame *frame)
{
    PyObject **base = (PyObject **)frame;
    _PyStackChunk *chunk = tstate->datastack_chunk;
    if (base == &chunk->data[0]) {
        /* the frame opened this chunk: free it (CPython never pops the root chunk) */
        _PyStackChunk *previous = chunk->previous;
        tstate->datastack_top = &previous->data[previous->top];
        tstate->datastack_chunk = previous;
        tstate->datastack_limit = (PyObject **)(((char *)previous) + previous->size);
        PyObjectArenaAllocator arena;
        PyObject_GetArenaAllocator(&arena);  /* what allocated the chunk */
        arena.free(arena.ctx, chunk, chunk->size);
    }
    else {
        tstate->datastack_top = base;
    }
}
#else
#define pop_frame _PyThreadState_PopFrame
#endif

static void
discard_frame(PyThreadState *tstate, struct _PyInterpreterFrame *frame)
{
    PyCodeObject *code = FRAME_CODE(frame);
    for (int i = 0; i < frame->stacktop; i++) {
        Py_CLEAR(frame->localsplus[i]);
    }
    frame->stacktop = 0;
    Py_CLEAR(frame->f_locals);
    Py_DECREF(frame->f_funcobj);
    Py_DECREF(code);
    pop_frame(tstate, frame);
}
#else
#define EVAL_FUNCTION_OWNS_FRAME 0
#endif

static PyObject *callback = NULL;   /* strong reference, or NULL when off */
static PyObject *skip_sentinel = NULL;
static Py_ssize_t extra_index = -1;
static _PyFrameEvalFunction previous_eval = NULL;
static int in_callback = 0;             /* 1 while the callback decides */

#define SKIP_MARK ((void *)1)
#define UNCAPTURED_FLAGS (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)

static void free_extra(void *extra) { (void)extra; /* a mark, not a pointer */ }

static PyObject *
ember_eval_frame(PyThreadState *tstate, struct _PyInterpreterFrame *frame, int throwflag)
{
    PyObject *cb = callback;
    PyCodeObject *code = FRAME_CODE(frame);
    if (cb == NULL || in_callback || throwflag || FRAME_FUNC(frame) == NULL
        || frame->frame_obj != NULL || !PyCode_Check(code)
        || !(code->co_flags & CO_OPTIMIZED) || (code->co_flags & UNCAPTURED_FLAGS)) {
        return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
    }
    void *extra = NULL;
    if (_PyCode_GetExtra((PyObject *)code, extra_index, &extra) < 0) {
        PyErr_Clear();
        extra = NULL;
    }
    if (extra == SKIP_MARK) {
        return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
    }
    int nargs = code->co_argcount + code->co_kwonlyargcount
        + ((code->co_flags & CO_VARARGS) ? 1 : 0)
        + ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
    PyObject *args = PyTuple_New(nargs);
    if (args == NULL) {
#if EVAL_FUNCTION_OWNS_FRAME
        discard_frame(tstate, frame);
#endif
        return NULL;
    }
    for (int i = 0; i < nargs; i++) {
        PyObject *value = frame->localsplus[i];
        if (value == NULL) {  /* cannot happen after binding; be safe */
            value = Py_None;
        }
        Py_INCREF(value);
        PyTuple_SET_ITEM(args, i, value);
    }
    /* Deciding (cache lookup, capture, the backend compile) runs with the hook
     * off; running what was decided runs with it on, so frames the transformed
     * code calls (resume functions, callees at graph breaks) are captured too. */
    PyObject *func = FRAME_FUNC(frame);
    Py_INCREF(cb);
    Py_INCREF(func);
    in_callback = 1;
    PyObject *runner = PyObject_CallFunctionObjArgs(cb, func, args, NULL);
    in_callback = 0;
    Py_DECREF(func);
    Py_DECREF(cb);
    Py_DECREF(args);
    if (runner == skip_sentinel) {
        Py_DECREF(runner);
        return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
    }
#if EVAL_FUNCTION_OWNS_FRAME
    discard_frame(tstate, frame);
#endif
    if (runner == NULL) {
        return NULL;  /* the exception propagates to the caller */
    }
    PyObject *result = PyObject_CallNoArgs(runner);
    Py_DECREF(runner);
    return result;
}

static PyObject *
set_callback(PyObject *self, PyObject *arg)
{
    (void)self;
    PyObject *old = callback;
    PyInterpreterState *interp = PyThreadState_GET()->interp;
    if (arg == Py_None) {
        callback = NULL;
        _PyInterpreterState_SetEvalFrameFunc(interp, previous_eval);
    } else {
        if (!PyCallable_Check(arg)) {
            PyErr_SetString(PyExc_TypeError, "set_callback expects a callable or None");
            return NULL;
        }
        Py_INCREF(arg);
        callback = arg;
        _PyInterpreterState_SetEvalFrameFunc(interp, ember_eval_frame);
    }
    if (old == NULL) {
        Py_RETURN_NONE;
    }
    return old;  /* the reference we held becomes the caller's */
}

static PyObject *
get_callback(PyObject *self, PyObject *unused)
{
    (void)self; (void)unused;
    if (callback == NULL) {
        Py_RETURN_NONE;
    }
    Py_INCREF(callback);
    return callback;
}

static PyObject *
mark_skip(PyObject *self, PyObject *code)
{
    (void)self;
    if (!PyCode_Check(code)) {
        PyErr_SetString(PyExc_TypeError, "mark_skip expects a code object");
        return NULL;
    }
    if (_PyCode_SetExtra(code, extra_index, SKIP_MARK) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
is_skipped(PyObject *self, PyObject *code)
{
    (void)self;
    if (!PyCode_Check(code)) {
        PyErr_SetString(PyExc_TypeError, "is_skipped expects a code object");
        return NULL;
    }
    void *extra = NULL;
    if (_PyCode_GetExtra(code, extra_index, &extra) < 0) {
        return NULL;
    }
    return PyBool_FromLong(extra == SKIP_MARK);
}

static PyMethodDef methods[] = {
    {"set_callback", set_callback, METH_O, "Install (callable) or remove (None) the hook; returns the previous callback."},
    {"get_callback", get_callback, METH_NOARGS, "The installed callback, or None."},
    {"mark_skip", mark_skip, METH_O, "Never ask the callback about frames of this code object."},
    {"is_skipped", is_skipped, METH_O, "Whether mark_skip was applied to this code object."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ember_eval_frame_hook", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit_ember_eval_frame_hook(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    extra_index = _PyEval_RequestCodeExtraIndex(free_extra);
    if (extra_index < 0) {
        Py_DECREF(m);
        PyErr_SetString(PyExc_RuntimeError, "no code-object extra slot left for ember's frame hook");
        return NULL;
    }
    previous_eval = _PyInterpreterState_GetEvalFrameFunc(PyThreadState_GET()->interp);
    skip_sentinel = PyObject_CallObject((PyObject *)&PyBaseObject_Type, NULL);
    if (skip_sentinel == NULL || PyModule_AddObjectRef(m, "SKIP", skip_sentinel) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
