/* Datasets of given values for the sequence-op tests (concatenate, unbatch, rebatch, unique,
 * ...): tf.data's from_tensor_slices / from_generator over small tables, built as
 * range(0, n) | map(a function that looks element i up), and readers of int64 vectors. */
#ifndef SLUICE_TEST_HELPER_SEQ_H
#define SLUICE_TEST_HELPER_SEQ_H

#include "sluice/pipeline.h"

/* Elements {"value": int64 scalar v[i]}, i < n (the values are copied). */
sl_status sl_test_from_i64(const int64_t *v, int n, sl_dataset **out);

/* Elements {NAME: bytes scalar s[i]}, i < n (the strings are copied). */
sl_status sl_test_from_strs(const char *const *s, int n, const char *name, sl_dataset **out);

/* Elements {"value": int64[lens[i]]}, the rows of `flat` in turn (sum(lens) values; copied). */
sl_status sl_test_from_rows(const int64_t *flat, const int *lens, int n, sl_dataset **out);

/* The int64 component "value" of e (a scalar or a vector) into out (at most cap); returns
 * how many values it has, or -1 when e has no int64 "value". */
int sl_test_vec(const sl_element *e, int64_t *out, int cap);

/* Reads every element of ds (an iterator from `start`, sl_iter_create_at), writing each
 * one's "value" vector as "[a b] " into buf (cap bytes): "[0 1] [2 3] ". Returns the
 * number of elements, or -1 after an error (sl_errmsg says which). */
int sl_test_vecs(sl_dataset *ds, int64_t start, char *buf, size_t cap);

/* Component comp of e as numpy prints it, on one line ("7", "[0 1 2]", "[[1 2 3 4] [5 6 7
 * 0]]"; int64 or int32), into buf; "(missing)" without it. Returns buf (or that text). */
const char *sl_test_fmt(const sl_element *e, const char *comp, char *buf, size_t cap);

/* Every element of ds, component comp formatted by sl_test_fmt, joined with ", " into out.
 * Returns the status that ended the stream: SL_END when it ended (and ended again on the
 * next call; SL_EINTERNAL if not), else the error. */
sl_status sl_test_read_all(sl_dataset *ds, const char *comp, char *out, size_t cap);

#endif
