/* Pipelines for the unit tests (see helper_iter.h). */
#include <string.h>

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

sl_status sl_test_next_drop(sl_iter *it) {
    sl_element e;
    sl_element_init(&e);
    sl_status s = sl_iter_next(it, &e);
    sl_element_clear(&e);
    return s;
}

sl_status sl_test_set_f32(sl_element *e, const char *name, int64_t n, int byte) {
    int64_t dims[1] = {n};
    sl_tensor t;
    sl_status s = sl_tensor_alloc(&t, SL_DT_F32, 1, dims);
    if (s) return s;
    memset(t.data, byte, (size_t)n * 4);
    s = sl_element_set(e, name, &t);
    if (s) sl_tensor_release(&t);
    return s;
}
