/* Threads in the unit tests (see helper_thread.h). */
#include <stdio.h>

#include "helper_thread.h"

sl_status sl_test_result_set(sl_test_result *r, sl_status s) {
    r->st = s;
    snprintf(r->msg, sizeof r->msg, "%s", s ? sl_errmsg() : "");
    return s;
}
