/* sluice._sluice: the CPython extension under the `sluice` Python package (python/sluice/).
 *
 * Three types and one exception, kept small; the friendly API (keyword arguments, numpy
 * arrays, JSON stats, epochs) is written in Python on top of them (python/sluice/__init__.py):
 *
 *   _Pipeline(path, text, name, sets, shard_index, num_shards, seed, base_dir, cpu_budget,
 *             ram_budget, functions)
 *       functions: None or a dict {NAME: callable}: a `map NAME()` of the config calls it on
 *       the map's threads (pyfn.c: sl_pipeline_env.find_fn); an exception it raises comes
 *       out of next() as sluice.Error whose __cause__ is that exception.
 *       parses the config (a file, or text), applies the `sets` overrides ("PATH=VALUE",
 *       as sluice-stats --set), builds the dataset of `pipeline NAME { }` (sluice/from_config.h)
 *       and keeps it. ._iter(seed, copy, start, state, check_seed) starts an _Iterator:
 *       at element `start` of the stream (sl_iter_create_at), or where a saved state stood
 *       (sl_iter_restore: the state's seed, not `seed`; with check_seed a state whose seed
 *       is not `seed` is a ValueError before anything is built). num_shards > 1 on a pipeline block
 *       without a `shard` statement is an error (SL_EINVAL): from_config shards only through
 *       that statement, so every replica would otherwise read all of the data.
 *   _Iterator
 *       __next__ returns a dict {component name: Buffer}, in the element's order. The GIL is
 *       released while sl_iter_next waits, so other Python threads (a training step) run
 *       meanwhile. An error raises sluice.Error; the iterator stays usable (the pipeline
 *       contract: an error consumes the input that caused it). At the end (or close()) the
 *       Sluice iterator is closed, after a last stats snapshot is kept for stats_json().
 *       With copy (._iter(seed, True)) the components that view a mapped file are copied
 *       into memory of their own before they are handed out (copy_mapped).
 *       save() returns the iterator's state (sl_iter_save: SL_ITER_STATE_SIZE bytes);
 *       position, replayed, refilled and seed are sl_iter_position, sl_iter_replayed,
 *       sl_iter_refilled and the pass's
 *       seed. All of them stay readable once the iterator is closed (kept at the close).
 *   Buffer
 *       one component: an sl_tensor whose references it holds, so the bytes stay alive as
 *       long as the Buffer does, whatever happens to the pipeline. It exports them through
 *       the buffer protocol (PEP 3118: format, shape, C-contiguous strides) without a copy,
 *       read-only (a request for a writable buffer is a BufferError, so numpy refuses to
 *       make such an array writeable); numpy arrays made from it keep it alive as their
 *       base. .mapped: the bytes view a mapped file; .damaged: that file shrank and took
 *       them (sl_tensor_lost, asked at each read). Byte-string tensors (dtype "bytes")
 *       export nothing: bytes_list() copies them out as Python bytes.
 *   _dlpack(array, versioned, copied)
 *       a DLPack capsule over an array's memory, old-style or DLPack 1.0 with the read-only
 *       flag; sluice.Array.__dlpack__ (python/sluice/__init__.py) decides which, and when a
 *       consumer gets a copy.
 *   Error (sluice.Error, a RuntimeError): str() is Sluice's message (sl_errmsg(), with the
 *       "---> HINT:" line when there is one); attributes status ("SL_EINVAL"), code (-1),
 *       message (without the hint) and hint (str or None).
 *
 * Threads: an _Iterator must not be advanced from two threads at once (the second gets a
 * RuntimeError instead of a crash); Sluice's own threads never touch Python objects. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/config.h"
#include "sluice/crc32c.h"
#include "sluice/from_config.h"
#include "sluice/pipeline.h"
#include "sluice/stats.h"
#include "sluice/status.h"
#include "sluice/tensor.h"
#include "sluice/util.h"
#include "module_priv.h"

static PyObject *ErrorType; /* sluice.Error */

/* Raise sluice.Error from the calling thread's Sluice error (code s), with `what` (may be
 * NULL) put before the message. Returns NULL. */
static PyObject *raise_sl(sl_status s, const char *what) {
    const char *full = sl_errmsg();
    if (!full[0]) full = sl_strerror(s);
    char *buf = malloc(strlen(full) + (what ? strlen(what) : 0) + 4);
    if (!buf) return PyErr_NoMemory();
    sprintf(buf, "%s%s%s", what ? what : "", what ? ": " : "", full);
    long long cause = sl__py_strip_marker(buf); /* an exception a Python map function raised */
    const char *h = strstr(buf, "\n---> HINT: ");
    PyObject *exc = PyObject_CallFunction(ErrorType, "s", buf);
    PyObject *msg = h ? PyUnicode_FromStringAndSize(buf, h - buf) : PyUnicode_FromString(buf);
    PyObject *hint = h ? PyUnicode_FromString(h + strlen("\n---> HINT: ")) : (Py_INCREF(Py_None), Py_None);
    free(buf);
    if (exc && msg && hint) {
        PyObject *name = PyUnicode_FromString(sl_status_name(s));
        PyObject *code = PyLong_FromLong(s);
        if (name && code && !PyObject_SetAttrString(exc, "status", name) &&
            !PyObject_SetAttrString(exc, "code", code) && !PyObject_SetAttrString(exc, "message", msg) &&
            !PyObject_SetAttrString(exc, "hint", hint))
            PyErr_SetObject(ErrorType, exc);
        Py_XDECREF(name);
        Py_XDECREF(code);
    }
    Py_XDECREF(exc);
    Py_XDECREF(msg);
    Py_XDECREF(hint);
    sl__py_chain_cause(cause);
    return NULL;
}

