/* Private to the files of python/src/: what sluicemodule.c (the types, the iterator, the errors) and
 * pyfn.c (map functions written in Python) share. Every function here is called with the
 * GIL held. */
#ifndef SLUICE_PYTHON_MODULE_PRIV_H
#define SLUICE_PYTHON_MODULE_PRIV_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "sluice/fn.h"
#include "sluice/tensor.h"

/* ---- sluicemodule.c ---- */

/* A new sluice.Buffer taking over the references of *t (left empty); NULL with a Python
 * error set (then *t keeps them). */
PyObject *sl__py_buffer_from(sl_tensor *t);

/* The tensor a sluice.Buffer holds (borrowed, valid while o lives), or NULL when o is not a
 * sluice.Buffer. */
const sl_tensor *sl__py_buffer_tensor(PyObject *o);

/* ---- pyfn.c ---- */

/* Module set-up: the table of exceptions raised inside Python map functions. 0, or -1
 * with a Python error set. */
int sl__py_fn_init(PyObject *module);

/* sl_pipeline_env.find_fn for a dict {NAME: callable} (ctx, borrowed; None or NULL: no
 * functions): NAME() in a config's map becomes an sl_fn that calls callable(buffers) on the
 * map's threads, holding the GIL only for the call. The callable takes a dict {component:
 * sluice.Buffer} and returns a list of (name, kind, value, dtype, extra) tuples (the
 * element that replaces the input; python/sluice/data.py's _Trampoline writes them):
 *   kind 0: value a sluice.Buffer, shared as it is (the input's own tensor);
 *   kind 1: value a C-contiguous buffer (a numpy array) of Sluice dtype `dtype` (a name);
 *           extra a sluice.Buffer whose memory holds those bytes (shared, no copy) or None
 *           (copied into a new buffer);
 *   kind 2: value a list of bytes (copied), extra the shape (a tuple).
 * An exception raised by the callable fails the element with SL_EINVAL "the Python function
 * raised TYPE: MESSAGE [python exception #N]" (the map puts the element's origin, the op
 * and NAME before it), and the exception is kept under N for sl__py_chain_cause (the
 * MAX_PENDING latest ones). Errors met converting the result (a dtype Sluice lacks, a bad
 * shape) are reported the same way, as TypeError / ValueError. Returns SL_OK with a new function,
 * SL_ENOTFOUND when NAME is not in the dict, SL_ENOMEM. */
sl_status sl__py_find_fn(void *ctx, const char *name, sl_fn **out);

/* Remove the marker " [python exception #N]" from msg (in place): N, or -1 when msg has
 * none. */
long long sl__py_strip_marker(char *msg);

/* Set the exception kept under N (see sl__py_find_fn) as the __cause__ (and __context__) of
 * the Python exception now raised, and forget it. Nothing when there is none. */
void sl__py_chain_cause(long long n);

#endif
