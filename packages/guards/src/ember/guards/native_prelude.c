/* ember.guards native check: the fixed part of every generated guard module.
 *
 * The generated part (native.py) defines NS, NO, NI, S_TEXT and the body
 *     static int body(Checker *self, PyObject *L, PyObject *G)
 * returning 1 (every guard holds), 0 (one fails, or reading a value raised an
 * Exception, as the Python check's ``except Exception: return False``) or -1 (a
 * BaseException that is not an Exception, such as KeyboardInterrupt, propagates).
 *
 * The helpers below do what the Python check's expressions do, through the same
 * C API calls the interpreter makes for them (PyObject_GetAttr for ``v.x``,
 * PyObject_RichCompare + PyObject_IsTrue for ``==`` inside ``and``), so the verdict
 * is the Python check's. Process-specific values (object ids, classes, constants)
 * are never in the source: they come from make()'s arguments (the module is cached
 * on disk keyed by its source).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stddef.h>

/* A class whose attribute reads ``config_attr`` may do in C: its version tag when checked
 * (one per read site and check object: a check verifies against its own layers) */
typedef struct {
    PyTypeObject *tp;
    unsigned int tag;
} ClassCache;

/* What one module's attribute reads (``module_attr``, ``module_item``) returned, and the
 * state they were read in: the module's class and its version tag, its instance dict and
 * the holder dicts (``_parameters``, ``_buffers``, ``_modules``) with their version tags
 * (ADR 0062). While every tag is unchanged the reads return the same objects, so they are
 * served from here. Pointers are borrowed: a dict with an unchanged tag still holds them. */
#define MC_HOLDERS 3
typedef struct {
    int state;          /* 0: nothing recorded, 1: recorded, -1: given up */
    PyTypeObject *tp;
    unsigned int tp_tag;
    PyObject *dict;
    uint64_t dict_tag;
    PyObject *holder[MC_HOLDERS];
    uint64_t holder_tag[MC_HOLDERS];
    uint32_t hits, misses, fails;
} ModuleCache;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *objs;     /* tuple: the constants O[k] */
    PyObject *flags;    /* dict holding "_dead", or NULL */
    PyObject *dead_key;
    uintptr_t *ids;
    int (*tm)(PyObject *, const int64_t *);  /* native_tensor.cpp's match, or NULL */
    ClassCache *cc;     /* NC slots (config_attr) */
    ModuleCache *mc;    /* NM groups (module reads) */
    PyObject **mv;      /* NMV values, the groups' reads in order */
    int (*sp)(PyObject *, uintptr_t *);  /* native_tensor.cpp's storage_ptr, or NULL */
} Checker;

static PyObject *S[NS > 0 ? NS : 1];

/* d[k] as Python's ``d[k]``: an exact dict without calling __getitem__ */
static __attribute__((noinline)) PyObject *
get_key(PyObject *d, PyObject *k)
{
    if (PyDict_CheckExact(d)) {
        PyObject *r = PyDict_GetItemWithError(d, k);
        if (r != NULL) {
            Py_INCREF(r);
            return r;
        }
        if (!PyErr_Occurred()) {
            PyErr_SetObject(PyExc_KeyError, k);
        }
        return NULL;
    }
    return PyObject_GetItem(d, k);
}

/* ``dict.__getitem__(d, k)`` (getitem is that slot wrapper) */
static __attribute__((noinline)) PyObject *
dict_item(PyObject *d, PyObject *k, PyObject *getitem)
{
    if (PyDict_CheckExact(d)) {
        return get_key(d, k);
    }
    PyObject *args[2] = {d, k};
    return PyObject_Vectorcall(getitem, args, 2, NULL);
}

/* ``list(dict.keys(d))[i]`` / ``list(dict.values(d))[i]`` (value != 0): the entry at a
   position of a dict's own order, without building the list */
static __attribute__((noinline)) PyObject *
dict_entry(PyObject *d, Py_ssize_t i, int value)
{
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "a dict entry read from an object that is not a dict");
        return NULL;
    }
    Py_ssize_t pos = 0, n = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v)) {
        if (n++ == i) {
            PyObject *r = value ? v : k;
            Py_INCREF(r);
            return r;
        }
    }
    PyErr_SetString(PyExc_IndexError, "list index out of range");
    return NULL;
}