/* ---- Buffer ----------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    sl_tensor t;                        /* references held */
    Py_ssize_t shape[SL_MAX_RANK];
    Py_ssize_t strides[SL_MAX_RANK];
    int exports;                        /* live Py_buffer views */
} BufferObject;

static PyTypeObject BufferType;

/* struct-module format of each dtype; bf16 has none: it is exported as uint16 ("H"). */
static const char *dtype_format(sl_dtype dt) {
    switch (dt) {
    case SL_DT_U8: return "B";
    case SL_DT_I8: return "b";
    case SL_DT_U16: return "H";
    case SL_DT_I16: return "h";
    case SL_DT_I32: return "i";
    case SL_DT_U32: return "I";
    case SL_DT_I64: return "q";
    case SL_DT_F16: return "e";
    case SL_DT_BF16: return "H";
    case SL_DT_F32: return "f";
    case SL_DT_F64: return "d";
    case SL_DT_BOOL: return "?";
    default: return NULL;
    }
}

/* A Buffer taking over the references of *t (left empty). */
static PyObject *buffer_new_from(sl_tensor *t) {
    BufferObject *b = PyObject_New(BufferObject, &BufferType);
    if (!b) return NULL;
    b->t = *t;
    *t = SL_TENSOR_EMPTY;
    b->exports = 0;
    Py_ssize_t item = (Py_ssize_t)sl_dtype_size(b->t.dtype), stride = item;
    for (int d = b->t.rank - 1; d >= 0; d--) {
        b->shape[d] = (Py_ssize_t)b->t.dims[d];
        b->strides[d] = stride;
        stride *= (Py_ssize_t)b->t.dims[d];
    }
    return (PyObject *)b;
}

PyObject *sl__py_buffer_from(sl_tensor *t) { return buffer_new_from(t); }

const sl_tensor *sl__py_buffer_tensor(PyObject *o) {
    return o && Py_TYPE(o) == &BufferType ? &((BufferObject *)o)->t : NULL;
}

static void buffer_dealloc(BufferObject *b) {
    sl_tensor_release(&b->t);
    PyObject_Free(b);
}

static char empty_bytes[64] __attribute__((aligned(64)));

static int buffer_getbuffer(BufferObject *b, Py_buffer *view, int flags) {
    const char *fmt = dtype_format(b->t.dtype);
    if (!fmt) {
        PyErr_Format(PyExc_BufferError, "a Sluice %s tensor has no buffer (use bytes_list())",
                     sl_dtype_name(b->t.dtype));
        view->obj = NULL;
        return -1;
    }
    /* Read-only, always: the bytes may be a read-only mapping of a file (a write there
     * kills the process), or buffers a cache replays; numpy then refuses to make the array
     * writeable (ValueError) instead of letting a write crash. */
    if (flags & PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError, "a sluice.Buffer is read-only (copy the array to modify it)");
        view->obj = NULL;
        return -1;
    }
    view->buf = b->t.data ? b->t.data : empty_bytes;
    view->obj = (PyObject *)b;
    Py_INCREF(b);
    view->len = (Py_ssize_t)sl_tensor_nbytes(&b->t);
    view->readonly = 1;
    view->itemsize = (Py_ssize_t)sl_dtype_size(b->t.dtype);
    view->format = (flags & PyBUF_FORMAT) ? (char *)fmt : NULL;
    view->ndim = b->t.rank;
    view->shape = (flags & PyBUF_ND) == PyBUF_ND ? b->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? b->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    if (!view->shape && b->t.rank != 1) view->ndim = 1; /* a flat view of the bytes */
    b->exports++;
    return 0;
}

static void buffer_releasebuffer(BufferObject *b, Py_buffer *view) { b->exports--; }

static PyBufferProcs buffer_as_buffer = {
    .bf_getbuffer = (getbufferproc)buffer_getbuffer,
    .bf_releasebuffer = (releasebufferproc)buffer_releasebuffer,
};

static PyObject *buffer_get_dtype(BufferObject *b, void *c) { return PyUnicode_FromString(sl_dtype_name(b->t.dtype)); }

static PyObject *buffer_get_shape(BufferObject *b, void *c) {
    PyObject *t = PyTuple_New(b->t.rank);
    for (int d = 0; t && d < b->t.rank; d++) PyTuple_SET_ITEM(t, d, PyLong_FromLongLong(b->t.dims[d]));
    return t;
}

static PyObject *buffer_get_nbytes(BufferObject *b, void *c) {
    return PyLong_FromSize_t(b->t.dtype == SL_DT_BYTES ? 0 : sl_tensor_nbytes(&b->t));
}

static PyObject *buffer_get_address(BufferObject *b, void *c) { return PyLong_FromVoidPtr(b->t.data); }

static PyObject *buffer_get_mapped(BufferObject *b, void *c) {
    return PyBool_FromLong(sl_buf_mapped(b->t.buf) || sl_buf_mapped(b->t.aux));
}

