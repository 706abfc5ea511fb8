/* sluice._sluice: map functions written in Python (tf.py_function's place). A config's
 * `map NAME()` whose NAME the caller registered (sluice.Pipeline(functions=...), or a
 * sluice.data map(python_function)) becomes an sl_fn (sl_fn_custom) whose apply, on one of
 * the map's threads, takes the GIL (PyGILState_Ensure) only for the call: it hands the
 * element's tensors to the callable as sluice.Buffer objects (no copy), calls it, turns the
 * returned tuples into the element's new tensors (shared when they are Sluice's own memory,
 * else copied), and releases the GIL. So N map threads run N calls at most one at a time
 * (the GIL), while the rest of the pipeline runs beside them; the caller of sl_iter_next
 * must not hold the GIL while it waits (sluicemodule.c releases it), or the threads would
 * wait for it forever.
 *
 * An exception in the callable becomes the element's error; the exception itself (with its
 * traceback) is kept in a table under a number written into the message, so that the
 * thread that receives the error in next() can raise sluice.Error from it (__cause__).
 * The table holds at most MAX_PENDING of them (the oldest are dropped: ignore_errors may
 * skip errors no one will raise).
 *
 * Workload: one call per element; the cost is the GIL hand-over and the dict of Buffers
 * (a few microseconds), measured by tests/bench/bench_python.py. */
#include "module_priv.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PENDING 1024
#define MARKER " [python exception #"

static PyObject *pending;     /* dict {int: exception}; the GIL guards it */
static long long pending_seq; /* the GIL guards it */
static PyInterpreterState *interp; /* set once at import */
static pthread_key_t tstate_key;   /* a Sluice thread's Python thread state, kept for its life */
static pthread_once_t tstate_once = PTHREAD_ONCE_INIT;

static int finalizing(void);

/* At a Sluice thread's exit: delete the thread state it kept (not while Python shuts down:
 * it then goes with the interpreter). */
static void tstate_gone(void *p) {
    if (finalizing()) return;
    PyEval_RestoreThread(p);
    PyThreadState_Clear(p);
    PyThreadState_DeleteCurrent();
}

static void tstate_key_make(void) { (void)pthread_key_create(&tstate_key, tstate_gone); }

int sl__py_fn_init(PyObject *module) {
    (void)module;
    interp = PyInterpreterState_Get();
    (void)pthread_once(&tstate_once, tstate_key_make);
    if (!pending) pending = PyDict_New();
    return pending ? 0 : -1;
}

/* PyGILState_Ensure on a thread Python does not know makes a thread state and its Release
 * deletes it again: tens of microseconds per call. So a Sluice thread gets one thread state
 * for its whole life (PyThreadState_New registers it as the thread's, so Ensure and Release
 * only take and drop the GIL), deleted when the thread exits. Called without the GIL. */
static void keep_tstate(void) {
    if (PyGILState_GetThisThreadState()) return; /* the main thread, a Python thread, or kept */
    PyThreadState *ts = PyThreadState_New(interp);
    if (ts && pthread_setspecific(tstate_key, ts) != 0) {
        PyEval_RestoreThread(ts); /* cannot be deleted at exit: do without it */
        PyThreadState_Clear(ts);
        PyThreadState_DeleteCurrent();
    }
}

typedef struct {
    PyObject *call;          /* strong */
    char name[SL_NAME_MAX];
} pyfn;

static int finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return !Py_IsInitialized() || Py_IsFinalizing();
#else
    return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

static void pyfn_free(void *ctx, void *unused) {
    (void)unused;
    pyfn *f = ctx;
    if (!finalizing()) {
        PyGILState_STATE g = PyGILState_Ensure();
        Py_DECREF(f->call);
        PyGILState_Release(g);
    }
    free(f);
}