/* ``v.size()[d]`` / ``v.stride()[d]`` */
static __attribute__((noinline)) PyObject *
dim_of(PyObject *v, PyObject *method, PyObject *d)
{
    PyObject *all = PyObject_CallMethodNoArgs(v, method);
    if (all == NULL) {
        return NULL;
    }
    PyObject *r = PyObject_GetItem(all, d);
    Py_DECREF(all);
    return r;
}

/* ``(v.<dict>[m] if m not in v.__dict__ else v.m)`` (reads.py) */
static __attribute__((noinline)) PyObject *
module_attr(PyObject *v, PyObject *dict_name, PyObject *m, PyObject *dict_attr)
{
    PyObject *d = PyObject_GetAttr(v, dict_attr);
    if (d == NULL) {
        return NULL;
    }
    int in = PySequence_Contains(d, m);
    Py_DECREF(d);
    if (in < 0) {
        return NULL;
    }
    if (in) {
        return PyObject_GetAttr(v, m);
    }
    PyObject *holder = PyObject_GetAttr(v, dict_name);
    if (holder == NULL) {
        return NULL;
    }
    PyObject *r = get_key(holder, m);
    Py_DECREF(holder);
    return r;
}

/* -- module reads served while nothing changed (ADR 0062) -------------------------------
 *
 * A group is one module's ``module_attr``/``module_item`` reads in a check. ``module_hit``
 * says whether the module is in the state recorded by ``module_learn``: then each read
 * returns what it returned then. Version tags: CPython gives a dict a new
 * ``ma_version_tag`` (from one process-wide counter) when it is created and on every change
 * of its contents, and a class a new ``tp_version_tag`` on any change of it or its bases; a
 * (pointer, tag) pair therefore names one state of one object for the process's lifetime.
 * 3.13 stores instance attributes in inline values that a materialized ``__dict__`` shares;
 * whether every store there renews the dict's tag is not established, so there the reads
 * are made as before. */
#if PY_VERSION_HEX < 0x030D0000 && defined(Py_TPFLAGS_VALID_VERSION_TAG)
#define EMBER_MODULE_CACHE 1
#endif

#ifdef EMBER_MODULE_CACHE
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
static inline uint64_t
dict_tag(PyObject *d)
{
    return ((PyDictObject *)d)->ma_version_tag;
}
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

static int
type_tag_ok(PyTypeObject *tp)
{
    return (tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) && tp->tp_version_tag != 0;
}
#endif

/* 1: ``v`` is in the recorded state (its reads are ``values``), 0: read as usual */
static inline int
module_hit(ModuleCache *c, PyObject *v, int count)
{
#ifdef EMBER_MODULE_CACHE
    if (c->state != 1) {
        return 0;
    }
    PyTypeObject *tp = Py_TYPE(v);
    if (tp != c->tp || tp->tp_version_tag != c->tp_tag || !type_tag_ok(tp)) {
        goto miss;
    }
    PyObject **dp = _PyObject_GetDictPtr(v);
    if (dp == NULL || *dp != c->dict || dict_tag(c->dict) != c->dict_tag) {
        if (PyErr_Occurred()) {
            PyErr_Clear();
        }
        goto miss;
    }
    /* the instance dict is unchanged, so it still holds the holders */
    for (int h = 0; h < MC_HOLDERS; h++) {
        if (c->holder[h] != NULL && dict_tag(c->holder[h]) != c->holder_tag[h]) {
            goto miss;
        }
    }
    c->hits += (uint32_t)count;
    return 1;
miss:
    c->misses += (uint32_t)count;
    return 0;
#else
    (void)c;
    (void)v;
    (void)count;
    return 0;
#endif
}

#ifdef EMBER_MODULE_CACHE
/* every key of the exact dict ``d`` is an exact str: a lookup by str runs no Python code */
static int
str_keyed(PyObject *d)
{
    Py_ssize_t pos = 0;
    PyObject *k, *x;
    while (PyDict_Next(d, &pos, &k, &x)) {
        if (!PyUnicode_CheckExact(k)) {
            return 0;
        }
    }
    return 1;
}
#endif