/* Asked anew at each read: the file can shrink at any moment. */
static PyObject *buffer_get_damaged(BufferObject *b, void *c) { return PyBool_FromLong(sl_tensor_lost(&b->t)); }

/* Byte strings: a flat list of bytes objects (copies), in C order. */
static PyObject *buffer_bytes_list(BufferObject *b, PyObject *unused) {
    if (b->t.dtype != SL_DT_BYTES) {
        PyErr_SetString(PyExc_TypeError, "bytes_list(): the tensor does not hold byte strings");
        return NULL;
    }
    int64_t n = sl_tensor_numel(&b->t);
    const sl_bytes *v = b->t.data;
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (int64_t i = 0; l && i < n; i++) {
        PyObject *o = PyBytes_FromStringAndSize((const char *)v[i].ptr, (Py_ssize_t)v[i].len);
        if (!o) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, o);
    }
    return l;
}

static PyObject *buffer_repr(BufferObject *b) {
    char d[128];
    return PyUnicode_FromFormat("<sluice.Buffer %s>", sl_tensor_describe(&b->t, d, sizeof d));
}

static PyGetSetDef buffer_getset[] = {
    {"dtype", (getter)buffer_get_dtype, NULL, "Sluice dtype name (\"float32\", \"bytes\", ...)", NULL},
    {"shape", (getter)buffer_get_shape, NULL, "dims, a tuple", NULL},
    {"nbytes", (getter)buffer_get_nbytes, NULL, "bytes of data (0 for byte strings)", NULL},
    {"address", (getter)buffer_get_address, NULL, "address of the first element", NULL},
    {"mapped", (getter)buffer_get_mapped, NULL,
     "True when the bytes are a view of a mapped file (a shrinking file can take them away)", NULL},
    {"damaged", (getter)buffer_get_damaged, NULL,
     "True when the file under a mapped view shrank and took these bytes: they read as zeros now "
     "(asked anew at each read; always False for memory Sluice made)", NULL},
    {NULL},
};

static PyMethodDef buffer_methods[] = {
    {"bytes_list", (PyCFunction)buffer_bytes_list, METH_NOARGS, "byte strings as a flat list of bytes (copied)"},
    {NULL},
};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sluice.Buffer",
    .tp_doc = "One tensor of a Sluice element; keeps its bytes alive (numpy arrays use it as their base).",
    .tp_basicsize = sizeof(BufferObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)buffer_dealloc,
    .tp_repr = (reprfunc)buffer_repr,
    .tp_as_buffer = &buffer_as_buffer,
    .tp_getset = buffer_getset,
    .tp_methods = buffer_methods,
};

/* ---- _Pipeline -------------------------------------------------------------------- */

typedef struct IterObject IterObject;

typedef struct {
    PyObject_HEAD
    sl_dataset *ds;
    PyObject *name;        /* str */
    int cpu_budget;
    long long ram_budget;
    PyObject *last_stats;  /* JSON str of the last closed iterator, or NULL */
    PyObject *weakrefs;
} PipelineObject;

static PyTypeObject PipelineType;

/* Does `pipeline NAME { }` (unknown NAME: yes, from_config reports it) hold a `shard`
 * statement? */
static int has_shard_stmt(const sl_cfg *cfg, const char *name) {
    int n = 0;
    const sl_cfg_stmt *root = sl_cfg_root(cfg, &n);
    for (int i = 0; i < n; i++) {
        const sl_cfg_value *v = sl_cfg_pos(&root[i], 0);
        if (strcmp(root[i].name, "pipeline") != 0 || !v || !v->text || strcmp(v->text, name) != 0) continue;
        return sl_cfg_find(root[i].body, root[i].nbody, "shard") != NULL;
    }
    return 1;
}