/* Keep the raised exception and fail with a message naming it. */
static sl_status keep_exception(const pyfn *f) {
    PyObject *type, *val, *tb;
    PyErr_Fetch(&type, &val, &tb);
    PyErr_NormalizeException(&type, &val, &tb);
    if (tb && val) PyException_SetTraceback(val, tb);
    const char *tname = type ? ((PyTypeObject *)type)->tp_name : "an exception";
    const char *dot = strrchr(tname, '.');
    if (dot) tname = dot + 1;
    PyObject *str = val ? PyObject_Str(val) : NULL;
    const char *msg = str ? PyUnicode_AsUTF8(str) : NULL;
    if (!msg) PyErr_Clear();
    long long id = ++pending_seq;
    PyObject *key = PyLong_FromLongLong(id);
    if (key && val && PyDict_SetItem(pending, key, val) == 0) {
        while (PyDict_Size(pending) > MAX_PENDING) { /* dicts keep insertion order: drop the oldest */
            Py_ssize_t pos = 0;
            PyObject *k, *v;
            if (!PyDict_Next(pending, &pos, &k, &v)) break;
            Py_INCREF(k);
            PyDict_DelItem(pending, k);
            Py_DECREF(k);
        }
    } else {
        PyErr_Clear();
        id = -1;
    }
    sl_status s;
    if (id >= 0)
        s = sl_err(SL_EINVAL, "the Python function raised %s%s%s" MARKER "%lld]", tname, msg && msg[0] ? ": " : "",
                   msg ? msg : "", id);
    else
        s = sl_err(SL_EINVAL, "the Python function raised %s%s%s", tname, msg && msg[0] ? ": " : "",
                   msg ? msg : "");
    sl_err_hint("the Python exception, with its traceback, is the __cause__ of the sluice.Error next() raises");
    Py_XDECREF(key);
    Py_XDECREF(str);
    Py_XDECREF(type);
    Py_XDECREF(val);
    Py_XDECREF(tb);
    return s;
}

/* A Python error met while converting the result: the same path as the callable's own. */
static sl_status py_failed(const pyfn *f) { return keep_exception(f); }

/* kind 1: a numeric array (shared when `base` holds its bytes, else copied). */
static sl_status numeric(const pyfn *f, const char *cname, PyObject *obj, PyObject *dtname, PyObject *base,
                         sl_tensor *t) {
    const char *dn = PyUnicode_AsUTF8(dtname);
    if (!dn) return py_failed(f);
    sl_dtype dt = sl_dtype_from_name(dn);
    if (dt == SL_DT_INVALID || dt == SL_DT_BYTES) {
        PyErr_Format(PyExc_TypeError, "component '%s': dtype %s has no Sluice tensor", cname, dn);
        return py_failed(f);
    }
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_C_CONTIGUOUS) < 0) return py_failed(f);
    sl_status s = SL_OK;
    int64_t dims[SL_MAX_RANK];
    if (v.ndim > SL_MAX_RANK) {
        PyBuffer_Release(&v);
        PyErr_Format(PyExc_ValueError, "component '%s' has %d dimensions; Sluice tensors have at most %d", cname,
                     v.ndim, SL_MAX_RANK);
        return py_failed(f);
    }
    int64_t numel = 1;
    for (int d = 0; d < v.ndim; d++) numel *= (dims[d] = (int64_t)v.shape[d]);
    if ((size_t)v.len != (size_t)numel * sl_dtype_size(dt)) {
        PyBuffer_Release(&v);
        PyErr_Format(PyExc_ValueError, "component '%s': %zd bytes for %lld %s values", cname, v.len, (long long)numel, dn);
        return py_failed(f);
    }
    const sl_tensor *bt = base && base != Py_None ? sl__py_buffer_tensor(base) : NULL;
    const uint8_t *p = v.buf, *lo = bt && bt->buf ? bt->buf->data : NULL;
    if (lo && v.len > 0 && p >= lo && p + v.len <= lo + bt->buf->size) {
        s = sl_tensor_view(t, bt->buf, p, (size_t)v.len, dt, v.ndim, dims); /* ours: no copy */
    } else if (!(s = sl_tensor_alloc(t, dt, v.ndim, dims)) && v.len) {
        memcpy(t->data, v.buf, (size_t)v.len);
    }
    PyBuffer_Release(&v);
    return s;
}

