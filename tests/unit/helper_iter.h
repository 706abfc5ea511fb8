/* Pipelines for the unit tests: reading an iterator (to its end, or one element), a component
 * to add. */
#ifndef SLUICE_TEST_HELPER_ITER_H
#define SLUICE_TEST_HELPER_ITER_H

#include "sluice/pipeline.h"

/* Reads IT until sl_iter_next returns anything but SL_OK (the end or an error), clearing
 * each element. Returns the number of elements read. */
int sl_test_drain(sl_iter *it);

/* Reads one element of IT and drops it. Returns the status of sl_iter_next. */
sl_status sl_test_next_drop(sl_iter *it);

/* Sets E's component NAME to a new float32[N] tensor whose bytes are all BYTE. Returns
 * SL_OK, or the status of the allocation or of sl_element_set (E is then unchanged). */
sl_status sl_test_set_f32(sl_element *e, const char *name, int64_t n, int byte);

#endif