static int pipeline_init(PipelineObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "text", "name", "sets", "shard_index", "num_shards", "seed",
                             "base_dir", "cpu_budget", "ram_budget", "functions", NULL};
    const char *path = NULL, *text = NULL, *name = NULL, *base_dir = NULL;
    Py_ssize_t text_len = 0;
    PyObject *sets = NULL, *functions = NULL;
    long long shard_index = 0, num_shards = 1, ram_budget = 0;
    unsigned long long seed = 0;
    int cpu_budget = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|zz#zOLLKziLO", kwlist, &path, &text, &text_len, &name, &sets,
                                     &shard_index, &num_shards, &seed, &base_dir, &cpu_budget, &ram_budget,
                                     &functions))
        return -1;
    if (self->ds) {
        PyErr_SetString(PyExc_RuntimeError, "a Pipeline is initialised once");
        return -1;
    }
    if ((path == NULL) == (text == NULL)) {
        PyErr_SetString(PyExc_TypeError, "give a config file path or config text (text=...), not both");
        return -1;
    }
    if (num_shards < 1 || shard_index < 0 || shard_index >= num_shards) {
        PyErr_Format(PyExc_ValueError, "shard=(%lld, %lld): the index must be in [0, count) and count >= 1",
                     shard_index, num_shards);
        return -1;
    }
    if (functions && functions != Py_None && !PyDict_Check(functions)) {
        PyErr_SetString(PyExc_TypeError, "functions must be a dict {NAME: callable}");
        return -1;
    }
    if (cpu_budget < 0 || ram_budget < 0) {
        PyErr_SetString(PyExc_ValueError, "cpu_budget and ram_budget must be >= 0 (0: Sluice's default)");
        return -1;
    }
    PyObject *seq = NULL;
    if (sets && sets != Py_None) {
        seq = PySequence_Fast(sets, "sets must be a sequence of \"PATH=VALUE\" strings");
        if (!seq) return -1;
    }
    sl_cfg *cfg = NULL;
    sl_status s = path ? sl_cfg_parse_file(path, &cfg) : sl_cfg_parse(text, (size_t)text_len, "<text>", &cfg);
    if (s) {
        Py_XDECREF(seq);
        raise_sl(s, NULL);
        return -1;
    }
    for (Py_ssize_t i = 0; seq && i < PySequence_Fast_GET_SIZE(seq); i++) {
        const char *a = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
        if (!a) goto fail;
        if ((s = sl_cfg_set(cfg, a))) {
            raise_sl(s, "set");
            goto fail;
        }
    }
    const char *names[64];
    int n = sl_pipeline_names(cfg, names, 64);
    if (!name) {
        for (int i = 0; i < n && i < 64 && !name; i++)
            if (strcmp(names[i], "train") == 0) name = names[i];
        if (!name && n == 1) name = names[0];
        if (!name) {
            char list[512];
            size_t len = 0;
            list[0] = 0;
            for (int i = 0; i < n && i < 64 && len < sizeof list; i++)
                len += (size_t)snprintf(list + len, sizeof list - len, i ? ", %s" : "%s", names[i]);
            if (n == 0) sl_err(SL_ENOTFOUND, "%s: no `pipeline NAME { }` block", sl_cfg_filename(cfg));
            else sl_err(SL_EINVAL, "%s has several pipelines (%s), none named 'train'", sl_cfg_filename(cfg), list);
            if (n) sl_err_hint("choose one: sluice.Pipeline(config, \"NAME\")");
            raise_sl(n ? SL_EINVAL : SL_ENOTFOUND, NULL);
            goto fail;
        }
    }
    if (num_shards > 1 && !has_shard_stmt(cfg, name)) {
        /* from_config applies the env's shard only through a `shard` statement: without one
         * every replica would silently read all the data */
        sl_err(SL_EINVAL, "pipeline '%s' has no `shard` statement, so shard=(%lld, %lld) would not split it: "
               "every replica would read all of the data", name, shard_index, num_shards);
        sl_err_hint("add `shard auto` after `files` (or `shard data` later), or pass shard=(0, 1) to read "
                    "everything on purpose");
        raise_sl(SL_EINVAL, NULL);
        goto fail;
    }
    sl_pipeline_env env = sl_pipeline_env_default();
    env.num_shards = num_shards;
    env.shard_index = shard_index;
    env.seed = seed;
    env.base_dir = base_dir;
    if (functions && functions != Py_None) { /* `map NAME()` calls functions[NAME] (pyfn.c) */
        env.find_fn = sl__py_find_fn;
        env.find_fn_ctx = functions;
    }
    sl_dataset *ds = NULL;
    if ((s = sl_pipeline_from_config(cfg, name, &env, &ds))) {
        raise_sl(s, NULL);
        goto fail;
    }
    self->name = PyUnicode_FromString(name);
    if (!self->name) {
        sl_dataset_unref(ds);
        goto fail;
    }
    self->ds = ds;
    self->cpu_budget = cpu_budget;
    self->ram_budget = ram_budget;
    sl_cfg_free(cfg);
    Py_XDECREF(seq);
    return 0;
fail:
    sl_cfg_free(cfg);
    Py_XDECREF(seq);
    return -1;
}

static void pipeline_dealloc(PipelineObject *self) {
    if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
    sl_dataset_unref(self->ds);
    Py_XDECREF(self->name);
    Py_XDECREF(self->last_stats);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *pipeline_get_name(PipelineObject *self, void *c) {
    if (!self->name) Py_RETURN_NONE;
    Py_INCREF(self->name);
    return self->name;
}

/* Number of elements per pass; None when it cannot be known without reading; -1 for an
 * endless pipeline. */
static PyObject *pipeline_get_card(PipelineObject *self, void *c) {
    if (!self->ds) Py_RETURN_NONE;
    int64_t n = sl_dataset_cardinality(self->ds);
    if (n == SL_UNKNOWN_CARD) Py_RETURN_NONE;
    return PyLong_FromLongLong(n == SL_INFINITE ? -1 : n);
}

static PyObject *pipeline_get_last_stats(PipelineObject *self, void *c) {
    if (!self->last_stats) Py_RETURN_NONE;
    Py_INCREF(self->last_stats);
    return self->last_stats;
}

static PyObject *pipeline_iter_new(PipelineObject *self, PyObject *args, PyObject *kw);

static PyGetSetDef pipeline_getset[] = {
    {"name", (getter)pipeline_get_name, NULL, "the pipeline's name in the config", NULL},
    {"_cardinality", (getter)pipeline_get_card, NULL, "elements per pass (-1 endless, None unknown)", NULL},
    {"_last_stats_json", (getter)pipeline_get_last_stats, NULL, "stats JSON of the last closed iterator", NULL},
    {NULL},
};

static PyMethodDef pipeline_methods[] = {
    {"_iter", (PyCFunction)(void (*)(void))pipeline_iter_new, METH_VARARGS | METH_KEYWORDS,
     "_iter(seed, copy=False, start=0, state=None, check_seed=False): a new _Iterator (copy: views of "
     "mapped files are copied at hand-out; start: its first element; state: continue a saved one, with "
     "the state's seed, a ValueError with check_seed when that is not `seed`)"},
    {NULL},
};

static PyTypeObject PipelineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sluice._sluice._Pipeline",
    .tp_doc = "A dataset built from a `pipeline NAME { }` block (use sluice.Pipeline).",
    .tp_basicsize = sizeof(PipelineObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)pipeline_init,
    .tp_dealloc = (destructor)pipeline_dealloc,
    .tp_getset = pipeline_getset,
    .tp_methods = pipeline_methods,
    .tp_weaklistoffset = offsetof(PipelineObject, weakrefs),
};

