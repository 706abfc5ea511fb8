/* Pipelines for the unit tests (see helper_iter.h). */
#include "helper_iter.h"

int sl_test_drain(sl_iter *it) {
    sl_element e;
    sl_element_init(&e);
    int n = 0;
    while (sl_iter_next(it, &e) == SL_OK) {
        n++;
        sl_element_clear(&e);
    }
    sl_element_clear(&e);
    return n;
}
