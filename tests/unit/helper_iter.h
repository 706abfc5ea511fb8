/* Pipelines for the unit tests: opening an iterator, reading it (to its end, or one
 * element), reading a dataset's int64 "value"s, functions that fail on some values or change
 * them, a filter predicate, a range with a map, a component to add. */
#ifndef SLUICE_TEST_HELPER_ITER_H
#define SLUICE_TEST_HELPER_ITER_H

#include "sluice/fn.h"
#include "sluice/pipeline.h"

/* A new iterator over DS (the default options) into *IT, and E made empty for its elements
 * (sl_element_init). Returns the status of sl_iter_create (*IT is NULL after an error). */
sl_status sl_test_open(sl_dataset *ds, sl_iter **it, sl_element *e);

/* Reads IT until sl_iter_next returns anything but SL_OK (the end or an error), clearing
 * each element. Returns the number of elements read. */
int sl_test_drain(sl_iter *it);

/* Reads one element of IT and drops it. Returns the status of sl_iter_next. */
sl_status sl_test_next_drop(sl_iter *it);

/* E's component "value" read as an int64, or -999999 when E has no such component. */
int64_t sl_test_value(const sl_element *e);

/* Reads DS through a new iterator (made with OPTS; NULL: the defaults), putting the scalar
 * int64 component "value" of each element into OUT, up to CAP of them. Returns the number
 * of elements when the stream ended, CAP + 1 when it had more than CAP (the rest unread),
 * or -1 when the iterator could not be made, sl_iter_next returned an error, or an element
 * has no scalar int64 "value". */
int sl_test_values(sl_dataset *ds, const sl_iter_opts *opts, int64_t *out, int cap);

/* An element function (for sl_fn_custom) that fails with SL_EINVAL "value V is unlucky" on
 * the elements whose "value" V has V % 7 == 6, and leaves the others as they are. */
sl_status sl_test_fail_mod7(void *ctx, sl_element *e, const sl_fn_call *call);

/* An element function (for sl_fn_custom) that appends a decimal digit to the int64
 * "value" V in place, V -> 10 V + D: D is CTX (an integer in a pointer), or the element's
 * seed % 7 when CTX is NULL. */
sl_status sl_test_append_digit(void *ctx, sl_element *e, const sl_fn_call *call);

/* A filter predicate (for sl_ds_filter): whether E's "value" is odd. */
int sl_test_is_odd(void *ctx, const sl_element *e);

/* range(0, N) | map(sl_fn_custom(NAME, APPLY, CTX), PARALLELISM, ordered) into *OUT. The
 * map holds the range and the function, so unreffing *OUT frees all three. Returns SL_OK,
 * or the status of the call that failed (*OUT is then NULL). */
sl_status sl_test_range_map(int64_t n, const char *name, sl_fn_apply apply, void *ctx, int parallelism,
                            sl_dataset **out);

/* Sets E's component NAME to a new float32[N] tensor whose bytes are all BYTE. Returns
 * SL_OK, or the status of the allocation or of sl_element_set (E is then unchanged). */
sl_status sl_test_set_f32(sl_element *e, const char *name, int64_t n, int byte);

#endif