/* the names ``module_learn`` looks up */
typedef struct {
    PyObject *getattribute, *dict, *holders[MC_HOLDERS];
} ModuleNames;

/* After a check that passed: record ``v``'s state if its reads are plain dict lookups
 * there (the class reads attributes with object.__getattribute__ through a __dict__ getset
 * and has no class attribute named like a holder dict; the instance dict and the holders
 * are exact dicts keyed by exact str), and each read ``j`` (holder ``hold[j]``, name
 * ``names[j]``, ``kinds[j]``: 1 ``module_attr`` (the name not in the instance dict), 0
 * ``module_item``, 2 ``v.name`` held in the instance dict, no holder) gives ``got[j]``, what
 * the check read. Never fails: anything else records nothing. */
static __attribute__((noinline)) void
module_learn(ModuleCache *c, PyObject **values, PyObject *v, int n, const int *hold, PyObject *const *names,
             const char *kinds, PyObject *const *got, const ModuleNames *nm)
{
#ifdef EMBER_MODULE_CACHE
    if (c->state == -1) {
        return;
    }
    if ((c->misses > 64 && c->misses > c->hits / 4) || c->fails >= 4) {
        c->state = -1;  /* it changes between most calls, or cannot be recorded: stop trying */
        return;
    }
    c->state = 0;
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    PyTypeObject *tp = Py_TYPE(v);
    PyObject *holders[MC_HOLDERS] = {NULL, NULL, NULL};
    if (!(tp->tp_flags & Py_TPFLAGS_HEAPTYPE) && tp->tp_getattro != PyObject_GenericGetAttr) {
        goto out;
    }
    PyObject *base_ga = _PyType_Lookup(&PyBaseObject_Type, nm->getattribute);
    if (base_ga == NULL || _PyType_Lookup(tp, nm->getattribute) != base_ga) {
        goto out;
    }
    PyObject *dd = _PyType_Lookup(tp, nm->dict);
    if (dd == NULL || !Py_IS_TYPE(dd, &PyGetSetDescr_Type)) {
        goto out;
    }
    for (int h = 0; h < MC_HOLDERS; h++) {
        if (_PyType_Lookup(tp, nm->holders[h]) != NULL) {
            goto out;
        }
    }
    if (!type_tag_ok(tp)) {
        goto out;
    }
    PyObject **dp = _PyObject_GetDictPtr(v);
    if (dp == NULL || *dp == NULL || !PyDict_CheckExact(*dp)) {
        goto out;
    }
    PyObject *d = *dp;
    PyObject *seen = PyObject_GetAttr(v, nm->dict);  /* what ``v.__dict__`` gives: that dict */
    if (seen == NULL) {
        goto out;
    }
    Py_DECREF(seen);
    if (seen != d || !str_keyed(d)) {
        goto out;
    }
    for (int j = 0; j < n; j++) {
        int h = hold[j];
        if (kinds[j] == 2) {
            /* ``v.name`` with no class attribute of that name: the instance dict's entry */
            if (_PyType_Lookup(tp, names[j]) != NULL) {
                goto out;
            }
            PyObject *x = PyDict_GetItemWithError(d, names[j]);
            if (x == NULL || x != got[j]) {
                goto out;
            }
            values[j] = x;
            continue;
        }
        if (holders[h] == NULL) {
            PyObject *x = PyDict_GetItemWithError(d, nm->holders[h]);
            if (x == NULL || !PyDict_CheckExact(x) || !str_keyed(x)) {
                goto out;
            }
            holders[h] = x;
        }
        if (kinds[j] == 1) {
            int in = PyDict_Contains(d, names[j]);
            if (in != 0) {
                goto out;
            }
        }
        PyObject *x = PyDict_GetItemWithError(holders[h], names[j]);
        if (x == NULL || x != got[j]) {
            goto out;
        }
        values[j] = x;
    }
    c->tp = tp;
    c->tp_tag = tp->tp_version_tag;
    c->dict = d;
    c->dict_tag = dict_tag(d);
    for (int h = 0; h < MC_HOLDERS; h++) {
        c->holder[h] = holders[h];
        c->holder_tag[h] = holders[h] != NULL ? dict_tag(holders[h]) : 0;
    }
    c->state = 1;
out:
    if (c->state != 1) {
        c->fails++;
    }
    if (PyErr_Occurred()) {
        PyErr_Clear();
    }
    PyErr_Restore(exc_type, exc_value, exc_tb);
#else
    (void)c; (void)values; (void)v; (void)n; (void)hold; (void)names; (void)kinds; (void)got; (void)nm;
#endif
}