/* kind 2: byte strings (copied: one buffer for the strings, one for their views). */
static sl_status byte_strings(const pyfn *f, const char *cname, PyObject *list, PyObject *shape, sl_tensor *t) {
    int64_t dims[SL_MAX_RANK], numel = 1;
    Py_ssize_t rank = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : -1;
    if (rank < 0 || rank > SL_MAX_RANK || !PyList_Check(list)) {
        PyErr_Format(PyExc_ValueError, "component '%s': a bytes array of rank <= %d expected", cname, SL_MAX_RANK);
        return py_failed(f);
    }
    for (Py_ssize_t d = 0; d < rank; d++) {
        dims[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
        if (dims[d] < 0) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "component '%s': a negative dimension", cname);
            return py_failed(f);
        }
        numel *= dims[d];
    }
    if (numel != PyList_GET_SIZE(list)) {
        PyErr_Format(PyExc_ValueError, "component '%s': %zd strings for a shape of %lld", cname, PyList_GET_SIZE(list),
                     (long long)numel);
        return py_failed(f);
    }
    size_t total = 0;
    for (int64_t i = 0; i < numel; i++) {
        PyObject *o = PyList_GET_ITEM(list, i);
        if (!PyBytes_Check(o)) {
            PyErr_Format(PyExc_TypeError, "component '%s': item %lld is %s, not bytes", cname, (long long)i,
                         Py_TYPE(o)->tp_name);
            return py_failed(f);
        }
        total += (size_t)PyBytes_GET_SIZE(o);
    }
    sl_status s = sl_tensor_alloc(t, SL_DT_BYTES, (int)rank, dims);
    if (s) return s;
    t->aux = sl_buf_new(total ? total : 1);
    if (!t->aux) {
        sl_tensor_release(t);
        return sl_err(SL_ENOMEM, "python function '%s': no memory for %zu bytes of strings", f->name, total);
    }
    uint8_t *w = t->aux->data;
    sl_bytes *views = t->data;
    for (int64_t i = 0; i < numel; i++) {
        PyObject *o = PyList_GET_ITEM(list, i);
        size_t n = (size_t)PyBytes_GET_SIZE(o);
        memcpy(w, PyBytes_AS_STRING(o), n);
        views[i] = (sl_bytes){w, n};
        w += n;
    }
    return SL_OK;
}

/* The callable's result into the new components of e (replacing all of them). */
static sl_status take_result(const pyfn *f, PyObject *r, sl_element *e) {
    if (!PyList_Check(r)) {
        PyErr_Format(PyExc_TypeError, "the function's wrapper returned %s, not a list", Py_TYPE(r)->tp_name);
        return py_failed(f);
    }
    Py_ssize_t n = PyList_GET_SIZE(r);
    if (n > SL_ELEM_MAX) {
        PyErr_Format(PyExc_ValueError, "the function returned %zd components; a Sluice element has at most %d", n,
                     SL_ELEM_MAX);
        return py_failed(f);
    }
    sl_tensor nt[SL_ELEM_MAX];
    char names[SL_ELEM_MAX][SL_NAME_MAX];
    int k = 0;
    sl_status s = SL_OK;
    for (Py_ssize_t i = 0; i < n && !s; i++) {
        PyObject *it = PyList_GET_ITEM(r, i);
        const char *cname;
        int kind;
        if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 5 || !(cname = PyUnicode_AsUTF8(PyTuple_GET_ITEM(it, 0))) ||
            (kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(it, 1))) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "the function's wrapper returned a bad item");
            s = py_failed(f);
            break;
        }
        if (!cname[0] || strlen(cname) >= SL_NAME_MAX) {
            PyErr_Format(PyExc_ValueError, "component name '%s': 1 to %d characters", cname, SL_NAME_MAX - 1);
            s = py_failed(f);
            break;
        }
        PyObject *val = PyTuple_GET_ITEM(it, 2);
        nt[k] = SL_TENSOR_EMPTY;
        if (kind == 0) {
            const sl_tensor *src = sl__py_buffer_tensor(val);
            if (!src) {
                PyErr_SetString(PyExc_TypeError, "the function's wrapper returned a bad buffer");
                s = py_failed(f);
                break;
            }
            sl_tensor_share(&nt[k], src);
        } else if (kind == 1) {
            s = numeric(f, cname, val, PyTuple_GET_ITEM(it, 3), PyTuple_GET_ITEM(it, 4), &nt[k]);
        } else {
            s = byte_strings(f, cname, val, PyTuple_GET_ITEM(it, 4), &nt[k]);
        }
        if (s) break;
        snprintf(names[k], SL_NAME_MAX, "%s", cname);
        k++;
    }
    if (!s) {
        sl_origin o = e->origin;
        sl_element_clear(e);
        e->origin = o;
        for (int i = 0; i < k && !s; i++) {
            if ((s = sl_element_set(e, names[i], &nt[i]))) {
                sl_tensor_release(&nt[i]);
                sl_err_prefix("python function '%s': ", f->name);
            }
            nt[i] = SL_TENSOR_EMPTY;
        }
    }
    for (int i = 0; i < k; i++) sl_tensor_release(&nt[i]);
    return s;
}

