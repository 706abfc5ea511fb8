/* Pipelines for the unit tests: reading an iterator to its end. */
#ifndef SLUICE_TEST_HELPER_ITER_H
#define SLUICE_TEST_HELPER_ITER_H

#include "sluice/pipeline.h"

/* Reads IT until sl_iter_next returns anything but SL_OK (the end or an error), clearing
 * each element. Returns the number of elements read. */
int sl_test_drain(sl_iter *it);

#endif