/* the names ``config_attr`` reads */
typedef struct {
    PyObject *map, *dict, *spec, *get, *getattribute, *getattr_, *super_;
} ConfigNames;

/* each layer ``(kind, fn, code, owner)`` (reads.py ``config_layers``) still runs the code it
 * was recognised by, its ``super()`` cell still names its class, and ``super`` is the builtin */
static __attribute__((noinline)) int
config_layers_ok(PyObject *layers, const ConfigNames *nm)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(layers); i++) {
        PyObject *layer = PyTuple_GET_ITEM(layers, i);
        PyObject *fn = PyTuple_GET_ITEM(layer, 1);
        if (!PyFunction_Check(fn) || PyFunction_GET_CODE(fn) != PyTuple_GET_ITEM(layer, 2)) {
            return 0;
        }
        PyObject *closure = PyFunction_GET_CLOSURE(fn);
        if (closure == NULL || !PyTuple_Check(closure) || PyTuple_GET_SIZE(closure) != 1
            || PyCell_GET(PyTuple_GET_ITEM(closure, 0)) != PyTuple_GET_ITEM(layer, 3)) {
            return 0;
        }
        /* ``super`` is the builtin: not a global of the function's module, super in its builtins */
        PyObject *globals = PyFunction_GET_GLOBALS(fn);
        PyObject *builtins = ((PyFunctionObject *)fn)->func_builtins;
        if (!PyDict_CheckExact(globals) || PyDict_GetItemWithError(globals, nm->super_) != NULL
            || builtins == NULL || !PyDict_CheckExact(builtins)
            || PyDict_GetItemWithError(builtins, nm->super_) != (PyObject *)&PySuper_Type) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

/* whether ``v.x`` on a ``tp`` instance calls exactly the layers' functions, in order: the
 * slot the interpreter calls is a class statement's, no class has __getattr__, and walking
 * the MRO the classes defining __getattribute__ are the layers' owners with their
 * functions, then ``object`` (what the last ``super()`` calls) */
static __attribute__((noinline)) int
config_class_ok(PyTypeObject *tp, PyObject *layers, const ConfigNames *nm)
{
    Py_ssize_t n = PyTuple_GET_SIZE(layers), j = 0;
    /* a class statement's class reads attributes through the slot that calls the
     * __getattribute__ its MRO finds (slot_tp_getattr_hook, which turns itself into
     * slot_tp_getattro per class on first use: so the pointer is not compared) */
    if (!(tp->tp_flags & Py_TPFLAGS_HEAPTYPE) || tp->tp_getattro == PyObject_GenericGetAttr) {
        return 0;
    }
    if (_PyType_Lookup(tp, nm->getattr_) != NULL) {
        return 0;
    }
    PyObject *mro = tp->tp_mro;
    if (mro == NULL || !PyTuple_Check(mro)) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *k = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (k == &PyBaseObject_Type) {
            break;
        }
#if PY_VERSION_HEX >= 0x030C0000
        PyObject *d = PyType_GetDict(k);
#else
        PyObject *d = k->tp_dict;
        Py_XINCREF(d);
#endif
        if (d == NULL) {
            PyErr_Clear();
            return 0;
        }
        PyObject *f = PyDict_GetItemWithError(d, nm->getattribute);
        Py_DECREF(d);
        if (f == NULL) {
            if (PyErr_Occurred()) {
                PyErr_Clear();
                return 0;
            }
            continue;
        }
        if (j >= n) {
            return 0;
        }
        PyObject *layer = PyTuple_GET_ITEM(layers, j++);
        if (f != PyTuple_GET_ITEM(layer, 1) || (PyObject *)k != PyTuple_GET_ITEM(layer, 3)) {
            return 0;
        }
    }
    return j == n && tp->tp_version_tag != 0;
}

