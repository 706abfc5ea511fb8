/* Threads in the unit tests: what a thread's call returned, with its message (sl_errmsg is
 * per thread, so the thread that failed must copy it). */
#ifndef SLUICE_TEST_HELPER_THREAD_H
#define SLUICE_TEST_HELPER_THREAD_H

#include "sluice/status.h"

typedef struct {
    sl_status st;  /* SL_OK, or the error */
    char msg[512]; /* the error's sl_errmsg() as the thread saw it; "" after SL_OK */
} sl_test_result;

/* Records S in *R, with this thread's sl_errmsg() when S is an error. Returns S. */
sl_status sl_test_result_set(sl_test_result *r, sl_status s);

#endif
