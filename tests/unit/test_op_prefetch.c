/* pipeline/ops/prefetch.c: order and errors kept at every buffer size, the end repeated,
 * a buffer of 0 refused. */
#include <unistd.h>

#include "sluice/fn.h"
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

TEST(test_prefetch_order_errors) {
    sl_dataset *m, *p;
    ASSERT_OK(sl_test_range_map(200, "fail_mod7", sl_test_fail_mod7, NULL, 2, &m));
    int64_t bufs[] = {SL_AUTO, 1, 5};
    for (int k = 0; k < 3; k++) {
        ASSERT_OK(sl_ds_prefetch(m, bufs[k], &p));
        ASSERT_EQ(sl_dataset_cardinality(p), 200);
        sl_iter *it;
        sl_element e;
        ASSERT_OK(sl_test_open(p, &it, &e));
        for (int64_t v = 0; v < 200; v++) {
            sl_status s = sl_iter_next(it, &e);
            if (v % 7 == 6) {
                ASSERT_EQ(s, SL_EINVAL);
                char want[80];
                snprintf(want, sizeof want, "op 'map': fail_mod7: value %lld is unlucky", (long long)v);
                ASSERT_STREQ(sl_errmsg(), want);
                continue;
            }
            ASSERT_OK(s);
            ASSERT_EQ(sl_test_value(&e), v);
            sl_element_clear(&e);
            if (v == 100) usleep(2000); /* let the queue fill */
        }
        ASSERT_EQ(sl_iter_next(it, &e), SL_END);
        ASSERT_EQ(sl_iter_next(it, &e), SL_END);
        sl_iter_close(it);
        sl_dataset_unref(p);
    }
    ASSERT_EQ(sl_ds_prefetch(m, 0, &p), SL_EINVAL);
    sl_dataset_unref(m);
}

int main(void) {
    RUN(test_prefetch_order_errors);
    TEST_MAIN_END();
}