/* ``super().__getattribute__(key)`` from layer ``i - 1``: layer ``i``'s code, in C */
static PyObject *
config_get(PyObject *v, PyObject *key, PyObject *layers, Py_ssize_t i, const ConfigNames *nm)
{
    if (i == PyTuple_GET_SIZE(layers)) {
        return PyObject_GenericGetAttr(v, key);  /* object.__getattribute__ */
    }
    PyObject *layer = PyTuple_GET_ITEM(layers, i);
    if (PyLong_AsLong(PyTuple_GET_ITEM(layer, 0)) == 0) {
        /* if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
         *     key = super().__getattribute__("attribute_map")[key]
         * return super().__getattribute__(key) */
        PyObject *ne = PyObject_RichCompare(key, nm->map, Py_NE);
        if (ne == NULL) {
            return NULL;
        }
        int t = PyObject_IsTrue(ne);
        Py_DECREF(ne);
        if (t < 0) {
            return NULL;
        }
        Py_INCREF(key);
        if (t) {
            PyObject *m = config_get(v, nm->map, layers, i + 1, nm);
            if (m == NULL) {
                Py_DECREF(key);
                return NULL;
            }
            int in = PySequence_Contains(m, key);
            Py_DECREF(m);
            if (in < 0) {
                Py_DECREF(key);
                return NULL;
            }
            if (in) {
                m = config_get(v, nm->map, layers, i + 1, nm);
                if (m == NULL) {
                    Py_DECREF(key);
                    return NULL;
                }
                PyObject *mapped = PyObject_GetItem(m, key);
                Py_DECREF(m);
                Py_DECREF(key);
                if (mapped == NULL) {
                    return NULL;
                }
                key = mapped;
            }
        }
        PyObject *r = config_get(v, key, layers, i + 1, nm);
        Py_DECREF(key);
        return r;
    }
    /* heterogeneity_spec = super().__getattribute__("__dict__").get("_heterogeneity_spec")
     * if heterogeneity_spec is not None: ... (the function itself runs that part)
     * return super().__getattribute__(key) */
    PyObject *d = config_get(v, nm->dict, layers, i + 1, nm);
    if (d == NULL) {
        return NULL;
    }
    PyObject *spec;
    if (PyDict_CheckExact(d)) {
        spec = PyDict_GetItemWithError(d, nm->spec);
        if (spec == NULL && PyErr_Occurred()) {
            Py_DECREF(d);
            return NULL;
        }
        spec = spec != NULL ? spec : Py_None;
        Py_INCREF(spec);
    }
    else {
        spec = PyObject_CallMethodOneArg(d, nm->get, nm->spec);
    }
    Py_DECREF(d);
    if (spec == NULL) {
        return NULL;
    }
    int none = spec == Py_None;
    Py_DECREF(spec);
    if (!none) {
        PyObject *args[2] = {v, key};
        return PyObject_Vectorcall(PyTuple_GET_ITEM(layer, 1), args, 2, NULL);
    }
    return config_get(v, key, layers, i + 1, nm);
}

/* ``v.name`` where ``type(v)``'s __getattribute__ chain is ``layers`` (transformers' config
 * classes, reads.py ``config_layers``): the same lookups in C instead of the Python calls;
 * where the class or a function changed, ``v.name`` as the interpreter reads it */
static __attribute__((noinline)) PyObject *
config_attr(PyObject *v, PyObject *name, PyObject *layers, ClassCache *cache, PyObject *map, PyObject *dict,
            PyObject *spec, PyObject *get, PyObject *getattribute, PyObject *getattr_, PyObject *super_)
{
    ConfigNames nm = {map, dict, spec, get, getattribute, getattr_, super_};
    PyTypeObject *tp = Py_TYPE(v);
    if (!config_layers_ok(layers, &nm)) {
        return PyObject_GetAttr(v, name);
    }
    if (cache->tp != tp || cache->tag != tp->tp_version_tag || tp->tp_version_tag == 0) {
        if (!config_class_ok(tp, layers, &nm)) {
            return PyObject_GetAttr(v, name);
        }
        cache->tp = tp;
        cache->tag = tp->tp_version_tag;
    }
    return config_get(v, name, layers, 0, &nm);
}