/* ---- _Iterator -------------------------------------------------------------------- */

struct IterObject {
    PyObject_HEAD
    sl_iter *it;           /* NULL once closed */
    PipelineObject *pipe;  /* strong */
    int busy;              /* a thread is inside sl_iter_next */
    int copy;              /* copy views of mapped files at hand-out */
    long long produced;
    long long first;       /* position of its first element */
    long long replayed;    /* elements dropped to reach `first` */
    long long refilled;    /* elements read again to rebuild a shuffle buffer at `first` */
    unsigned long long seed; /* the pass's seed (a restored one's: the state's) */
    long long end_pos;     /* position, kept at the close */
    uint8_t end_state[SL_ITER_STATE_SIZE]; /* state, kept at the close (end_state_len bytes) */
    size_t end_state_len;
    sl_error end_state_err;                /* why it could not be kept (end_state_len 0) */
    PyObject *weakrefs;
};

static PyTypeObject IterType;

/* The JSON of a stats snapshot of it, as a str; NULL with sluice.Error set. */
static PyObject *stats_json(sl_iter *it) {
    sl_stats *st = NULL;
    sl_status s;
    Py_BEGIN_ALLOW_THREADS /* it may wait on ops whose threads wait for the GIL (pyfn.c) */
    s = sl_iter_stats(it, &st);
    Py_END_ALLOW_THREADS
    if (s) return raise_sl(s, "stats");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        sl_stats_free(st);
        return PyErr_NoMemory();
    }
    s = sl_stats_fprint(st, f);
    int cerr = fclose(f);
    sl_stats_free(st);
    PyObject *r = NULL;
    if (s || cerr) raise_sl(s ? s : sl_err(SL_ENOMEM, "cannot format the stats"), "stats");
    else r = PyUnicode_DecodeUTF8(text, (Py_ssize_t)len, "replace");
    free(text);
    return r;
}

/* Close the Sluice iterator (joining its threads, without the GIL), keeping a last stats
 * snapshot in the pipeline. */
static void iter_finish(IterObject *self) {
    sl_iter *it = self->it;
    if (!it) return;
    self->it = NULL;
    self->end_pos = sl_iter_position(it);
    if (sl_iter_save(it, self->end_state, sizeof self->end_state, &self->end_state_len)) {
        self->end_state_len = 0;
        sl_err_save(&self->end_state_err); /* save() after the close says why */
    }
    PyObject *exc_type, *exc_val, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_val, &exc_tb);
    PyObject *js = stats_json(it);
    if (js) {
        Py_XSETREF(self->pipe->last_stats, js);
    } else {
        PyErr_Clear();
    }
    PyErr_Restore(exc_type, exc_val, exc_tb);
    Py_BEGIN_ALLOW_THREADS
    sl_iter_close(it);
    Py_END_ALLOW_THREADS
}

/* The seed of a sound iterator state (sluice/pipeline.h's layout: "SLITSTAT", version 1 or 2 and
 * the size at bytes 8 and 12, the seed at 16, the CRC32C of bytes 0..43 at 44): 1 with
 * *seed, or 0 for bytes sl_iter_restore will refuse (it says what is wrong with them). */
static int state_seed(const uint8_t *st, size_t len, uint64_t *seed) {
    if (len != SL_ITER_STATE_SIZE || memcmp(st, "SLITSTAT", 8) || (sl_load_le32(st + 8) != 1 && sl_load_le32(st + 8) != 2) ||
        sl_load_le32(st + 12) != SL_ITER_STATE_SIZE || sl_load_le32(st + 44) != sl_crc32c(0, st, 44))
        return 0;
    *seed = sl_load_le64(st + 16);
    return 1;
}

