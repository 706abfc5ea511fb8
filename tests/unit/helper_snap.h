/* Helpers for the snapshot / save / load tests: a counting map upstream, element lists
 * compared bit for bit, and stderr captured to read warnings. */
#ifndef SLUICE_TEST_HELPER_SNAP_H
#define SLUICE_TEST_HELPER_SNAP_H

#include <stdatomic.h>
#include <stdbool.h>

#include "sluice/pipeline.h"

/* Calls of sl_test_snap_fn so far (reset it to 0 before a run). */
extern atomic_int sl_test_snap_calls;

/* range(0, n) | map(value -> {"value": 2*value (int64), "name": bytes "v<value>" (a string
 * of value % 5 + 1 characters), "mat": float32[2,3] of value + 0.5 k, NaN at value 3}),
 * each call counted, then batch(batch) when batch > 0. *out or NULL (status returned). */
sl_status sl_test_snap_upstream(int64_t n, int64_t batch, sl_dataset **out);

/* Every element of one pass over ds into a malloc'd array (*n of them); the pass's final
 * status is returned (SL_END when it read them all). */
int sl_test_snap_collect(sl_dataset *ds, sl_element **out, int *n);
void sl_test_snap_free(sl_element *v, int n);

/* Are a[0..na) and b[0..nb) the same elements, bit for bit (names, dtypes, shapes, bytes)? */
bool sl_test_snap_same(const sl_element *a, int na, const sl_element *b, int nb);

/* Start sending stderr to a file; stop and return what was written (malloc'd, NUL-ended). */
void sl_test_capture_start(void);
char *sl_test_capture_stop(void);

#endif