/* ``v._modules[key]`` */
static __attribute__((noinline)) PyObject *
module_item(PyObject *v, PyObject *key, PyObject *modules)
{
    PyObject *holder = PyObject_GetAttr(v, modules);
    if (holder == NULL) {
        return NULL;
    }
    PyObject *r = get_key(holder, key);
    Py_DECREF(holder);
    return r;
}

/* truth of ``a == b`` (1, 0, -1 on error); steals nothing */
static __attribute__((noinline)) int
eq(PyObject *a, PyObject *b)
{
    PyObject *r = PyObject_RichCompare(a, b, Py_EQ);
    if (r == NULL) {
        return -1;
    }
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

/* the result ``r`` (a new reference, or NULL) compared: identity with ``want`` */
static __attribute__((noinline)) int
is_obj(PyObject *r, PyObject *want)
{
    if (r == NULL) {
        return -1;
    }
    int t = r == want;
    Py_DECREF(r);
    return t;
}

/* the result ``r`` (a new reference, or NULL): truth of ``r == want`` */
static __attribute__((noinline)) int
eq_obj(PyObject *r, PyObject *want)
{
    if (r == NULL) {
        return -1;
    }
    int t = eq(r, want);
    Py_DECREF(r);
    return t;
}

/* ``type(v) is T and v == C`` */
static __attribute__((noinline)) int
eq_typed(PyObject *v, PyObject *type, PyObject *want)
{
    if ((PyObject *)Py_TYPE(v) != type) {
        return 0;
    }
    return eq(v, want);
}

/* ``len(v) == n`` */
static __attribute__((noinline)) int
len_is(PyObject *v, Py_ssize_t n)
{
    Py_ssize_t got = PyObject_Length(v);
    if (got < 0 && PyErr_Occurred()) {
        return -1;
    }
    return got == n;
}

/* ``list(v.keys()) == want`` (want: a list nobody changes) */
static __attribute__((noinline)) int
keys_are(PyObject *v, PyObject *want, PyObject *keys_name)
{
    PyObject *list;
    if (PyDict_CheckExact(v)) {
        /* the list compare without the list: lengths, then items in order; exact str keys
         * compare without running Python code (anything else takes the list path below) */
        if (PyDict_GET_SIZE(v) != PyList_GET_SIZE(want)) {
            return 0;
        }
        Py_ssize_t pos = 0, i = 0;
        PyObject *k, *value;
        int simple = 1;
        while (PyDict_Next(v, &pos, &k, &value)) {
            PyObject *w = PyList_GET_ITEM(want, i++);
            if (k == w) {
                continue;
            }
            if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(w)) {
                simple = 0;
                break;
            }
            int same = PyObject_RichCompareBool(k, w, Py_EQ);
            if (same <= 0) {
                return same;
            }
        }
        if (simple) {
            return 1;
        }
        list = PyDict_Keys(v);
    }
    else {
        PyObject *view = PyObject_CallMethodNoArgs(v, keys_name);
        if (view == NULL) {
            return -1;
        }
        list = PySequence_List(view);
        Py_DECREF(view);
    }
    return eq_obj(list, want);
}