static PyObject *pipeline_iter_new(PipelineObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"seed", "copy", "start", "state", "check_seed", NULL};
    unsigned long long seed = 0;
    int copy = 0, check_seed = 0;
    long long start = 0;
    PyObject *state = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "K|pLOp", kwlist, &seed, &copy, &start, &state, &check_seed))
        return NULL;
    if (!self->ds) {
        PyErr_SetString(PyExc_RuntimeError, "the Pipeline was not initialised");
        return NULL;
    }
    if (start < 0) {
        PyErr_Format(PyExc_ValueError, "start=%lld: an iterator starts at an element >= 0", start);
        return NULL;
    }
    if (state != Py_None && !PyBytes_Check(state)) {
        PyErr_Format(PyExc_TypeError, "state must be bytes (what Iterator.state() returned), not %s",
                     Py_TYPE(state)->tp_name);
        return NULL;
    }
    if (state != Py_None && start) {
        PyErr_Format(PyExc_ValueError, "start=%lld with state=: a state holds its own position; give one of them",
                     start);
        return NULL;
    }
    sl_iter_opts o = sl_iter_opts_default();
    o.seed = seed;
    o.cpu_budget = self->cpu_budget;
    o.ram_budget = self->ram_budget;
    sl_iter *it = NULL;
    sl_status s;
    if (state != Py_None) {
        const uint8_t *st = (const uint8_t *)PyBytes_AS_STRING(state);
        size_t len = (size_t)PyBytes_GET_SIZE(state);
        uint64_t saved = 0;
        int sound = state_seed(st, len, &saved);
        if (sound && check_seed && saved != seed) {
            PyErr_Format(PyExc_ValueError, "the state was saved by a pass with seed %llu, and seed %llu was asked "
                         "(seed=, or the seed of epoch=): a state continues its own pass; leave seed= and epoch= "
                         "out, or give the state's", (unsigned long long)saved, seed);
            return NULL;
        }
        /* the bytes object is immutable and held by the call: safe to read without the GIL */
        Py_BEGIN_ALLOW_THREADS
        s = sl_iter_restore(self->ds, &o, st, len, &it);
        Py_END_ALLOW_THREADS
        seed = saved;
    } else {
        Py_BEGIN_ALLOW_THREADS /* a start below an op that cannot seek replays */
        s = sl_iter_create_at(self->ds, &o, start, &it);
        Py_END_ALLOW_THREADS
    }
    if (s) return raise_sl(s, NULL);
    IterObject *io = PyObject_New(IterObject, &IterType);
    if (!io) {
        sl_iter_close(it);
        return NULL;
    }
    io->it = it;
    io->pipe = self;
    Py_INCREF(self);
    io->busy = 0;
    io->copy = copy;
    io->produced = 0;
    io->first = sl_iter_position(it);
    io->replayed = sl_iter_replayed(it);
    io->refilled = sl_iter_refilled(it);
    io->seed = seed;
    io->end_pos = io->first;
    io->end_state_len = 0;
    io->weakrefs = NULL;
    return (PyObject *)io;
}

static void iter_dealloc(IterObject *self) {
    if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
    iter_finish(self);
    Py_XDECREF(self->pipe);
    PyObject_Free(self);
}

static PyObject *iter_self(PyObject *self) {
    Py_INCREF(self);
    return self;
}

/* copy=True: each component that views a mapped file is replaced by a copy in memory of
 * its own; the originals are checked after the copies were made, so a copy that read zeros
 * a shrinking file left is an error (SL_EIO) rather than data. */
static sl_status copy_mapped(sl_element *e) {
    sl_tensor copies[SL_ELEM_MAX];
    bool made[SL_ELEM_MAX] = {false};
    sl_status s = SL_OK;
    for (int c = 0; c < e->n && !s; c++)
        if (sl_buf_mapped(e->t[c].buf) || sl_buf_mapped(e->t[c].aux))
            made[c] = !(s = sl_tensor_clone(&copies[c], &e->t[c]));
    if (!s) s = sl_element_check(e);
    for (int c = 0; c < e->n; c++) {
        if (!made[c]) continue;
        if (s) {
            sl_tensor_release(&copies[c]);
        } else {
            sl_tensor_release(&e->t[c]);
            e->t[c] = copies[c];
        }
    }
    return s;
}

static PyObject *iter_next(IterObject *self) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "this sluice iterator is already being advanced by another thread");
        return NULL;
    }
    if (!self->it) return NULL; /* StopIteration */
    sl_element e;
    sl_element_init(&e);
    sl_status s;
    sl_iter *it = self->it;
    self->busy = 1;
    int copy = self->copy;
    Py_BEGIN_ALLOW_THREADS
    s = sl_iter_next(it, &e);
    if (s == SL_OK && copy && (s = copy_mapped(&e))) sl_element_clear(&e);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (s == SL_END) {
        iter_finish(self);
        return NULL;
    }
    if (s) {
        char what[160];
        PyObject *nm = self->pipe->name;
        snprintf(what, sizeof what, "pipeline '%s', element %lld", nm ? PyUnicode_AsUTF8(nm) : "?",
                 self->first + self->produced);
        return raise_sl(s, what);
    }
    self->produced++;
    PyObject *d = PyDict_New();
    for (int c = 0; d && c < e.n; c++) {
        PyObject *b = buffer_new_from(&e.t[c]);
        if (!b || PyDict_SetItemString(d, e.names[c], b)) {
            Py_XDECREF(b);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(b);
    }
    sl_element_clear(&e);
    return d;
}

static PyObject *iter_close(IterObject *self, PyObject *unused) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "close(): another thread is advancing this iterator");
        return NULL;
    }
    iter_finish(self);
    Py_RETURN_NONE;
}

static PyObject *iter_stats_json(IterObject *self, PyObject *unused) {
    if (!self->it) {
        if (self->pipe->last_stats) {
            Py_INCREF(self->pipe->last_stats);
            return self->pipe->last_stats;
        }
        sl_err(SL_ESTATE, "stats(): the iterator is closed");
        return raise_sl(SL_ESTATE, NULL);
    }
    return stats_json(self->it);
}