static sl_status pyfn_apply(void *ctx, sl_element *e, const sl_fn_call *call) {
    (void)call;
    const pyfn *f = ctx;
    if (finalizing()) return sl_err(SL_ECANCELED, "python function '%s': the interpreter is shutting down", f->name);
    keep_tstate();
    PyGILState_STATE g = PyGILState_Ensure();
    sl_status s = SL_OK;
    PyObject *d = PyDict_New(), *r = NULL;
    for (int c = 0; d && c < e->n; c++) {
        sl_tensor t;
        sl_tensor_share(&t, &e->t[c]);
        PyObject *b = sl__py_buffer_from(&t);
        if (!b) sl_tensor_release(&t);
        if (!b || PyDict_SetItemString(d, e->names[c], b)) Py_CLEAR(d);
        Py_XDECREF(b);
    }
    if (d) r = PyObject_CallOneArg(f->call, d);
    if (!r) s = keep_exception(f);
    else s = take_result(f, r, e);
    Py_XDECREF(r);
    Py_XDECREF(d);
    PyGILState_Release(g);
    return s;
}

sl_status sl__py_find_fn(void *ctx, const char *name, sl_fn **out) {
    *out = NULL;
    PyObject *fns = ctx;
    if (!fns || fns == Py_None || !PyDict_Check(fns)) return SL_ENOTFOUND;
    PyObject *call = PyDict_GetItemString(fns, name);
    if (!call) return SL_ENOTFOUND;
    pyfn *f = calloc(1, sizeof *f);
    if (!f) return sl_err(SL_ENOMEM, "no memory for python function '%s'", name);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->call = call;
    Py_INCREF(call);
    sl_status s = sl_fn_custom(f->name, pyfn_apply, f, pyfn_free, out);
    if (s) { /* on failure sl_fn_custom keeps nothing of ctx */
        Py_DECREF(call);
        free(f);
    }
    return s;
}

long long sl__py_strip_marker(char *msg) {
    char *m = strstr(msg, MARKER);
    if (!m) return -1;
    char *end;
    long long id = strtoll(m + strlen(MARKER), &end, 10);
    if (*end != ']') return -1;
    memmove(m, end + 1, strlen(end + 1) + 1);
    return id;
}

void sl__py_chain_cause(long long n) {
    if (n < 0 || !pending || !PyErr_Occurred()) return;
    PyObject *key = PyLong_FromLongLong(n);
    PyObject *cause = key ? PyDict_GetItemWithError(pending, key) : NULL; /* borrowed */
    PyObject *type, *val, *tb;
    PyErr_Fetch(&type, &val, &tb);
    PyErr_NormalizeException(&type, &val, &tb);
    if (cause && val) {
        Py_INCREF(cause);
        PyException_SetCause(val, cause); /* steals */
        Py_INCREF(cause);
        PyException_SetContext(val, cause); /* steals */
    }
    if (cause) PyDict_DelItem(pending, key);
    PyErr_Clear();
    Py_XDECREF(key);
    PyErr_Restore(type, val, tb);
}