/* ``v.name(*args)``: args is a tuple */
static __attribute__((noinline)) PyObject *
call_method(PyObject *v, PyObject *name, PyObject *args)
{
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *stack[8];
    if (n > 7) {
        PyObject *m = PyObject_GetAttr(v, name);
        if (m == NULL) {
            return NULL;
        }
        PyObject *r = PyObject_Call(m, args, NULL);
        Py_DECREF(m);
        return r;
    }
    stack[0] = v;
    for (Py_ssize_t i = 0; i < n; i++) {
        stack[i + 1] = PyTuple_GET_ITEM(args, i);
    }
    return PyObject_VectorcallMethod(name, stack, (size_t)(n + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* ``fn(*args)``: args is a tuple */
static __attribute__((noinline)) PyObject *
call_fn(PyObject *fn, PyObject *args)
{
    return PyObject_Call(fn, args, NULL);
}

/* truth of ``not fn()`` */
static __attribute__((noinline)) int
call_not(PyObject *fn)
{
    PyObject *r = PyObject_CallNoArgs(fn);
    if (r == NULL) {
        return -1;
    }
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t < 0 ? -1 : !t;
}

/* ``str(fn(v)) == text`` */
static __attribute__((noinline)) int
fn_str_eq(PyObject *fn, PyObject *v, PyObject *text)
{
    PyObject *r = PyObject_CallOneArg(fn, v);
    if (r == NULL) {
        return -1;
    }
    PyObject *s = PyObject_Str(r);
    Py_DECREF(r);
    return eq_obj(s, text);
}

/* a Python leaf: ``bool(pred(*values))`` */
static __attribute__((noinline)) int
leaf(PyObject *pred, PyObject *const *args, size_t n)
{
    PyObject *r = PyObject_Vectorcall(pred, args, n, NULL);
    if (r == NULL) {
        return -1;
    }
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

static int
cmp_uintptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* how many of the sorted ``n`` pointers are ``p`` */
static Py_ssize_t
count_of(const uintptr_t *sorted, Py_ssize_t n, uintptr_t p)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (sorted[mid] < p) {
            lo = mid + 1;
        }
        else {
            hi = mid;
        }
    }
    Py_ssize_t k = 0;
    while (lo + k < n && sorted[lo + k] == p) {
        k++;
    }
    return k;
}

/* ``no_written_alias(written, *vals)`` (builder.py): no value at a written position that is
 * a tensor (``isinstance``) shares its storage (``untyped_storage().data_ptr()``, not 0)
 * with another tensor of ``vals``. Storage pointers come from the TensorImpl where
 * ``storage_ptr`` answers, else from the two method calls. */
static __attribute__((noinline)) int
no_alias(Checker *self, PyObject *const *vals, Py_ssize_t n, const int *written, Py_ssize_t nw,
         PyObject *tensor_type, PyObject *s_storage, PyObject *s_data_ptr)
{
    uintptr_t ptr_stack[32], sorted_stack[32];
    char has_stack[32];
    uintptr_t *ptr = n <= 32 ? ptr_stack : PyMem_Malloc(sizeof(uintptr_t) * n);
    uintptr_t *sorted = n <= 32 ? sorted_stack : PyMem_Malloc(sizeof(uintptr_t) * n);
    char *has = n <= 32 ? has_stack : PyMem_Malloc(n);
    int r = 1;
    Py_ssize_t ns = 0;
    if (ptr == NULL || sorted == NULL || has == NULL) {
        PyErr_NoMemory();
        r = -1;
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = vals[i];
        int is = PyObject_IsInstance(v, tensor_type);
        if (is < 0) {
            r = -1;
            goto out;
        }
        has[i] = (char)is;
        if (!is) {
            continue;
        }
        int got = self->sp != NULL ? self->sp(v, &ptr[i]) : -2;
        if (got != 1) {
            PyObject *st = PyObject_CallMethodNoArgs(v, s_storage);
            if (st == NULL) {
                r = -1;
                goto out;
            }
            PyObject *p = PyObject_CallMethodNoArgs(st, s_data_ptr);
            Py_DECREF(st);
            if (p == NULL) {
                r = -1;
                goto out;
            }
            ptr[i] = (uintptr_t)PyLong_AsVoidPtr(p);
            Py_DECREF(p);
            if (PyErr_Occurred()) {
                r = -1;
                goto out;
            }
        }
        sorted[ns++] = ptr[i];
    }
    qsort(sorted, (size_t)ns, sizeof(uintptr_t), cmp_uintptr);
    for (Py_ssize_t k = 0; k < nw; k++) {
        Py_ssize_t w = written[k];
        if (has[w] && ptr[w] != 0 && count_of(sorted, ns, ptr[w]) > 1) {
            r = 0;
            break;
        }
    }
out:
    if (n > 32) {
        PyMem_Free(ptr);
        PyMem_Free(sorted);
        PyMem_Free(has);
    }
    return r;
}

/* a TENSOR_MATCH read from the TensorImpl: 1, 0, or -2 (take the getters' path) */
#define TENSOR(v, spec) (self->tm != NULL ? self->tm((v), (spec)) : -2)

#define READ(k, x) do { if ((V[k] = (x)) == NULL) goto error; nv = (k) + 1; } while (0)
#define TEST(x) do { int t_ = (x); if (t_ <= 0) { if (t_ < 0) goto error; goto done; } } while (0)
#define O(k) PyTuple_GET_ITEM(self->objs, k)
#define ID(k) (self->ids[k])