static PyObject *iter_get_closed(IterObject *self, void *c) { return PyBool_FromLong(self->it == NULL); }

/* sl_iter_position and sl_iter_save read what sl_iter_next changes: not while it runs. */
static int iter_idle(IterObject *self, const char *what) {
    if (!self->busy) return 1;
    PyErr_Format(PyExc_RuntimeError, "%s: another thread is advancing this iterator", what);
    return 0;
}

static PyObject *iter_save(IterObject *self, PyObject *unused) {
    if (!iter_idle(self, "save()")) return NULL;
    if (!self->it) {
        if (self->end_state_len) return PyBytes_FromStringAndSize((const char *)self->end_state,
                                                                  (Py_ssize_t)self->end_state_len);
        if (self->end_state_err.code) return raise_sl(sl_err_restore(&self->end_state_err), "save()");
        sl_err(SL_ESTATE, "save(): the iterator was closed before its state could be kept");
        return raise_sl(SL_ESTATE, NULL);
    }
    uint8_t buf[SL_ITER_STATE_SIZE];
    size_t len = 0;
    sl_status s = sl_iter_save(self->it, buf, sizeof buf, &len);
    if (s) return raise_sl(s, "save()");
    return PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)len);
}

static PyObject *iter_get_position(IterObject *self, void *c) {
    if (!iter_idle(self, "position")) return NULL;
    return PyLong_FromLongLong(self->it ? sl_iter_position(self->it) : self->end_pos);
}

static PyObject *iter_get_replayed(IterObject *self, void *c) { return PyLong_FromLongLong(self->replayed); }
static PyObject *iter_get_refilled(IterObject *self, void *c) { return PyLong_FromLongLong(self->refilled); }

static PyObject *iter_get_seed(IterObject *self, void *c) { return PyLong_FromUnsignedLongLong(self->seed); }

static PyObject *iter_get_ignored(IterObject *self, void *c) {
    return PyLong_FromLongLong(self->it ? sl_iter_errors_ignored(self->it) : 0);
}

static PyMethodDef iter_methods[] = {
    {"close", (PyCFunction)iter_close, METH_NOARGS, "stop: cancel in-flight work, join threads, free buffers"},
    {"stats_json", (PyCFunction)iter_stats_json, METH_NOARGS, "a stats snapshot as JSON text"},
    {"save", (PyCFunction)iter_save, METH_NOARGS,
     "the iterator's state as bytes (sl_iter_save; kept at the close, so readable after the end)"},
    {NULL},
};

static PyGetSetDef iter_getset[] = {
    {"closed", (getter)iter_get_closed, NULL, "True once the end was reached or close() was called", NULL},
    {"errors_ignored", (getter)iter_get_ignored, NULL, "elements dropped by ignore_errors so far", NULL},
    {"position", (getter)iter_get_position, NULL, "position of the next element (sl_iter_position)", NULL},
    {"replayed", (getter)iter_get_replayed, NULL, "elements produced and dropped to reach the start", NULL},
    {"refilled", (getter)iter_get_refilled, NULL,
     "elements a buffer shuffle read again to rebuild its buffer at the start (sl_iter_refilled)", NULL},
    {"seed", (getter)iter_get_seed, NULL, "the pass's seed (a restored pass: the state's)", NULL},
    {NULL},
};

static PyTypeObject IterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sluice._sluice._Iterator",
    .tp_doc = "One pass over a pipeline; yields {name: Buffer} dicts.",
    .tp_basicsize = sizeof(IterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)iter_dealloc,
    .tp_iter = iter_self,
    .tp_iternext = (iternextfunc)iter_next,
    .tp_methods = iter_methods,
    .tp_getset = iter_getset,
    .tp_weaklistoffset = offsetof(IterObject, weakrefs),
};

/* ---- DLPack ----------------------------------------------------------------------- */

/* DLPack's ABI (dlpack.h, version 1.0): written out here, as the module needs no header
 * beyond Python's. Only CPU memory is exported. */
typedef struct { uint32_t major, minor; } DLPackVersion;
typedef struct { int32_t device_type, device_id; } DLDevice;
typedef struct { uint8_t code, bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;
#define DLPACK_FLAG_BITMASK_READ_ONLY (1ull << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1ull << 1)
enum { kDLCPU = 1, kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBool = 6 };

/* What one export holds: the array's buffer view (which keeps the array, and so Sluice's
 * buffer, alive), shape and strides in elements, and the managed tensor handed out. */
typedef struct {
    Py_buffer view;
    union { DLManagedTensor m; DLManagedTensorVersioned v; } t;
    int64_t dims[]; /* shape, then strides */
} dl_ctx;

/* The consumer is done (any thread, with or without the GIL). */
static void dl_release(dl_ctx *c) {
    if (Py_IsInitialized()) {
        PyGILState_STATE g = PyGILState_Ensure();
        PyBuffer_Release(&c->view);
        PyGILState_Release(g);
    }
    free(c);
}
static void dl_delete(DLManagedTensor *m) { dl_release(m->manager_ctx); }
static void dl_delete_versioned(DLManagedTensorVersioned *m) { dl_release(m->manager_ctx); }

/* A capsule nobody consumed (still under its first name) frees its tensor. */
static void dl_capsule_free(PyObject *cap) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        if (m && m->deleter) m->deleter(m);
    } else if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (m && m->deleter) m->deleter(m);
    }
    PyErr_Restore(et, ev, tb);
}

/* The DLPack dtype of a struct-module format (native byte order only). */
static int dl_dtype(const char *fmt, Py_ssize_t itemsize, DLDataType *dt) {
    while (*fmt == '@' || *fmt == '=' || *fmt == '<') fmt++;
    if (!fmt[0] || fmt[1] || itemsize <= 0 || itemsize > 8) return -1;
    const char *codes[] = {"bhilq", "BHILQ", "efd", "?"};
    static const uint8_t code[] = {kDLInt, kDLUInt, kDLFloat, kDLBool};
    for (int i = 0; i < 4; i++)
        if (strchr(codes[i], fmt[0])) {
            *dt = (DLDataType){code[i], (uint8_t)(itemsize * 8), 1};
            return 0;
        }
    return -1;
}

/* _dlpack(array, versioned, copied): a DLPack capsule over the memory of `array` (anything
 * with a strided buffer: sluice.Array, or a numpy copy of one), sharing it. versioned: a
 * "dltensor_versioned" capsule (DLPack 1.0) whose flags say read-only when the buffer is
 * (Sluice's always are) and is-copied when `copied`; else an old-style "dltensor" capsule,
 * which cannot say read-only (sluice.Array.__dlpack__ decides what such a consumer gets). */
static PyObject *mod_dlpack(PyObject *mod, PyObject *args) {
    PyObject *arr;
    int versioned = 0, copied = 0;
    if (!PyArg_ParseTuple(args, "Opp", &arr, &versioned, &copied)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(arr, &view, PyBUF_STRIDES | PyBUF_FORMAT) < 0) return NULL;
    DLDataType dt;
    if (dl_dtype(view.format ? view.format : "B", view.itemsize, &dt) < 0) {
        PyErr_Format(PyExc_BufferError, "DLPack export: dtype format '%s' has no DLPack type",
                     view.format ? view.format : "B");
        PyBuffer_Release(&view);
        return NULL;
    }
    dl_ctx *c = calloc(1, sizeof *c + 2 * sizeof(int64_t) * (size_t)(view.ndim ? view.ndim : 1));
    if (!c) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    c->view = view;
    int64_t *shape = c->dims, *strides = c->dims + view.ndim;
    for (int i = 0; i < view.ndim; i++) {
        shape[i] = view.shape[i];
        if (view.strides[i] % view.itemsize) {
            PyErr_SetString(PyExc_BufferError, "DLPack export: a stride is not a whole number of items");
            PyBuffer_Release(&c->view);
            free(c);
            return NULL;
        }
        strides[i] = view.strides[i] / view.itemsize;
    }
    DLTensor t = {.data = view.buf, .device = {kDLCPU, 0}, .ndim = view.ndim, .dtype = dt,
                  .shape = shape, .strides = strides, .byte_offset = 0};
    void *managed;
    const char *name;
    if (versioned) {
        c->t.v = (DLManagedTensorVersioned){.version = {1, 0}, .manager_ctx = c, .deleter = dl_delete_versioned,
                                            .dl_tensor = t};
        c->t.v.flags = (view.readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0) | (copied ? DLPACK_FLAG_BITMASK_IS_COPIED : 0);
        managed = &c->t.v;
        name = "dltensor_versioned";
    } else {
        c->t.m = (DLManagedTensor){.dl_tensor = t, .manager_ctx = c, .deleter = dl_delete};
        managed = &c->t.m;
        name = "dltensor";
    }
    PyObject *cap = PyCapsule_New(managed, name, dl_capsule_free);
    if (!cap) {
        PyBuffer_Release(&c->view);
        free(c);
    }
    return cap;
}

static PyMethodDef module_methods[] = {
    {"_dlpack", mod_dlpack, METH_VARARGS,
     "_dlpack(array, versioned, copied): a DLPack capsule sharing array's memory (see sluice.Array.__dlpack__)"},
    {NULL},
};

/* ---- module ----------------------------------------------------------------------- */

static struct PyModuleDef sluice_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "sluice._sluice",
    .m_doc = "CPython binding of libsluice's pipeline API (use the `sluice` package).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__sluice(void) {
    if (PyType_Ready(&BufferType) < 0 || PyType_Ready(&PipelineType) < 0 || PyType_Ready(&IterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&sluice_module);
    if (!m) return NULL;
    ErrorType = PyErr_NewExceptionWithDoc(
        "sluice.Error",
        "A Sluice error. str(e) is Sluice's message (file:line:col or file and byte offset, and the "
        "hint); e.status is the status name ('SL_EINVAL'), e.code its number, e.message the message "
        "without the hint, e.hint the hint or None.",
        PyExc_RuntimeError, NULL);
    if (!ErrorType || sl__py_fn_init(m) < 0 || PyModule_AddObjectRef(m, "Error", ErrorType) < 0 ||
        PyModule_AddObjectRef(m, "Buffer", (PyObject *)&BufferType) < 0 ||
        PyModule_AddObjectRef(m, "_Pipeline", (PyObject *)&PipelineType) < 0 ||
        PyModule_AddObjectRef(m, "_Iterator", (PyObject *)&IterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
